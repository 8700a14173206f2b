#!/usr/bin/env python
"""Load test of `convqa serve` with real TopiOCQA conversations, on loopback only.

    python -m convqa.front.tools.load_serve --serve-args "--retriever bm25" --clients 4 --seconds 20
    python -m convqa.front.tools.load_serve --serve-args "" --clients 20 --seconds 60 --json out.json
    python -m convqa.front.tools.load_serve --serve-args "--retriever bm25" --clients 4 --seconds 30 \\
        --kill-restart          # kill -9 the server half-way, restart it, compare answers

N clients each hold TopiOCQA conversations (../shared/data/topiocqa), one after another: every
turn is sent with the conversation's `conversation_id` and only the new question, so the server
keeps the history. Runs for T seconds or --max-requests, whichever comes first, then reports
throughput, p50/p99 latency and errors (503s, the deliberate "queue full" answer, apart).

No cross-talk: for every answer the client recomputes the query from its own conversation
(its earlier questions and the answers the server gave, formatted by the pipeline's history
strategy of GET /v1/pipelines) and requires the server's `query` to be exactly that; it also
looks for the questions of the other clients' current conversations in it. A follow-up whose
history the server no longer had (after a restart) is counted as "history lost", not checked.

In the same run, the single-process `Pipeline` (built in this process from the same
`--serve-args`) answers the same sequence of requests for as long, one after another: its
throughput is the yardstick (the server within 20% of it).

The server is started here (`convqa serve --port P ARGS`, from this checkout) unless --url
names one already running (on 127.0.0.1); --kill-restart needs the server started here.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[3]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_SECONDS = 600
MAX_CLIENTS = 200


# -- HTTP -------------------------------------------------------------------------------------

class Connection:
    """One keep-alive connection of one client; reconnects after a failure."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: dict | None = None
                ) -> tuple[int, dict | None, dict[str, str]]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        data = json.dumps(body).encode() if body is not None else None
        try:
            self.conn.request(method, path, body=data,
                              headers={"Content-Type": "application/json"})
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        payload = json.loads(raw) if raw else None
        return response.status, payload, {k.lower(): v for k, v in response.getheaders()}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def wait_healthy(host: str, port: int, timeout: float) -> float:
    """Seconds until GET /health answers 200."""
    began = time.monotonic()
    conn = Connection(host, port)
    while time.monotonic() - began < timeout:
        try:
            if conn.request("GET", "/health")[0] == 200:
                return time.monotonic() - began
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    raise SystemExit(f"load_serve: the server at {host}:{port} was not ready in {timeout} s")


# -- the server under test --------------------------------------------------------------------

class Server:
    """`convqa serve --port PORT ARGS` of this checkout, output into a log file."""

    def __init__(self, args: list[str], port: int, log_dir: Path):
        self.args, self.port, self.log_dir = args, port, log_dir
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"server-{self.starts}.log", "w", encoding="utf-8")
        command = [sys.executable, "-m", "convqa.front.cli.main", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), *self.args]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log)
        log.close()

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- conversations and checks -----------------------------------------------------------------

def conversations(data_dir: Path, count: int, max_turns: int, seed: int):
    """`count` TopiOCQA conversations with at least two turns, in a seeded random order, each
    cut to `max_turns` turns."""
    from convqa.loaders.topiocqa import load_topiocqa

    loaded = [c for c in load_topiocqa(data_dir / "topiocqa" / "topiocqa_train.json.gz")
              if len(c.turns) >= 2]
    random.Random(seed).shuffle(loaded)
    for conversation in loaded[:count]:
        conversation.turns = conversation.turns[:max_turns]
    return loaded[:count]


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


