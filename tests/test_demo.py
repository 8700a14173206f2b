"""The chat demo without a browser: sessions, the chat handler over a real small pipeline,
evidence HTML, the pipeline cache and the `convqa demo` command."""
from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from html import escape
from pathlib import Path

import pytest
from demo_helpers import (
                          FILM_TITLE,
                          FIRST_QUESTION,
                          FOLLOW_UP,
                          READER,
                          build_film_config,
                          )

from apps.chat import EMPTY_QUESTION, ask, reply_text
from apps.pipelines import (
                            NO_READER,
                            PipelineCache,
                            config_pipelines,
                            phrase_index_paths,
                            with_phrase_indexes,
                            )
from apps.render import (
                         chat_messages,
                         evidence_html,
                         highlight,
                         passages_html,
                         timings_text,
                         )
from apps.session import ChatSession
from convqa.errors import ConfigError, DataError
from convqa.evidence import span_is_valid
from convqa.front.cli.main import build_parser, main
from convqa.front.embedded import RETRIEVER_CHOICES
from convqa.types import Answer, Hit, Passage, Turn

MARK = re.compile(r'<mark class="convqa-answer">(.*?)</mark>', re.DOTALL)


@pytest.fixture(scope="module")
def film_config(tmp_path_factory):
    config = build_film_config(tmp_path_factory.mktemp("films"))
    return dict(config, reader=READER)


@pytest.fixture(scope="module")
def pipelines(film_config):
    """bm25 over the film passages; reader "extractive" (the shipped one, loaded on first use)
    or "none"."""
    return config_pipelines(film_config, name="bm25")


def evidence_title(html: str) -> str:
    match = re.search(r'<h4 class="convqa-title">(.*?)</h4>', html)
    assert match, html
    return match.group(1)


# -- session state ----------------------------------------------------------------------------

def test_session_is_immutable_and_keeps_turns_in_order():
    empty = ChatSession()
    one = empty.add("Who painted it?", "Leonardo", "Leonardo")
    two = one.add("When?", None, "(retrieval only) Top passage: Mona Lisa")
    assert len(empty) == 0 and len(one) == 1 and len(two) == 2
    assert two.history() == [Turn("Who painted it?", "Leonardo"), Turn("When?", None)]
    assert two.messages() == [
        {"role": "user", "content": "Who painted it?"},
        {"role": "assistant", "content": "Leonardo"},
        {"role": "user", "content": "When?"},
        {"role": "assistant", "content": "(retrieval only) Top passage: Mona Lisa"}]
    with pytest.raises(AttributeError):
        one.turns = ()  # frozen: a session value is never changed in place


def test_chat_messages_are_escaped():
    messages = [{"role": "user", "content": "<b>x</b> & y"}]
    assert chat_messages(messages) == [{"role": "user", "content": "&lt;b&gt;x&lt;/b&gt; &amp; y"}]


# -- rendering --------------------------------------------------------------------------------

def test_highlight_marks_exactly_the_span_and_escapes():
    text = 'Paris <is> the "capital" & more'
    assert text[6:10] == "<is>"
    assert highlight(text, 6, 10) == ('Paris <mark class="convqa-answer">&lt;is&gt;</mark> the '
                                      '&quot;capital&quot; &amp; more')


@pytest.mark.parametrize("start,end", [(None, None), (3, None), (5, 5), (6, 3), (-1, 4),
                                       (0, 99), (True, 4)])
def test_highlight_ignores_spans_that_do_not_fit(start, end):
    text = "a <b> c"
    assert not span_is_valid(text, start, end)
    assert highlight(text, start, end) == "a &lt;b&gt; c"


def test_evidence_html_title_text_and_mark():
    passage = Passage("p#0", "Casablanca is a 1942 film <i>directed</i> by Michael Curtiz.",
                      "Casablanca <script>")
    start = passage.text.index("Michael Curtiz")
    answer = Answer("Michael Curtiz", 2.5, "p#0", start, start + 14, passage)
    html = evidence_html(answer, [passage])
    assert evidence_title(html) == "Casablanca &lt;script&gt;"
    assert MARK.findall(html) == ["Michael Curtiz"]
    assert "&lt;i&gt;directed&lt;/i&gt;" in html and "<i>" not in html and "<script>" not in html
    assert "passage p#0" in html and "answer score 2.50" in html
    assert "not marked" not in html


