"""The chat demo in a real browser: headless Chromium driven by selenium.

The app serves a small real pipeline (BM25 over ~40 film articles of the vital-article
summaries, the shipped extractive reader) on 127.0.0.1. Two browser sessions check that each
keeps its own conversation: the follow-up "When was it released?" finds the film's passage
only in the session that asked about the film first. Screenshots go to $CONVQA_TEST_ARTIFACTS
(default: test-artifacts/ at the repository root).

Needs selenium, gradio, Chromium and its driver (Debian: `apt-get install chromium
chromium-driver`); $CONVQA_CHROMIUM / $CONVQA_CHROMEDRIVER override where they are looked for.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from demo_helpers import (
    FILM_TITLE,
    FIRST_QUESTION,
    FOLLOW_UP,
    READER,
    build_film_config,
    free_port,
)

pytest.importorskip("selenium", reason="the browser test needs selenium (pip install selenium)")
pytest.importorskip("gradio", reason='the browser test needs gradio (pip install "convqa[demo]")')

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[1]
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-quic", "--window-size=1280,1500")
WAIT_S = 30


def _executable(env: str, names: tuple[str, ...]) -> str | None:
    if os.environ.get(env):
        return os.environ[env] if Path(os.environ[env]).is_file() else None
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file()
                                       else None)
        if found:
            return found
    return None


CHROMIUM = _executable("CONVQA_CHROMIUM", ("chromium", "chromium-browser", "google-chrome"))
CHROMEDRIVER = _executable("CONVQA_CHROMEDRIVER", ("chromedriver",))
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="the browser test needs Chromium and chromedriver (Debian: apt-get install -y "
           "chromium chromium-driver; or set CONVQA_CHROMIUM / CONVQA_CHROMEDRIVER)")


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("CONVQA_TEST_ARTIFACTS") or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    from apps.demo import build_demo, launch
    from apps.pipelines import config_pipelines

    config = dict(build_film_config(tmp_path_factory.mktemp("films")), reader=READER)
    pipelines = config_pipelines(config, name="bm25")
    pipelines.get(*pipelines.default)  # load the reader now, not inside the first click
    demo = build_demo(pipelines)
    port = free_port()
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture
def browser(tmp_path):
    """A factory of headless Chromium sessions, each with a fresh profile; all quit at the end."""
    drivers = []

    def start():
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROME_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={tmp_path / f'profile-{len(drivers)}'}")
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.quit()


# Read in one script call: a snapshot of the page, never a reference that a re-render can
# make stale between two WebDriver calls.
MESSAGES_JS = """
return Array.from(document.querySelectorAll(
    '#convqa-chat [data-testid="user"], #convqa-chat [data-testid="bot"]'))
  .map(e => [e.getAttribute('data-testid'), e.innerText.trim()]);
"""
EVIDENCE_JS = """
const box = document.getElementById('convqa-evidence-box');
const title = box && box.querySelector('.convqa-title');
return [title ? title.innerText.trim() : '',
        box ? Array.from(box.querySelectorAll('mark.convqa-answer')).map(m => m.innerText) : []];
"""


def wait(driver):
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,))


def messages(driver) -> list[tuple[str, str]]:
    """The chat as (role, text) pairs, in order."""
    return [tuple(pair) for pair in driver.execute_script(MESSAGES_JS)]


def evidence(driver) -> tuple[str, list[str]]:
    """The evidence title and the highlighted span(s) shown in the page."""
    title, marks = driver.execute_script(EVIDENCE_JS)
    return title, marks


def wait_for_messages(driver, count: int) -> list[tuple[str, str]]:
    """The chat once it has `count` messages and the evidence of the last answer is shown."""
    wait(driver).until(lambda d: len(messages(d)) == count and evidence(d)[0])
    return messages(driver)


def open_page(driver, url: str):
    driver.get(url)
    return wait(driver).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#convqa-question textarea"))


def ask(driver, question: str, press_enter: bool = False) -> None:
    box = driver.find_element(By.CSS_SELECTOR, "#convqa-question textarea")
    box.send_keys(question)
    if press_enter:
        box.send_keys(Keys.ENTER)
    else:
        driver.find_element(By.ID, "convqa-ask").click()


def test_two_sessions_chat_with_evidence(app_url, browser):
    started = time.perf_counter()
    first = browser()
    open_page(first, app_url)
    assert messages(first) == []

    ask(first, FIRST_QUESTION)
    chat = wait_for_messages(first, 2)
    assert chat[0] == ("user", FIRST_QUESTION)
    assert chat[1][0] == "bot" and "Kubrick" in chat[1][1]
    title, marks = evidence(first)
    assert title == FILM_TITLE and marks == [chat[1][1]]
    latency = first.find_element(By.ID, "convqa-latency-box").text
    assert re.search(r"retrieve [\d.]+ ms .*read [\d.]+ ms .*total [\d.]+ ms", latency), latency

    # the retrieved passages, on demand
    first.find_element(By.CSS_SELECTOR, "#convqa-passages-accordion button.label-wrap").click()
    items = wait(first).until(lambda d: d.execute_script(
        "return Array.from(document.querySelectorAll('#convqa-passages-box li.convqa-passage'))"
        ".map(e => e.innerText)"))
    assert len(items) == 5
    assert items[0].startswith(FILM_TITLE) and "(score " in items[0]

    # a follow-up that only makes sense with the history
    ask(first, FOLLOW_UP, press_enter=True)
    chat = wait_for_messages(first, 4)
    assert chat[2] == ("user", FOLLOW_UP)
    title, marks = evidence(first)
    assert title == FILM_TITLE and marks == [chat[3][1]]
    query = first.find_element(By.CSS_SELECTOR, "#convqa-latency-box .convqa-query").text
    assert query == f"Query: {FOLLOW_UP} [SEP] {chat[1][1]} [SEP] {FIRST_QUESTION}"
    first.save_screenshot(str(artifacts_dir() / "demo-session-1.png"))

    # a second browser session starts empty and has no history: the same follow-up lands
    # elsewhere
    second = browser()
    open_page(second, app_url)
    assert messages(second) == []
    ask(second, FOLLOW_UP)
    chat = wait_for_messages(second, 2)
    assert chat[0] == ("user", FOLLOW_UP)
    title, _ = evidence(second)
    assert title != FILM_TITLE
    second.save_screenshot(str(artifacts_dir() / "demo-session-2.png"))
    assert len(messages(first)) == 4  # the first session's page is untouched

    # "New conversation" forgets the first session's history
    first.find_element(By.ID, "convqa-new").click()
    wait(first).until(lambda d: messages(d) == [] and evidence(d)[0] == "")
    ask(first, FOLLOW_UP)
    wait_for_messages(first, 2)
    assert evidence(first)[0] != FILM_TITLE

    # everything the page loaded came from the demo's own server: nothing from the internet
    resources = first.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(url.startswith(app_url) for url in resources), resources
    print(f"browser test: {time.perf_counter() - started:.1f} s in the browser")
