"""`convqa serve` as a real server: a subprocess on a free loopback port, spoken to over HTTP.

The fast test serves BM25 over ~40 film articles with the server code of `convqa serve`,
each answer held 0.3 s so that a SIGTERM arrives while requests are in flight: they must all
be answered before the process ends. The slow one runs the `convqa serve` command itself with
the shipped extractive reader and asks the README's conversation ("Who directed 2001: A
Space Odyssey?" then "When was it released?").
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection
from pathlib import Path

import pytest
import yaml
from demo_helpers import FILM_TITLE, FIRST_QUESTION, FOLLOW_UP, READER, build_film_config

REPO = Path(__file__).resolve().parents[1]


def http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class ServerProcess:
    """A server in a subprocess (`command`, run in the checkout); its port, read from the line
    it prints when it listens."""

    def __init__(self, command: list[str]):
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
        self.process = subprocess.Popen(
            [sys.executable, *command], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = f"http://127.0.0.1:{self._port()}"

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def _port(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in self.lines:
                match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if match:
                    return int(match.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("the server did not start:\n" + "\n".join(self.lines))

    def wait_ready(self, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = http("GET", f"{self.url}/health")
            if status == 200:
                return body
            assert body["status"] == "loading", body
            time.sleep(0.1)
        raise AssertionError("the server did not load in time")

    def in_flight(self) -> int:
        """Requests being answered or waiting for a worker."""
        workers = http("GET", f"{self.url}/health")[1]["workers"]
        return workers["busy"] + workers["queued"]

    def sigterm_with_requests_in_flight(self, questions: list[str]) -> list[tuple[int, dict]]:
        """Send `questions` at once, SIGTERM once the server holds them all; the replies."""
        with ThreadPoolExecutor(len(questions)) as pool:
            replies = [pool.submit(http, "POST", f"{self.url}/v1/answer", {"question": q})
                       for q in questions]
            deadline = time.monotonic() + 30
            while self.in_flight() < len(questions) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self.in_flight() == len(questions), "the requests did not arrive together"
            self.process.send_signal(signal.SIGTERM)
            return [reply.result(timeout=120) for reply in replies]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


QUESTIONS = ["Who directed Jaws?", "Who directed Psycho?", "Who directed Casablanca?"]


def check_drained(server: ServerProcess, replies: list[tuple[int, dict]]) -> None:
    assert [status for status, _ in replies] == [200] * len(replies)
    assert server.process.wait(60) in (0, -signal.SIGTERM)
    log = "\n".join(server.lines)
    assert "Application shutdown complete" in log and "Traceback" not in log


@pytest.fixture
def delayed_server(tmp_path):
    server = ServerProcess(["tests/serve_helpers.py", str(tmp_path), "0.3"])
    yield server
    server.stop()


def test_sigterm_finishes_the_requests_in_flight(delayed_server):
    delayed_server.wait_ready()
    # a kept-alive connection answers at once: no ~40 ms Nagle / delayed-ACK stall per reply
    host, port = delayed_server.url.rsplit("/", 1)[1].split(":")
    connection = HTTPConnection(host, int(port), timeout=30)
    took = []
    for _ in range(5):
        began = time.perf_counter()
        connection.request("GET", "/health")
        assert connection.getresponse().read()
        took.append(time.perf_counter() - began)
    connection.close()
    assert sorted(took)[2] < 0.035, took
    status, body = http("POST", f"{delayed_server.url}/v1/answer",
                        {"question": FIRST_QUESTION, "conversation_id": "a"})
    assert status == 200 and body["passages"][0]["title"] == FILM_TITLE
    replies = delayed_server.sigterm_with_requests_in_flight(QUESTIONS)
    check_drained(delayed_server, replies)
    assert [body["passages"][0]["title"] for _, body in replies] == [
        "Jaws (film)", "Psycho (1960 film)", "Casablanca (film)"]


@pytest.fixture
def command_server(tmp_path):
    config = tmp_path / "films.yaml"
    config.write_text(yaml.safe_dump(dict(build_film_config(tmp_path), reader=READER)),
                      encoding="utf-8")
    server = ServerProcess(["-m", "convqa.front.cli.main", "serve", "--port", "0", "--config",
                            str(config), "--workers", "1", "--queue-size", "8"])
    yield server
    server.stop()


@pytest.mark.slow
def test_convqa_serve_answers_the_issue_conversation_then_drains(command_server):
    """~30 s on 2 cores: the shipped reader loads, then answers five questions."""
    server = command_server
    health = server.wait_ready()
    assert health["workers"] == {"workers": 1, "replicas": 1, "busy": 0, "queued": 0,
                                 "queue_size": 8}
    status, first = http("POST", f"{server.url}/v1/answer",
                         {"question": FIRST_QUESTION, "conversation_id": "issue-16"})
    assert status == 200 and first["pipeline"] == "films+extractive"
    assert "Kubrick" in first["answer"]
    evidence = first["evidence"]
    assert evidence["title"] == FILM_TITLE
    assert evidence["text"][evidence["start"]:evidence["end"]] == first["answer"]

    status, follow = http("POST", f"{server.url}/v1/answer",
                          {"question": FOLLOW_UP, "conversation_id": "issue-16"})
    assert status == 200 and follow["history_turns"] == 1
    assert follow["query"] == f"{FOLLOW_UP} [SEP] {first['answer']} [SEP] {FIRST_QUESTION}"
    assert follow["evidence"]["title"] == FILM_TITLE and "1968" in follow["answer"]

    status, paths = http("GET", f"{server.url}/v1/pipelines")
    assert [p["name"] for p in paths["pipelines"]] == ["films+extractive", "films"]

    # three requests in flight (one answering, two queued), then SIGTERM: all are answered
    replies = server.sigterm_with_requests_in_flight(QUESTIONS)
    check_drained(server, replies)
    assert all(body["answer"] for _, body in replies)
