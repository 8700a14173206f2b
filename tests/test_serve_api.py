"""The HTTP API of `convqa serve` through FastAPI's test client, over a small real pipeline:
BM25 over the passages of ~40 film articles of the vital-article summaries (no reader, so
each answer takes milliseconds). Every endpoint, every refused input, the queue limit, and
conversations kept apart."""
from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from demo_helpers import FILM_TITLE, FIRST_QUESTION, FOLLOW_UP, build_film_config
from fastapi.testclient import TestClient
from serve_helpers import GatedPipeline, wait_for, wait_ready

from convqa.errors import ConvQAError
from convqa.front.serve import ServeConfig, create_app
from convqa.front.serve.pipelines import PathInfo, PipelineSource
from convqa.pipeline import RETRIEVER_READER, Pipeline

LIMITS = ServeConfig(max_question_chars=60, max_history_turns=3, max_history_chars=300,
                     max_top_k=10, max_body_bytes=2000, workers=2, queue_size=4)


@pytest.fixture(scope="module")
def film_config(tmp_path_factory):
    return build_film_config(tmp_path_factory.mktemp("films"))


@pytest.fixture(scope="module")
def pipeline(film_config):
    return Pipeline.from_config(film_config)


@pytest.fixture(scope="module")
def client(pipeline):
    with TestClient(create_app({"films": pipeline}, LIMITS)) as test_client:
        wait_ready(test_client)
        yield test_client


@pytest.fixture
def bug_log(caplog):
    """Records of the catch-all 500 handler: a refused input must never reach it."""
    caplog.set_level(logging.ERROR, logger="convqa.front.serve")
    return caplog


def ask(client, **body):
    response = client.post("/v1/answer", json=body)
    assert response.status_code == 200, response.text
    return response.json()


# -- answering --------------------------------------------------------------------------------

def test_answer_is_the_pipelines_answer(client, pipeline):
    history = [{"question": FIRST_QUESTION, "answer": "Stanley Kubrick"}]
    body = ask(client, question=FOLLOW_UP, history=history, top_k=3)
    from convqa.types import Turn

    direct = pipeline.answer(FOLLOW_UP, [Turn(FIRST_QUESTION, "Stanley Kubrick")], 3)
    assert body["query"] == direct.query_text == \
        f"{FOLLOW_UP} [SEP] Stanley Kubrick [SEP] {FIRST_QUESTION}"
    assert [p["passage_id"] for p in body["passages"]] == [h.passage_id for h in direct.hits]
    assert body["passages"][0]["title"] == FILM_TITLE
    assert body["passages"][0]["score"] == pytest.approx(direct.hits[0].score)
    assert body["answer"] is None and body["evidence"] is None and body["score"] is None
    assert body["pipeline"] == "films" and body["history_turns"] == 1
    assert body["conversation_id"] is None
    assert set(body["timings_ms"]) == {"queue", "history", "retrieve", "fetch", "total"}
    assert body["timings_ms"]["total"] >= body["timings_ms"]["retrieve"]


def test_conversation_id_keeps_each_conversations_history(client):
    first = ask(client, question=FIRST_QUESTION, conversation_id="films-1")
    assert first["history_turns"] == 0 and first["passages"][0]["title"] == FILM_TITLE
    other = ask(client, question="Who directed Jaws?", conversation_id="films-2")
    assert other["query"] == "Who directed Jaws?"
    follow = ask(client, question=FOLLOW_UP, conversation_id="films-1")
    # no reader, so no answers in the history: the follow-up and its own first question only
    assert follow["query"] == f"{FOLLOW_UP} [SEP] {FIRST_QUESTION}"
    assert follow["history_turns"] == 1 and follow["conversation_id"] == "films-1"
    assert follow["passages"][0]["title"] == FILM_TITLE
    other_follow = ask(client, question=FOLLOW_UP, conversation_id="films-2")
    assert other_follow["query"] == f"{FOLLOW_UP} [SEP] Who directed Jaws?"

    assert client.delete("/v1/conversations/films-1").status_code == 204
    again = ask(client, question=FOLLOW_UP, conversation_id="films-1")
    assert again["history_turns"] == 0 and again["query"] == FOLLOW_UP
    gone = client.delete("/v1/conversations/films-404")
    assert gone.status_code == 404 and gone.json()["field"] == "conversation_id"