def test_evidence_html_falls_back_to_the_retrieved_passage_and_notes_a_bad_span():
    passage = Passage("p#1", "Short text.", "Title")
    answer = Answer("elsewhere", 1.0, "p#1", 40, 49, evidence=None)  # span beyond the text
    html = evidence_html(answer, [Passage("q", "other", "Other"), passage])
    assert evidence_title(html) == "Title" and "Short text." in html
    assert not MARK.findall(html) and "The answer span is not marked" in html
    assert "not available" in evidence_html(Answer("x", passage_id="gone"), [passage])
    assert "retrieval only" in evidence_html(None, [passage])


def test_passages_html_lists_hits_in_rank_order_and_marks_only_the_answer_passage():
    passages = [Passage("a", "Alpha & beta.", "A<1>"), Passage("b", "Beta gamma.", "B")]
    hits = [Hit("a", 3.25, 1), Hit("b", 1.5, 2)]
    answer = Answer("gamma", 1.0, "b", 5, 10, passages[1])
    html = passages_html(hits, passages, answer)
    assert html.index("A&lt;1&gt;") < html.index("<strong>B</strong>")
    assert "(score 3.25, id a)" in html and "(score 1.50, id b)" in html
    assert "Alpha &amp; beta." in html
    assert MARK.findall(html) == ["gamma"]
    assert "Nothing matched" in passages_html([], [])


def test_timings_text():
    assert timings_text({"history": 0.123, "retrieve": 2.0}) == \
        "Latency: history 0.1 ms · retrieve 2.0 ms · total 2.1 ms"
    assert timings_text({}) == ""


# -- the chat handler over a real pipeline ----------------------------------------------------

def test_retrieval_only_turn(pipelines):
    view = ask(pipelines, ChatSession(), FIRST_QUESTION, "bm25", NO_READER, 3)
    assert not view.notice
    assert view.session.history() == [Turn(FIRST_QUESTION, None)]
    assert view.messages[1] == {"role": "assistant",
                                "content": f"(retrieval only) Top passage: {FILM_TITLE}"}
    assert "retrieval only" in view.evidence
    titles = re.findall(r'<li class="convqa-passage"><strong>(.*?)</strong>', view.passages)
    assert len(titles) == 3 and titles[0] == FILM_TITLE  # top-k as asked, best first
    assert view.latency.startswith("Latency: history ") and "retrieve" in view.latency
    assert "read" not in view.latency and "total" in view.latency


def test_answer_evidence_and_follow_up_use_the_sessions_own_history(pipelines):
    first = ask(pipelines, ChatSession(), FIRST_QUESTION, "bm25", "extractive", 5)
    assert first.messages[-1]["content"] == "Stanley Kubrick"
    assert evidence_title(first.evidence) == FILM_TITLE
    assert MARK.findall(first.evidence) == ["Stanley Kubrick"]
    # the marked passage is the whole passage text, escaped, with only the mark added
    shown = re.search(r'<p class="convqa-text">(.*?)</p>', first.evidence).group(1)
    passage = pipelines.get("bm25", "extractive").passages.get("2001:_A_Space_Odyssey#0")
    assert MARK.sub(r"\1", shown) == escape(passage.text)
    assert " read " in first.latency

    follow = ask(pipelines, first.session, FOLLOW_UP, "bm25", "extractive", 5)
    assert len(follow.session) == 2 and len(first.session) == 1  # the old value is untouched
    # current-first history: the follow-up, then the last answer and question, newest first
    assert follow.query == f"{FOLLOW_UP} [SEP] Stanley Kubrick [SEP] {FIRST_QUESTION}"
    assert evidence_title(follow.evidence) == FILM_TITLE
    answer = follow.session.history()[-1].answer
    assert MARK.findall(follow.evidence) == [escape(answer)]

    other = ask(pipelines, ChatSession(), FOLLOW_UP, "bm25", "extractive", 5)  # no history
    assert len(other.session) == 1
    assert evidence_title(other.evidence) != FILM_TITLE