@dataclass
class Checker:
    """Recomputes each answer's query from the client's own conversation."""

    strategies: dict[str, object]   # pipeline name -> history strategy
    kept_turns: int                 # the server's conversation_max_turns
    active: dict[int, list[str]] = field(default_factory=dict)  # client -> its questions
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expected(self, pipeline: str, question: str, history: list, used: int) -> str:
        strategy = self.strategies[pipeline]
        return strategy.format(question, history[len(history) - used:] if used else [])

    def foreign(self, client: int, query: str) -> bool:
        """A question of another client's current conversation (4+ words, not also asked in
        this client's conversation) inside this query."""
        text = normalise(query)
        with self.lock:
            own = set(self.active.get(client, []))
            others = [q for c, qs in self.active.items() if c != client for q in qs]
        return any(q not in own and len(q.split()) >= 4 and q in text for q in others)


@dataclass
class Stats:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    connection_errors: int = 0
    checked: int = 0
    cross_talk: int = 0
    foreign: int = 0
    history_lost: int = 0
    examples: list[str] = field(default_factory=list)
    sent: list[tuple[str, str, list]] = field(default_factory=list)  # (pipeline, q, history)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Budget:
    def __init__(self, requests: int, seconds: float):
        self.left = requests
        self.deadline = time.monotonic() + seconds
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.left <= 0 or time.monotonic() >= self.deadline:
                return False
            self.left -= 1
            return True

    def over(self) -> bool:
        return self.left <= 0 or time.monotonic() >= self.deadline


def client_loop(number: int, host: str, port: int, queue: list, queue_lock: threading.Lock,
                budget: Budget, checker: Checker, stats: Stats, pipeline: str | None,
                server_up: threading.Event) -> None:
    from convqa.types import Turn

    conn = Connection(host, port)
    round_ = 0
    while not budget.over():
        with queue_lock:
            conversation = queue[(number + round_ * 997) % len(queue)]
        round_ += 1
        conversation_id = f"load-{number}-{round_}-{conversation.id}"
        with checker.lock:
            checker.active[number] = [normalise(t.question) for t in conversation.turns]
        history: list = []
        for turn in conversation.turns:
            if not budget.take():
                break
            body = {"question": turn.question, "conversation_id": conversation_id}
            if pipeline:
                body["pipeline"] = pipeline
            while True:
                began = time.perf_counter()
                try:
                    status, reply, headers = conn.request("POST", "/v1/answer", body)
                except (OSError, http.client.HTTPException):
                    with stats.lock:
                        stats.connection_errors += 1
                    server_up.wait(300)
                    status = None
                    break
                elapsed = (time.perf_counter() - began) * 1000
                with stats.lock:
                    stats.statuses[status] += 1
                if status != 503:
                    break
                time.sleep(min(5.0, float(headers.get("retry-after", "1"))))
                if budget.over():
                    break
            if status != 200:
                break  # a lost connection or a refused turn ends this conversation
            used = reply["history_turns"]
            expected_used = min(len(history), checker.kept_turns)
            query = reply["query"]
            with stats.lock:
                stats.latencies_ms.append(elapsed)
                stats.sent.append((reply["pipeline"], turn.question, list(history)))
            if used < expected_used:
                with stats.lock:
                    stats.history_lost += 1
            elif history:
                expected = checker.expected(reply["pipeline"], turn.question, history, used)
                mismatch = query != expected
                foreign = checker.foreign(number, query)
                with stats.lock:
                    stats.checked += 1
                    stats.cross_talk += mismatch
                    stats.foreign += foreign
                    if (mismatch or foreign) and len(stats.examples) < 5:
                        stats.examples.append(f"{conversation_id}: got {query!r}, "
                                              f"expected {expected!r}")
            history.append(Turn(turn.question, reply["answer"]))
        try:
            conn.request("DELETE", f"/v1/conversations/{conversation_id}")
        except (OSError, http.client.HTTPException):
            pass
    conn.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the single-process yardstick, and the restart probe --------------------------------------

def build_pipelines(serve_args: list[str]) -> dict:
    """One copy of the pipelines `convqa serve ARGS` serves, built in this process."""
    from convqa.front.cli.main import build_parser
    from convqa.front.cli.serve import pipeline_source

    args = build_parser().parse_args(["serve", *serve_args])
    return pipeline_source(args).build()