def test_history_starts_a_new_conversation_but_not_a_known_one(client):
    seeded = ask(client, question=FOLLOW_UP, conversation_id="seeded",
                 history=[{"question": FIRST_QUESTION}])
    assert seeded["history_turns"] == 1 and seeded["query"] == f"{FOLLOW_UP} [SEP] {FIRST_QUESTION}"
    refused = client.post("/v1/answer", json={"question": "and then?", "conversation_id": "seeded",
                                              "history": [{"question": FIRST_QUESTION}]})
    assert refused.status_code == 422 and refused.json()["field"] == "history"
    third = ask(client, question="Who starred in it?", conversation_id="seeded")
    assert third["history_turns"] == 2  # the refused request left the conversation as it was


def test_server_keeps_the_last_turns_of_a_conversation(pipeline):
    config = ServeConfig(conversation_max_turns=2)
    with TestClient(create_app({"films": pipeline}, config)) as client:
        wait_ready(client)
        for number in range(4):
            body = ask(client, question=f"question {number}?", conversation_id="long")
        assert body["history_turns"] == 2
        assert body["query"] == "question 3? [SEP] question 2? [SEP] question 1?"


def test_refused_first_question_leaves_no_conversation(client):
    bad = client.post("/v1/answer", json={"question": "x", "conversation_id": "never",
                                          "pipeline": "nope"})
    assert bad.status_code == 422
    assert client.delete("/v1/conversations/never").status_code == 404


# -- the other endpoints ----------------------------------------------------------------------

def test_pipelines_lists_paths_history_and_limits(client):
    body = client.get("/v1/pipelines").json()
    assert body["default"] == "films"
    [path] = body["pipelines"]
    assert path["name"] == "films" and path["retriever"] == "bm25" and path["reader"] is None
    assert path["history"]["name"] == "current_first" and path["ready"] is True
    assert path["top_k"] == 5
    assert body["limits"]["max_question_chars"] == 60 and body["limits"]["max_top_k"] == 10


def test_health_reports_workers_and_conversations(client):
    body = client.get("/health").json()
    assert body["status"] == "ready" and body["ready"] is True
    assert body["workers"]["workers"] == 2 and body["workers"]["queue_size"] == 4
    assert body["conversations"] >= 0