def test_empty_question_changes_nothing_and_builds_nothing():
    calls = []
    cache = PipelineCache(lambda r, d: calls.append((r, d)), ("bm25",), ("none",))
    session = ChatSession().add("q", "a", "a")
    for question in ("", "   ", None):
        view = ask(cache, session, question, "bm25", "none", 5)
        assert view.session is session and view.notice == EMPTY_QUESTION
        assert view.evidence == view.passages == view.latency == ""
    view = ask(cache, session, "who?", "bm25", "none", -2)  # the API takes any number
    assert view.session is session and view.notice == "top-k must be at least 1."
    assert calls == []


def test_errors_become_a_notice_and_keep_the_session(tmp_path):
    def build(retriever, reader):
        raise DataError("not a passage store", tmp_path / "missing")

    cache = PipelineCache(build, ("bm25",), ("none",))
    session = ChatSession().add("q", "a", "a")
    view = ask(cache, session, "who?", "bm25", "none", 5)
    assert view.session is session
    assert view.notice == f"Error: {tmp_path / 'missing'}: not a passage store"
    view = ask(cache, session, "who?", "phrase", "none", 5)
    assert view.notice == "Error: demo: unknown retriever 'phrase' (choices: bm25)"


def test_reply_text_without_passages():
    from convqa.pipeline import PipelineResult

    nothing = PipelineResult("q", "q", hits=[], passages=[])
    assert reply_text(nothing) == "(retrieval only) Nothing matched."


# -- the Gradio handlers and layout -----------------------------------------------------------

def test_send_and_new_conversation_handlers(pipelines):
    from apps.demo import respond_outputs, restart_outputs

    box, session, chat, notice, evidence, passages, latency = respond_outputs(
        pipelines, FIRST_QUESTION, None, "bm25", NO_READER, 2)
    assert box == "" and len(session) == 1 and len(chat) == 2 and notice == ""
    assert "retrieval only" in evidence
    assert passages.count("<li") == 2 and "Latency:" in latency
    assert f'<small class="convqa-query">Query: {escape(FIRST_QUESTION)}</small>' in latency
    kept = respond_outputs(pipelines, "  ", session, "bm25", NO_READER, 2)
    assert kept[0] == "  " and kept[1] is session and EMPTY_QUESTION in kept[3]
    assert restart_outputs() == ("", ChatSession(), [], "", "", "", "")


def test_build_demo_offers_the_caches_choices():
    gr = pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')

    from apps.demo import ANSWER_QUEUE, build_demo

    cache = PipelineCache(lambda r, d: None, ("bm25", "phrase"), ("none",), ("phrase", "none"))
    demo = build_demo(cache, top_k=50, max_top_k=10)
    assert isinstance(demo, gr.Blocks) and demo.analytics_enabled is False
    by_id = {block.elem_id: block for block in demo.blocks.values()
             if getattr(block, "elem_id", None)}
    retriever = by_id["convqa-retriever"]
    assert [value for _, value in retriever.choices] == ["bm25", "phrase"]
    assert retriever.value == "phrase"
    assert by_id["convqa-top-k"].value == 10 and by_id["convqa-top-k"].maximum == 10
    assert not cache.is_built("phrase", "none")  # nothing is built until asked
    # both ways of asking (button, Enter) share one queue that answers one question at a time
    answering = [f for f in demo.fns.values() if {t[1] for t in f.targets} & {"click", "submit"}
                 and f.concurrency_id == ANSWER_QUEUE]
    assert sorted(t[1] for f in answering for t in f.targets) == ["click", "submit"]
    assert all(f.concurrency_limit == 1 for f in answering)


# -- the pipeline cache -----------------------------------------------------------------------

