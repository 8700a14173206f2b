"""The parts of `convqa serve` on their own: the bounded conversation store, the bounded worker
pool, the settings and the command line's one-line errors."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from serve_helpers import wait_for

from convqa.front.cli.main import main
from convqa.errors import ConvQAError
from convqa.front.serve import ServeConfig, load_serve_config
from convqa.front.serve.conversations import ConversationBusy, ConversationStore
from convqa.front.serve.workers import Overloaded, PoolClosed, WorkerPool
from convqa.types import Turn


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def answered(store: ConversationStore, key: str, question: str) -> list[Turn]:
    history, _ = store.begin(key)
    store.finish(key, Turn(question, f"answer to {question}"))
    return history


# -- conversations ----------------------------------------------------------------------------

def test_conversation_keeps_its_last_turns_in_order():
    store = ConversationStore(max_turns=2, idle_s=60, max_conversations=10)
    for question in ("q1", "q2", "q3"):
        answered(store, "a", question)
    history, existed = store.begin("a")
    assert existed and [t.question for t in history] == ["q2", "q3"]
    assert history[-1].answer == "answer to q3"


def test_idle_conversations_expire():
    clock = Clock()
    store = ConversationStore(max_turns=5, idle_s=10, max_conversations=10, clock=clock)
    answered(store, "old", "q1")
    clock.now = 5
    answered(store, "young", "q1")
    clock.now = 12  # "old" idle 12 s, "young" 7 s
    assert len(store) == 1
    history, existed = store.begin("old")
    assert not existed and history == []


def test_least_recently_used_conversation_goes_first():
    clock = Clock()
    store = ConversationStore(max_turns=5, idle_s=1000, max_conversations=2, clock=clock)
    answered(store, "a", "q")
    clock.now = 1
    answered(store, "b", "q")
    clock.now = 2
    answered(store, "a", "q2")  # "a" used again: "b" is now the least recent
    clock.now = 3
    answered(store, "c", "q")
    assert len(store) == 2
    assert store.begin("b") == ([], False)


def test_busy_conversation_refuses_a_second_question_and_is_not_evicted():
    store = ConversationStore(max_turns=5, idle_s=1000, max_conversations=1)
    store.begin("a")
    with pytest.raises(ConversationBusy):
        store.begin("a")
    store.begin("b")  # over the bound, but "a" is busy: it stays
    store.finish("a", Turn("q", "x"))
    store.finish("b", Turn("q", "y"))
    assert len(store) == 1  # back within the bound once idle


def test_abandon_frees_a_conversation_and_drops_one_it_created():
    store = ConversationStore(max_turns=5, idle_s=1000, max_conversations=10)
    answered(store, "kept", "q1")
    store.begin("kept")
    store.abandon("kept", created=False)
    assert [t.question for t in store.begin("kept")[0]] == ["q1"]
    store.begin("new", seed=[Turn("seeded", None)])
    store.abandon("new", created=True)
    assert store.forget("new") is False


def test_forget():
    store = ConversationStore(max_turns=5, idle_s=1000, max_conversations=10)
    answered(store, "a", "q1")
    assert store.forget("a") is True and store.forget("a") is False


# -- worker pool ------------------------------------------------------------------------------

def test_pool_runs_jobs_on_the_replicas_one_thread_per_replica_at_a_time():
    active = {"r0": 0, "r1": 0}
    most = {"r0": 0, "r1": 0}
    lock = threading.Lock()

    def job(replica):
        with lock:
            active[replica] += 1
            most[replica] = max(most[replica], active[replica])
        time.sleep(0.01)
        with lock:
            active[replica] -= 1
        return replica

    pool = WorkerPool(["r0", "r1"], workers=4, queue_size=50)
    results = [pool.submit(job) for _ in range(40)]
    used = {future.result(timeout=10) for future in results}
    pool.close()
    assert used == {"r0", "r1"} and most == {"r0": 1, "r1": 1}


def test_pool_refuses_when_the_queue_is_full_and_finishes_accepted_work_on_close():
    gate = threading.Event()
    pool = WorkerPool(["r"], workers=1, queue_size=2)
    first = pool.submit(lambda r: gate.wait(10))
    wait_for(lambda: pool.stats()["busy"] == 1, what="the worker to take the first job")
    queued = [pool.submit(lambda r, n=n: n) for n in range(2)]
    with pytest.raises(Overloaded):
        pool.submit(lambda r: "one too many")
    closer = threading.Thread(target=pool.close)
    closer.start()
    wait_for(lambda: pool._closed, what="close")
    with pytest.raises(PoolClosed):
        pool.submit(lambda r: "late")
    gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert first.result() is True and [f.result() for f in queued] == [0, 1]


def test_pool_passes_errors_to_the_caller_and_keeps_working():
    pool = WorkerPool(["r"], workers=1, queue_size=4)
    failing = pool.submit(lambda r: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=5)
    assert pool.submit(lambda r: r + "!").result(timeout=5) == "r!"
    pool.close()


def test_cancelled_queued_job_is_skipped():
    gate = threading.Event()
    ran = []
    pool = WorkerPool(["r"], workers=1, queue_size=4)
    pool.submit(lambda r: gate.wait(10))
    wait_for(lambda: pool.stats()["busy"] == 1, what="the worker to be busy")
    skipped = pool.submit(lambda r: ran.append("skipped"))
    assert skipped.cancel()
    gate.set()
    pool.close()
    assert ran == []


# -- settings ---------------------------------------------------------------------------------

def test_serve_config_from_yaml_with_overrides(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("workers: 4\nreplicas: 2\nmax_question_chars: 200\n", encoding="utf-8")
    config = load_serve_config(path, workers=None, queue_size=8)
    assert (config.workers, config.replicas, config.queue_size) == (4, 2, 8)
    assert config.max_question_chars == 200 and config.threads_per_replica(cores=2) == 1
    assert ServeConfig().threads_per_replica(cores=2) == 2


@pytest.mark.parametrize("text,words", [
    ("worker: 2\n", "unknown option 'worker'"),
    ("workers: two\n", "expected int"),
    ("workers: 0\n", "workers must be at least 1"),
    ("workers: 1\nreplicas: 2\n", "cannot exceed workers"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_serve_config_is_one_line(tmp_path, text, words):
    path = tmp_path / "serve.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConvQAError, match=words):
        load_serve_config(path)


# -- the command line -------------------------------------------------------------------------

def test_parser_defaults_bind_localhost_on_8000():
    from convqa.front.cli.main import build_parser

    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.retriever, args.workers) == ("127.0.0.1", 8000, None, None)


def run_cli(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_command_errors_are_one_line(tmp_path, capsys):
    assert run_cli(["serve", "--port", "70000"], capsys) == \
        "convqa serve: error: --port must be between 0 and 65535, got 70000"
    assert "--set needs --config" in run_cli(["serve", "--set", "top_k=3"], capsys)
    assert "no such phrase index folder" in run_cli(
        ["serve", "--phrase-index", str(tmp_path / "none")], capsys)
    bad = tmp_path / "serve.yaml"
    bad.write_text("queue: 3\n", encoding="utf-8")
    assert "unknown option 'queue'" in run_cli(["serve", "--serve-config", str(bad)], capsys)
    assert "cannot exceed workers" in run_cli(["serve", "--workers", "1", "--replicas", "2"],
                                              capsys)
    missing = tmp_path / "missing.yaml"
    assert "file not found" in run_cli(["serve", "--config", str(missing)], capsys)


def test_port_in_use_is_one_line(tmp_path, capsys):
    import yaml
    from demo_helpers import build_film_config

    config = tmp_path / "films.yaml"
    config.write_text(yaml.safe_dump(build_film_config(tmp_path)), encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        err = run_cli(["serve", "--config", str(config), "--port", str(port)], capsys)
    assert err.startswith(f"convqa serve: error: cannot serve on 127.0.0.1:{port}: ")


def test_bound_socket_is_tcp_so_replies_are_not_delayed():
    """asyncio disables Nagle's algorithm only on sockets whose protocol is IPPROTO_TCP."""
    from convqa.front.serve.server import bind

    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[0] == "127.0.0.1"