def single_process_throughput(pipelines: dict, sent: list, seconds: float) -> dict:
    """Answer the server's requests again, in order, one at a time, for `seconds`."""
    if not sent:
        return {"answers": 0, "seconds": 0.0, "per_s": 0.0}
    count = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        name, question, history = sent[count % len(sent)]
        pipelines[name].answer(question, history)
        count += 1
    elapsed = time.perf_counter() - began
    return {"answers": count, "seconds": round(elapsed, 2), "per_s": round(count / elapsed, 2)}


def probe(host: str, port: int, turns: list) -> list[dict]:
    """Stateless answers (explicit history) to fixed turns, to compare across a restart."""
    conn = Connection(host, port)
    out = []
    for question, history in turns:
        status, reply, _ = conn.request("POST", "/v1/answer", {
            "question": question,
            "history": [{"question": t.question, "answer": t.answer} for t in history]})
        out.append({"status": status, "answer": (reply or {}).get("answer"),
                    "passages": [p["passage_id"] for p in (reply or {}).get("passages", [])]})
    conn.close()
    return out


# -- main -------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-args", default="",
                        help='arguments of `convqa serve` (e.g. "--retriever bm25 --workers 2"); '
                             "also used to build the single-process pipeline")
    parser.add_argument("--url", help="a server already running on 127.0.0.1 (default: start "
                                      "one here)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-requests", type=int, default=100000)
    parser.add_argument("--baseline-seconds", type=float, default=None,
                        help="single-process run (default: as long as the load; 0: skip)")
    parser.add_argument("--baseline-threads", type=int, default=None,
                        help="torch threads of the single-process run (default: every core, "
                             "as a server with one replica)")
    parser.add_argument("--pipeline", help="answering path to ask (default: the server's)")
    parser.add_argument("--max-turns", type=int, default=12,
                        help="turns per conversation (longer ones are cut)")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-restart", action="store_true",
                        help="kill -9 the server half-way, restart it, compare probe answers")
    parser.add_argument("--probes", type=int, default=10, help="turns of the restart probe")
    parser.add_argument("--load-timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args(argv)

    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be between 1 and {MAX_CLIENTS}")
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS}]")
    if args.max_requests < 1:
        parser.error("--max-requests must be at least 1")
    if args.kill_restart and args.url:
        parser.error("--kill-restart needs the server started here (no --url)")
    if not (args.data_dir / "topiocqa" / "topiocqa_train.json.gz").exists():
        parser.error(f"no TopiOCQA data under {args.data_dir} (see ../shared/data/README.md)")
    if args.url and urlparse(args.url).hostname not in LOOPBACK:
        parser.error("--url must be on loopback (127.0.0.1 / localhost)")
    return args


@dataclass
class LoadRun:
    """What one load run saw: the clients' statistics and, with --kill-restart, the probes'
    answers before and after the restart."""

    pipeline: str
    stats: Stats
    load_s: float
    elapsed: float
    restart: dict[str, Any] | None = None
    before: list[dict[str, Any]] | None = None
    after: list[dict[str, Any]] | None = None


