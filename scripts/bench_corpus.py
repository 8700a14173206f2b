"""Measure splitting the shared Wikipedia articles into passages and building a PassageStore.

Each phase runs in its own subprocess so its peak RSS is its own:
  split  stream every article through the splitter (count passages, check the word limit);
  build  split on the fly straight into PassageStore.build;
  read   open the store, 20k random lookups by id, one streaming pass over all passages.

    python scripts/bench_corpus.py [--articles PATH] [--store DIR] [--max-words 100] [--keep]

Without --store the store is built in a temporary folder and removed afterwards (unless --keep).
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ARTICLES = REPO.parent / "shared" / "data" / "wikipedia" / "topiocqa_wiki_articles.jsonl.gz"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _rss_mb(field: str = "VmRSS") -> float:
    """Current resident memory; "RssAnon" leaves out file pages mapped from the store."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def phase_split(articles: Path, max_words: int) -> dict:
    from convqa.corpus import iter_article_passages

    baseline = _peak_rss_mb()
    start = time.perf_counter()
    count = words = longest = 0
    for passage in iter_article_passages(articles, max_words):
        n = len(passage.text.split())
        count += 1
        words += n
        longest = max(longest, n)
    return {"passages": count, "words": words, "max_passage_words": longest,
            "mean_passage_words": round(words / max(count, 1), 1),
            "seconds": round(time.perf_counter() - start, 1),
            "baseline_rss_mb": round(baseline, 1), "peak_rss_mb": round(_peak_rss_mb(), 1)}


def phase_build(articles: Path, max_words: int, store: Path) -> dict:
    from convqa.corpus import PassageStore, iter_article_passages

    baseline = _peak_rss_mb()
    start = time.perf_counter()
    built = PassageStore.build(iter_article_passages(articles, max_words), store, progress=True,
                               max_words=max_words, source=str(articles), overwrite=True)
    seconds = time.perf_counter() - start
    sizes = {p.name: p.stat().st_size for p in sorted(store.iterdir())}
    return {"passages": len(built), "checksum": built.checksum, "seconds": round(seconds, 1),
            "baseline_rss_mb": round(baseline, 1), "peak_rss_mb": round(_peak_rss_mb(), 1),
            "store_bytes": sum(sizes.values()), "file_bytes": sizes}


def phase_read(store: Path) -> dict:
    from convqa.corpus import PassageStore

    before, anon_before = _rss_mb(), _rss_mb("RssAnon")
    opened = PassageStore.open(store)
    after_open = _rss_mb()
    ids = [opened.id_at(i) for i in random.Random(0).sample(range(len(opened)), 20000)]
    start = time.perf_counter()
    for pid in ids:
        assert opened.get(pid).id == pid
    lookup = time.perf_counter() - start
    start = time.perf_counter()
    count = sum(1 for _ in opened)
    scan = time.perf_counter() - start
    return {"open_rss_delta_mb": round(after_open - before, 1),
            "lookups_per_s": round(len(ids) / lookup), "scan_seconds": round(scan, 1),
            "scanned": count, "peak_rss_mb": round(_peak_rss_mb(), 1),
            "anon_rss_delta_mb": round(_rss_mb("RssAnon") - anon_before, 1),
            "file_rss_mb": round(_rss_mb("RssFile"), 1)}


def _run_phase(args: argparse.Namespace, phase: str, store: Path) -> dict:
    command = [sys.executable, __file__, "--phase", phase, "--articles", str(args.articles),
               "--max-words", str(args.max_words), "--store", str(store)]
    result = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=Path, default=DEFAULT_ARTICLES)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--phase", choices=["split", "build", "read"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.phase:  # child process: one phase, result as the last stdout line
        if args.phase == "split":
            result = phase_split(args.articles, args.max_words)
        elif args.phase == "build":
            result = phase_build(args.articles, args.max_words, args.store)
        else:
            result = phase_read(args.store)
        print(json.dumps(result))
        return

    if not args.articles.exists():
        sys.exit(f"articles file not found: {args.articles}")
    workdir = None
    store = args.store
    if store is None:
        workdir = Path(tempfile.mkdtemp(prefix="bench_corpus."))
        store = workdir / "store"
    try:
        report = {"articles": str(args.articles), "max_words": args.max_words}
        for phase in ("split", "build", "read"):
            report[phase] = _run_phase(args, phase, store)
            print(f"{phase}: {json.dumps(report[phase])}", file=sys.stderr)
        print(json.dumps(report, indent=2))
    finally:
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