# -- answering paths --------------------------------------------------------------------------

def serve_args(*argv):
    from convqa.front.cli.main import build_parser

    return build_parser().parse_args(["serve", *argv])


def test_paths_of_the_command_line_are_named_before_loading(tmp_path):
    from convqa.front.cli.serve import pipeline_source

    phrase = tmp_path / "films-phrase"
    phrase.mkdir()
    source = pipeline_source(serve_args("--retriever", "bm25", "--retriever", "hybrid",
                                        "--phrase-index", str(phrase)))
    assert source.names == ["bm25+extractive", "bm25", "hybrid+extractive", "hybrid",
                            "phrase:films-phrase"]
    assert pipeline_source(serve_args()).names == ["dense+extractive", "dense"]
    assert pipeline_source(serve_args("--no-reader", "--retriever", "bm25")).names == ["bm25"]
    assert pipeline_source(serve_args("--phrase-index", str(phrase))).names == [
        "phrase:films-phrase"]


def test_config_path_with_and_without_its_reader_shares_the_retriever(tmp_path):
    import yaml
    from demo_helpers import build_film_config

    from convqa.front.cli.serve import pipeline_source

    config = tmp_path / "films.yaml"
    values = build_film_config(tmp_path)
    config.write_text(yaml.safe_dump(dict(values, reader={"name": "extractive",
                                                          "model": "convqa-reader"})),
                      encoding="utf-8")
    source = pipeline_source(serve_args("--config", str(config), "--set", "top_k=3"))
    assert source.names == ["films+extractive", "films"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(values), encoding="utf-8")
    built = pipeline_source(serve_args("--config", str(plain), "--set", "top_k=3")).build()
    assert list(built) == ["plain"] and built["plain"].top_k == 3

    from convqa.front.paths import without_reader
    from convqa.pipeline import Pipeline

    pipeline = Pipeline.from_config(values)
    bare = without_reader(pipeline)
    assert bare.reader is None and bare.retriever is pipeline.retriever
    assert bare.passages is pipeline.passages and bare.history is pipeline.history