def run_load(args: argparse.Namespace, serve_args: list[str]) -> LoadRun:
    """Start the server (or use --url), ask it from --clients threads for --seconds, with a
    kill -9 and restart half-way when asked; the server started here is stopped."""
    from convqa.registry import HISTORY_STRATEGIES

    server = None
    if args.url:
        parsed = urlparse(args.url)
        host, port = parsed.hostname, parsed.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        server = Server(serve_args, port, Path(tempfile.mkdtemp(prefix="load-serve-")))
        server.start()
    try:
        load_s = wait_healthy(host, port, args.load_timeout)
        _, listing, _ = Connection(host, port).request("GET", "/v1/pipelines")
        strategies = {p["name"]: HISTORY_STRATEGIES.build(p["history"])
                      for p in listing["pipelines"] if p.get("history")}
        for strategy in strategies.values():  # load the tokenizers before the client threads
            strategy.format("warm up", [])
        pipeline = args.pipeline or listing["default"]
        if pipeline not in strategies:
            raise SystemExit(f"load_serve: error: pipeline {pipeline!r} has no history strategy "
                             "to check queries with")
        checker = Checker(strategies, int(listing["limits"]["conversation_max_turns"]))
        queue = conversations(args.data_dir, max(50, args.clients * 10), args.max_turns,
                              args.seed)
        probe_turns = [(c.turns[-1].question, c.turns[:-1]) for c in queue[:args.probes]]
        run = LoadRun(pipeline, Stats(), load_s, 0.0)
        run.before = probe(host, port, probe_turns) if args.kill_restart else None

        budget = Budget(args.max_requests, args.seconds)
        server_up = threading.Event()
        server_up.set()
        lock = threading.Lock()
        threads = [threading.Thread(target=client_loop, daemon=True, args=(
            n, host, port, queue, lock, budget, checker, run.stats, args.pipeline, server_up))
            for n in range(args.clients)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        if args.kill_restart:
            time.sleep(args.seconds / 2)
            server_up.clear()
            killed = time.perf_counter()
            server.kill9()
            server.start()
            ready_s = wait_healthy(host, port, args.load_timeout)
            server_up.set()
            run.restart = {"at_s": round(killed - began, 1), "down_s": round(
                time.perf_counter() - killed, 1), "ready_after_start_s": round(ready_s, 1)}
        for thread in threads:
            thread.join(args.seconds + 600)
        run.elapsed = time.perf_counter() - began
        run.after = probe(host, port, probe_turns) if args.kill_restart else None
    finally:
        if server is not None:
            server.stop()
    return run


def load_report(args: argparse.Namespace, run: LoadRun) -> dict[str, Any]:
    """Every number of the run, the CPU named."""
    import torch

    stats, ok = run.stats, run.stats.statuses.get(200, 0)
    report = {
        "cpu": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count(),
        "serve_args": args.serve_args, "pipeline": run.pipeline, "clients": args.clients,
        "seconds": round(run.elapsed, 1), "server_ready_s": round(run.load_s, 1),
        "answers": ok, "throughput_per_s": round(ok / run.elapsed, 2),
        "latency_ms": {"p50": round(percentile(stats.latencies_ms, 0.5), 1),
                       "p99": round(percentile(stats.latencies_ms, 0.99), 1)},
        "status_counts": {str(k): v for k, v in sorted(stats.statuses.items())},
        "rejected_503": stats.statuses.get(503, 0),
        "errors": sum(v for k, v in stats.statuses.items() if k not in (200, 503)),
        "connection_errors": stats.connection_errors,
        "follow_ups_checked": stats.checked, "cross_talk": stats.cross_talk,
        "foreign_questions": stats.foreign, "history_lost": stats.history_lost,
        "cross_talk_examples": stats.examples,
    }
    if args.kill_restart:
        same = sum(b == a for b, a in zip(run.before, run.after))
        report["restart"] = dict(run.restart, probes=len(run.before), same_answers=same,
                                 all_ok=all(p["status"] == 200 for p in run.before + run.after))
    return report


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    serve_args = shlex.split(args.serve_args)
    run = run_load(args, serve_args)
    report = load_report(args, run)
    baseline_s = args.seconds if args.baseline_seconds is None else args.baseline_seconds
    if baseline_s > 0:
        torch.set_num_threads(args.baseline_threads or os.cpu_count() or 1)
        pipelines = build_pipelines(serve_args)
        single = single_process_throughput(pipelines, run.stats.sent, baseline_s)
        report["single_process"] = dict(single, torch_threads=torch.get_num_threads())
        if single["per_s"]:
            report["server_vs_single"] = round(report["throughput_per_s"] / single["per_s"], 3)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    failed = report["errors"] or report["cross_talk"] or report["foreign_questions"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