def test_cache_builds_each_choice_once_across_threads():
    calls = []

    def build(retriever, reader):
        calls.append((retriever, reader))
        time.sleep(0.2)
        return object()

    cache = PipelineCache(build, ("bm25", "dense"), ("extractive", "none"))
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("bm25", "none")))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [("bm25", "none")] and len({id(p) for p in got}) == 1
    assert cache.get("dense", "none") is not got[0]
    assert calls == [("bm25", "none"), ("dense", "none")]
    assert cache.default == ("bm25", "extractive")
    with pytest.raises(ConfigError, match="unknown reader 'fid' \\(choices: extractive, none\\)"):
        cache.get("bm25", "fid")
    with pytest.raises(ConfigError, match="at least one retriever"):
        PipelineCache(build, (), ("none",))


def test_config_pipelines_from_yaml(tmp_path, film_config):
    import yaml

    path = tmp_path / "films.yaml"
    path.write_text(yaml.safe_dump(film_config), encoding="utf-8")
    cache = config_pipelines(path)
    assert cache.retrievers == ("films",) and cache.readers == ("extractive", NO_READER)
    assert cache.default == ("films", "extractive")
    assert cache.get("films", NO_READER).reader is None
    no_reader = {k: v for k, v in film_config.items() if k != "reader"}
    assert config_pipelines(no_reader).readers == (NO_READER,)

    bad = tmp_path / "bad.yaml"
    bad.write_text("passages: x\nretriever: [unclosed\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.yaml:\d+: malformed YAML"):
        config_pipelines(bad)


# -- the command ------------------------------------------------------------------------------

def test_parser_defaults_bind_localhost():
    args = build_parser().parse_args(["demo"])
    assert (args.host, args.port, args.config, args.retriever, args.no_reader,
            args.cache_dir, args.phrase_index) == ("127.0.0.1", 7860, None, "dense", False, None,
                                                   [])
    args = build_parser().parse_args(["demo", "--retriever", "bm25", "--no-reader",
                                      "--port", "8000"])
    assert (args.retriever, args.no_reader, args.port) == ("bm25", True, 8000)