def test_openapi_describes_every_endpoint(client):
    schema = client.get("/openapi.json").json()
    assert {"/v1/answer", "/v1/conversations/{conversation_id}", "/v1/pipelines",
            "/health"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["AnswerRequest"]
    assert set(request["properties"]) == {"question", "history", "conversation_id", "top_k",
                                          "pipeline"}
    assert request["required"] == ["question"]
    assert set(schema["components"]["schemas"]["AnswerResponse"]["properties"]) >= {
        "answer", "score", "evidence", "passages", "query", "timings_ms"}
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# -- refused input: one line of JSON naming the field, never a 500 --------------------------

BAD_BODIES = [
    # (raw JSON body, status, field, words in the message)
    ('{"question": ', 400, "body", "malformed JSON"),
    ("", 400, "body", "JSON object body"),
    ("[1, 2]", 400, "body", "got array"),
    ("null", 400, "body", "got null"),
    ('"who?"', 400, "body", "got string"),
    ("{}", 422, "question", "required"),
    ('{"question": 3}', 422, "question", "string"),
    ('{"question": null}', 422, "question", "string"),
    ('{"question": "   "}', 422, "question", "empty"),
    ('{"question": "?!"}', 422, "question", "no letter or digit"),
    ('{"question": "\\u0000\\u202e"}', 422, "question", "no letter or digit"),
    ('{"question": "' + "x" * 61 + '"}', 422, "question", "limit is 60"),
    ('{"question": "q", "history": "q1"}', 422, "history", "expected a JSON array, got string"),
    ('{"question": "q", "history": [{"question": "a"}, {"question": "b"}, {"question": "c"},'
     ' {"question": "d"}]}', 422, "history", "limit is 3"),
    ('{"question": "q", "history": [{"question": "' + "y" * 301 + '"}]}', 422, "history",
     "limit is 300"),
    ('{"question": "q", "history": [{"answer": "a"}]}', 422, "history[0].question", "required"),
    ('{"question": "q", "history": [{"question": " "}]}', 422, "history[0].question", "empty"),
    ('{"question": "q", "history": [{"question": "a", "answer": 7}]}', 422, "history[0].answer",
     "string"),
    ('{"question": "q", "history": [{"question": "a", "rating": 5}]}', 422,
     "history[0].rating", "unknown field"),
    ('{"question": "q", "history": ["a"]}', 422, "history[0]", "expected a JSON object"),
    ('{"question": "q", "top_k": "5"}', 422, "top_k", "integer"),
    ('{"question": "q", "top_k": 2.5}', 422, "top_k", "integer"),
    ('{"question": "q", "top_k": true}', 422, "top_k", "integer"),
    ('{"question": "q", "top_k": 0}', 422, "top_k", "between 1 and 10"),
    ('{"question": "q", "top_k": 11}', 422, "top_k", "between 1 and 10"),
    ('{"question": "q", "pipeline": "dense+fid"}', 422, "pipeline", "unknown pipeline"),
    ('{"question": "q", "pipeline": 1}', 422, "pipeline", "string"),
    ('{"question": "q", "conversation_id": "has space"}', 422, "conversation_id", "letters"),
    ('{"question": "q", "conversation_id": "' + "c" * 129 + '"}', 422, "conversation_id",
     "letters"),
    ('{"question": "q", "conversation_id": 12}', 422, "conversation_id", "string"),
    ('{"question": "q", "answer": "a"}', 422, "answer", "unknown field"),
    ('{"question": "caf\\ud800"}', 422, "question", "lone surrogate at character 3"),
    ('{"question": "q", "history": [{"question": "a", "answer": "\\udfff"}]}', 422,
     "history[0].answer", "lone surrogate"),
    ('{"question": NaN}', 422, "question", "got number"),
    ('{"question": "q", "top_k": 1e400}', 422, "top_k", "integer"),
]


@pytest.mark.parametrize("body,status,field,words", BAD_BODIES)
def test_bad_request_is_one_line_naming_the_field(client, bug_log, body, status, field, words):
    response = client.post("/v1/answer", content=body.encode(),
                           headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()
    assert set(error) == {"error", "field"} and error["field"] == field
    assert error["error"].startswith(f"{field}: ") and words in error["error"]
    assert "\n" not in response.text and "Traceback" not in response.text
    assert not bug_log.records


ODD_VALUES = [None, 0, -1, 1.5, True, "", " ", "x" * 1500, [], {}, [1], {"a": 1},
              [{"question": 1}], "\u0000", "\u202e", 10 ** 30]


@pytest.mark.parametrize("field", ["question", "history", "conversation_id", "top_k",
                                   "pipeline"])
def test_any_value_in_any_field_is_answered_or_refused_never_a_500(client, bug_log, field):
    for value in ODD_VALUES:
        body = {"question": FIRST_QUESTION, field: value}
        response = client.post("/v1/answer", json=body)
        assert response.status_code in (200, 400, 413, 422), (value, response.text)
        if response.status_code != 200:
            error = response.json()
            assert error["field"] is not None and "\n" not in response.text, error
        else:
            assert response.json()["query"]
    assert not bug_log.records


def test_body_without_json_content_type_or_not_utf8(client, bug_log):
    response = client.post("/v1/answer", content=b'{"question": "who?"}')
    assert response.status_code == 400 and "Content-Type: application/json" in response.text
    latin = client.post("/v1/answer", content='{"question": "café?"}'.encode("latin-1"),
                        headers={"content-type": "application/json"})
    assert latin.status_code == 400
    assert latin.json() == {"error": "body: not valid UTF-8 (byte 17)", "field": "body"}
    deep = client.post("/v1/answer", content=b"[" * 990 + b"]" * 990,
                       headers={"content-type": "application/json"})
    assert deep.status_code == 400 and deep.json()["field"] == "body"
    assert not bug_log.records


def test_oversized_body_is_refused_unread(client, bug_log):
    big = json.dumps({"question": "q", "history": [{"question": "x" * 3000}]}).encode()
    declared = client.post("/v1/answer", content=big, headers={"content-type": "application/json"})
    assert declared.status_code == 413 and declared.json()["field"] == "body"
    chunked = client.post("/v1/answer", content=iter([big[:1500], big[1500:]]),
                          headers={"content-type": "application/json"})  # no Content-Length
    assert chunked.status_code == 413
    assert chunked.json() == {"error": "body: the request body is over 2000 bytes",
                              "field": "body"}
    assert not bug_log.records


def test_bad_paths_and_methods_are_one_line(client, bug_log):
    bad_id = client.delete("/v1/conversations/" + "c" * 129)
    assert bad_id.status_code == 422 and bad_id.json()["field"] == "conversation_id"
    api = ("POST /v1/answer, DELETE /v1/conversations/{conversation_id}, GET /v1/pipelines, "
           "GET /health, GET /docs")
    missing = client.get("/answer")
    assert missing.status_code == 404
    assert missing.json() == {"error": f"no such path /answer (the API: {api})", "field": None}
    wrong = client.get("/v1/answer")
    assert wrong.status_code == 405
    assert wrong.json()["error"] == f"GET is not allowed on /v1/answer (the API: {api})"
    assert not bug_log.records


def test_a_bug_is_a_one_line_500_and_logged(film_config, bug_log):
    class Broken:
        kind = RETRIEVER_READER
        history_strategy = top_k = reader = None
        config: dict = {}

        def answer(self, question, history=(), top_k=None):
            raise ZeroDivisionError("a bug")

    with TestClient(create_app({"broken": Broken()}), raise_server_exceptions=False) as client:
        wait_ready(client)
        response = client.post("/v1/answer", json={"question": "who?", "conversation_id": "b"})
        assert response.status_code == 500
        assert response.json()["error"] == "internal error (ZeroDivisionError); see the server log"
        assert "Traceback" not in response.text
        assert client.delete("/v1/conversations/b").status_code == 404  # nothing half-kept
    assert any("bug while answering" in r.getMessage() for r in bug_log.records)


# -- loading ----------------------------------------------------------------------------------

def test_health_and_answers_wait_for_loading(pipeline):
    loaded = threading.Event()

    def build():
        loaded.wait(30)
        return {"films": pipeline}

    source = PipelineSource([PathInfo("films", "bm25", None)], build)
    with TestClient(create_app(source)) as client:
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        early = client.post("/v1/answer", json={"question": FIRST_QUESTION})
        assert early.status_code == 503 and early.headers["retry-after"] == "5"
        listed = client.get("/v1/pipelines").json()["pipelines"]
        assert listed[0]["name"] == "films" and listed[0]["ready"] is False
        loaded.set()
        assert wait_ready(client)["status"] == "ready"
        assert ask(client, question=FIRST_QUESTION)["passages"][0]["title"] == FILM_TITLE


def test_failed_load_is_reported_not_hidden():
    def build():
        raise ConvQAError("dense: index /nowhere not found")

    source = PipelineSource([PathInfo("dense", "dense", None)], build)
    with TestClient(create_app(source)) as client:
        wait_for(lambda: client.get("/health").json()["status"] == "failed", what="failure")
        health = client.get("/health")
        assert health.status_code == 503
        assert health.json()["detail"] == "dense: index /nowhere not found"
        answer = client.post("/v1/answer", json={"question": "who?"})
        assert answer.status_code == 503 and "index /nowhere not found" in answer.json()["error"]


# -- load: the queue bound, busy conversations, several copies --------------------------------

def test_full_queue_is_a_fast_503_with_retry_after(pipeline):
    gated = GatedPipeline(pipeline)
    config = ServeConfig(workers=1, queue_size=1, retry_after_s=2)
    with TestClient(create_app({"films": gated}, config)) as client, \
            ThreadPoolExecutor(2) as pool:
        wait_ready(client)
        running = pool.submit(client.post, "/v1/answer", json={"question": FIRST_QUESTION})
        wait_for(lambda: gated.running == 1, what="the first answer to start")
        queued = pool.submit(client.post, "/v1/answer", json={"question": "Who directed Jaws?"})
        wait_for(lambda: client.get("/health").json()["workers"]["queued"] == 1, what="queue")
        refused = client.post("/v1/answer", json={"question": "one too many"})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
        assert "busy" in refused.json()["error"]
        gated.release()
        assert running.result().status_code == 200 and queued.result().status_code == 200
        assert queued.result().json()["passages"][0]["title"] == "Jaws (film)"


def test_a_conversation_answers_one_question_at_a_time(pipeline):
    gated = GatedPipeline(pipeline)
    with TestClient(create_app({"films": gated}, ServeConfig(workers=2))) as client, \
            ThreadPoolExecutor(1) as pool:
        wait_ready(client)
        first = pool.submit(client.post, "/v1/answer",
                            json={"question": FIRST_QUESTION, "conversation_id": "one"})
        wait_for(lambda: gated.running == 1, what="the first answer to start")
        second = client.post("/v1/answer", json={"question": FOLLOW_UP, "conversation_id": "one"})
        assert second.status_code == 409 and second.json()["field"] == "conversation_id"
        gated.release()
        assert first.result().status_code == 200
        follow = ask(client, question=FOLLOW_UP, conversation_id="one")
        assert follow["history_turns"] == 1


def test_one_copy_is_used_by_one_worker_at_a_time(pipeline):
    gated = GatedPipeline(pipeline)
    with TestClient(create_app({"films": gated}, ServeConfig(workers=2))) as client, \
            ThreadPoolExecutor(2) as pool:
        wait_ready(client)
        answers = [pool.submit(client.post, "/v1/answer", json={"question": q})
                   for q in (FIRST_QUESTION, "Who directed Jaws?")]
        wait_for(lambda: client.get("/health").json()["workers"]["busy"] == 2,
                 what="both workers to take a request")
        assert gated.running == 1  # the second worker waits for the copy
        gated.release()
        assert [a.result().status_code for a in answers] == [200, 200]
    assert gated.most_at_once == 1


def test_two_copies_answer_at_once_without_cross_talk(film_config):
    copies = []

    def build():
        copies.append(GatedPipeline(Pipeline.from_config(film_config)))
        return {"films": copies[-1]}

    source = PipelineSource([PathInfo("films", "bm25", None)], build)
    titles = ["2001: A Space Odyssey", "Jaws", "Casablanca", "Psycho", "Vertigo", "Star Wars"]
    with TestClient(create_app(source, ServeConfig(workers=2, replicas=2))) as client, \
            ThreadPoolExecutor(6) as pool:
        wait_ready(client)
        assert len(copies) == 2 and copies[0].pipeline is not copies[1].pipeline
        firsts = [pool.submit(client.post, "/v1/answer", json={
            "question": f"Who directed {title}?", "conversation_id": f"c{n}"})
            for n, title in enumerate(titles)]
        wait_for(lambda: sum(c.running for c in copies) == 2, what="both copies busy")
        for copy in copies:
            copy.release()
        assert all(f.result().status_code == 200 for f in firsts)
        follows = [pool.submit(client.post, "/v1/answer", json={
            "question": FOLLOW_UP, "conversation_id": f"c{n}"}) for n in range(len(titles))]
        for n, follow in enumerate(follows):
            assert follow.result().json()["query"] == f"{FOLLOW_UP} [SEP] Who directed {titles[n]}?"
    assert all(copy.most_at_once == 1 for copy in copies)


# -- a phrase index as an answering path ------------------------------------------------------

def test_phrase_index_path_answers_without_a_reader(film_config, pipeline, tmp_path_factory):
    """A tiny random phrase model's index over the film passages (`convqa index --phrase`):
    its answers are random, but real phrases of real passages."""
    from pathlib import Path

    from phrase_model_helpers import tiny_phrase_index

    from convqa.front.serve.pipelines import built, combine, phrase_source

    folder = tiny_phrase_index(tmp_path_factory.mktemp("phrase"), Path(film_config["passages"]))
    source = combine([built({"films": pipeline}), phrase_source(folder)])
    with TestClient(create_app(source)) as client:
        wait_ready(client)
        listed = {p["name"]: p for p in client.get("/v1/pipelines").json()["pipelines"]}
        assert set(listed) == {"films", "phrase:phrase-index"}
        phrase = listed["phrase:phrase-index"]
        assert phrase["retriever"] == "phrase index" and phrase["reader"] is None
        assert phrase["history"]["name"] and phrase["ready"]
        body = ask(client, question=FIRST_QUESTION, pipeline="phrase:phrase-index",
                   conversation_id="phrased", top_k=3)
        evidence = body["evidence"]
        assert body["answer"] and evidence["text"][evidence["start"]:evidence["end"]] == \
            body["answer"]
        assert evidence["passage_id"] in {p["passage_id"] for p in body["passages"]}
        follow = ask(client, question=FOLLOW_UP, pipeline="phrase:phrase-index",
                     conversation_id="phrased")
        assert follow["history_turns"] == 1 and FOLLOW_UP in follow["query"]
        assert FIRST_QUESTION in follow["query"]