def test_missing_gradio_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` raises ImportError
    assert main(["demo", "--config", "unused.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith('convqa demo: error: the demo needs gradio, a convqa dependency '
                             'missing here: pip install "gradio>=6"')


def test_bad_port_and_missing_config_are_one_line(tmp_path, capsys):
    assert main(["demo", "--port", "70000"]) == 2
    assert capsys.readouterr().err.strip() == \
        "convqa demo: error: --port must be between 1 and 65535, got 70000"
    missing = tmp_path / "nope.yaml"
    assert main(["demo", "--config", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convqa demo: error: ") and str(missing) in err[0]


def test_command_launches_locally_without_share_or_analytics(monkeypatch, tmp_path, film_config,
                                                              capsys):
    gr = pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')
    import yaml

    monkeypatch.delenv("GRADIO_ANALYTICS_ENABLED", raising=False)
    path = tmp_path / "films.yaml"
    no_reader = {k: v for k, v in film_config.items() if k != "reader"}
    path.write_text(yaml.safe_dump(no_reader), encoding="utf-8")
    launched = {}
    monkeypatch.setattr(gr.Blocks, "launch",
                        lambda self, **kwargs: launched.update(kwargs, blocks=self))
    assert main(["demo", "--config", str(path), "--port", "7999"]) == 0
    assert launched["server_name"] == "127.0.0.1" and launched["server_port"] == 7999
    assert launched["share"] is False and launched["inbrowser"] is False
    assert launched["blocks"].analytics_enabled is False
    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"
    assert "preparing the films + none pipeline" in capsys.readouterr().err


def test_port_in_use_is_one_line(monkeypatch, tmp_path, film_config, capsys):
    import yaml

    pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')

    path = tmp_path / "films.yaml"
    no_reader = {k: v for k, v in film_config.items() if k != "reader"}
    path.write_text(yaml.safe_dump(no_reader), encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--config", str(path), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"convqa demo: error: cannot serve on 127.0.0.1:{port}: ")


# -- a phrase index as an answering path ------------------------------------------------------

@pytest.fixture(scope="module")
def phrase_dir(film_config, tmp_path_factory):
    """A tiny random phrase model's index over the film passages (`convqa index --phrase`):
    its answers are random, but real phrases of real passages."""
    from phrase_model_helpers import tiny_phrase_index

    return tiny_phrase_index(tmp_path_factory.mktemp("phrase"), Path(film_config["passages"]))


@pytest.fixture(scope="module")
def phrase(phrase_dir):
    """The phrase index's path name: its choice in the page."""
    return f"phrase:{Path(phrase_dir).resolve().name}"


@pytest.fixture(scope="module")
def with_phrase(film_config, phrase_dir):
    """bm25 (reader extractive or none) and the phrase index (no reader)."""
    return with_phrase_indexes(config_pipelines(film_config, name="bm25"), [phrase_dir])


def test_phrase_index_answers_without_a_reader_and_marks_its_phrase(with_phrase, phrase):
    assert with_phrase.retrievers == ("bm25", phrase)
    assert with_phrase.default == (phrase, NO_READER)
    assert with_phrase.readers_for("bm25") == ("extractive", NO_READER)
    assert with_phrase.readers_for(phrase) == (NO_READER,)
    first = ask(with_phrase, ChatSession(), FIRST_QUESTION, phrase, NO_READER, 3)
    assert not first.notice
    pipeline = with_phrase.get(phrase, NO_READER)
    expected = pipeline.answer(FIRST_QUESTION, [], 3)
    answer = expected.answer
    assert first.session.history() == [Turn(FIRST_QUESTION, answer.text)]
    assert first.messages[-1]["content"] == escape(answer.text, quote=False)
    # the evidence is the phrase's passage, the mark exactly its character span
    passage = pipeline.store.get(answer.passage_id)
    assert passage.text[answer.start:answer.end] == answer.text
    assert evidence_title(first.evidence) == escape(passage.title)
    shown = re.search(r'<p class="convqa-text">(.*?)</p>', first.evidence).group(1)
    assert shown == highlight(passage.text, answer.start, answer.end)
    assert MARK.findall(shown) == [escape(answer.text)]
    assert MARK.sub(r"\1", shown) == escape(passage.text)
    # the passages of the best phrases, each once, best first
    titles = re.findall(r'<li class="convqa-passage"><strong>(.*?)</strong>', first.passages)
    stored = [pipeline.store.get(hit.passage_id) for hit in expected.hits]
    assert 1 <= len(titles) <= 3 and titles == [escape(p.title or p.id) for p in stored]
    assert "encode" in first.latency and "search" in first.latency
    assert " read " not in first.latency
    # the follow-up is asked with this session's history, formatted by the phrase model
    follow = ask(with_phrase, first.session, FOLLOW_UP, phrase, NO_READER, 3)
    assert follow.query == pipeline.format_query(FOLLOW_UP, [Turn(FIRST_QUESTION, answer.text)])
    assert follow.query.startswith(FOLLOW_UP) and answer.text in follow.query
    # a reader for the phrase index is refused (the page does not offer one), nothing changes
    refused = ask(with_phrase, first.session, FOLLOW_UP, phrase, "extractive", 3)
    assert refused.session is first.session
    assert refused.notice == (f"Error: demo: '{phrase}' takes no reader 'extractive' "
                              "(choices: none)")
    assert not with_phrase.is_built("bm25", "extractive")  # other paths: built when chosen


def test_reader_dropdown_follows_the_retriever(with_phrase, phrase):
    gr = pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')

    from apps.demo import build_demo, reader_choices

    assert reader_choices(with_phrase, phrase, "extractive") == {
        "choices": [NO_READER], "value": NO_READER}
    assert reader_choices(with_phrase, "bm25", NO_READER) == {
        "choices": ["extractive", NO_READER], "value": NO_READER}  # kept when allowed
    demo = build_demo(with_phrase)
    by_id = {block.elem_id: block for block in demo.blocks.values()
             if getattr(block, "elem_id", None)}
    retriever, reader = by_id["convqa-retriever"], by_id["convqa-reader"]
    assert [v for _, v in retriever.choices] == ["bm25", phrase]
    assert retriever.value == phrase
    assert [v for _, v in reader.choices] == [NO_READER] and reader.value == NO_READER
    changes = [f for f in demo.fns.values() if f.targets == [(retriever._id, "change")]]
    assert len(changes) == 1 and changes[0].outputs == [reader] and changes[0].queue is False
    update = changes[0].fn("bm25", NO_READER)
    assert isinstance(update, gr.Dropdown)
    assert [v for _, v in update.choices] == ["extractive", NO_READER] and update.value == "none"


def test_cache_with_readers_per_retriever(tmp_path):
    calls = []
    cache = PipelineCache(lambda r, d: calls.append((r, d)) or (r, d), ("bm25", "phrase"),
                          {"bm25": ("extractive", "none"), "phrase": ("none",)})
    assert cache.readers == ("extractive", "none") and cache.default == ("bm25", "extractive")
    assert cache.get("phrase", "none") == ("phrase", "none")
    with pytest.raises(ConfigError, match=r"'phrase' takes no reader 'extractive' "
                                          r"\(choices: none\)"):
        cache.get("phrase", "extractive")
    assert calls == [("phrase", "none")]
    with pytest.raises(ConfigError, match="takes no reader 'none'"):
        PipelineCache(lambda r, d: None, ("bm25", "phrase"),
                      {"bm25": ("none",), "phrase": ("fid",)}, ("phrase", "none"))
    with pytest.raises(ConfigError, match="at least one retriever and one reader"):
        PipelineCache(lambda r, d: None, ("bm25", "phrase"), {"bm25": ("none",)})
    # several phrase indexes are told apart by their folder names
    assert list(phrase_index_paths(["a/v1", "b/v2"])) == ["phrase:v1", "phrase:v2"]
    with pytest.raises(ConfigError, match="two phrase indexes are named 'v1'"):
        phrase_index_paths(["a/v1", "b/v1"])
    with pytest.raises(DataError, match="no such phrase index folder"):
        with_phrase_indexes(None, [tmp_path / "missing"])
    name = f"phrase:{tmp_path.name}"
    taken = PipelineCache(lambda r, d: None, (name,), ("none",))
    with pytest.raises(ConfigError, match=f"a retriever is already named '{name}'"):
        with_phrase_indexes(taken, [tmp_path])


def test_phrase_index_flag_errors_are_one_line(tmp_path, capsys):
    pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')

    missing = tmp_path / "nope"
    assert main(["demo", "--phrase-index", str(missing), "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"convqa demo: error: {missing}: no such phrase index folder"]
    (tmp_path / "empty").mkdir()
    assert main(["demo", "--phrase-index", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("convqa demo: error: ") and "not a phrase index" in err[-1]
    assert len(err) == 2 and "preparing the phrase:empty + none pipeline" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # nothing embedded built


def test_command_offers_the_phrase_index_with_config_or_embedded_paths(
        monkeypatch, tmp_path, film_config, phrase_dir, phrase, capsys):
    gr = pytest.importorskip("gradio", reason='needs gradio (pip install "convqa[demo]")')
    import yaml

    path = tmp_path / "films.yaml"
    no_reader = {k: v for k, v in film_config.items() if k != "reader"}
    path.write_text(yaml.safe_dump(no_reader), encoding="utf-8")
    launched = []
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kwargs: launched.append(self))

    def choices(blocks):
        by_id = {b.elem_id: b for b in blocks.blocks.values() if getattr(b, "elem_id", None)}
        box = by_id["convqa-retriever"]
        return [v for _, v in box.choices], box.value

    capsys.readouterr()
    assert main(["demo", "--config", str(path), "--phrase-index", str(phrase_dir)]) == 0
    assert choices(launched[-1]) == (["films", phrase], phrase)
    err = capsys.readouterr().err  # both paths loaded before serving
    assert f"preparing the {phrase} + none pipeline" in err
    assert "preparing the films + none pipeline" in err
    cache = tmp_path / "cache"
    assert main(["demo", "--phrase-index", str(phrase_dir), "--cache-dir", str(cache)]) == 0
    assert choices(launched[-1]) == ([*RETRIEVER_CHOICES, phrase], phrase)
    err = capsys.readouterr().err
    assert err.count("preparing") == 1 and not cache.exists()  # embedded: built when chosen
