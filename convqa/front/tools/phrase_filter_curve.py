"""The filter's trade-off: compact phrase indexes of one dump at several keep fractions (and code
sizes), each scored on the benchmark's dev turns (EM/F1, Hits@k of the answer passage), with
its size. The dump-based index of the same dump is the exact-vector reference when given.

    python -m convqa.front.tools.phrase_filter_curve --dump /tmp/work/phrase/vital-v2/dump \\
        --passages /tmp/work/bench/vital/passages --model convqa-phrase \\
        --benchmark /tmp/work/bench/vital --keep 1 0.8 0.6 0.4 0.2 --code-bytes 48 \\
        --work /tmp/work/phrase/curve --json curve.json

`--skip-punctuation` leaves out the tokens that are only punctuation in every index it builds.

Each index is built into WORK/keep-F-mM (kept for reuse: a rerun scores existing ones again).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


from convqa.errors import reports_errors


def build(dump: str, out: Path, keep: float, code_bytes: int, opq: bool, passages: str,
          model: str, search_bytes: int | None, skip_punctuation: bool = False) -> dict:
    from phrase_index.compact import META_FILE, CompactPhraseIndex
    from phrase_index.compact_build import build_compact_index, choose_search_factory
    from phrase_index.dump import PhraseDump

    if not (out / META_FILE).exists():
        opened = PhraseDump.open(dump)
        factory = None
        if search_bytes:
            factory = choose_search_factory(int(opened.manifest["tokens_count"] * keep),
                                            opened.dim, search_bytes)
        began = time.perf_counter()
        build_compact_index(opened, out, keep_fraction=None if keep >= 1 else keep,
                            code_bytes=code_bytes, opq=opq, factory=factory, model=model,
                            passages=str(Path(passages).resolve()),
                            skip_punctuation=skip_punctuation, progress=False)
        print(f"built {out} in {time.perf_counter() - began:.0f} s", flush=True)
    index = CompactPhraseIndex.load(out)
    meta = index.meta
    return {"tokens": meta["tokens"], "dump_tokens": meta["dump_tokens"],
            "kept_fraction": round(meta["tokens"] / max(1, meta["dump_tokens"]), 4),
            "vectors": meta["vectors"], "bytes_per_passage": meta["bytes_per_passage"],
            "bytes": meta["bytes"], "factory": meta["factory"],
            "build_seconds": meta.get("build_seconds")}


@reports_errors("phrase_filter_curve")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="a finished phrase dump folder")
    parser.add_argument("--passages", required=True, help="its passage store")
    parser.add_argument("--model", required=True, help="the phrase model that dumped it")
    parser.add_argument("--benchmark", required=True, help="TopiOCQA x Wikipedia corpus folder")
    parser.add_argument("--keep", type=float, nargs="+", default=[1.0, 0.8, 0.6, 0.4, 0.2])
    parser.add_argument("--code-bytes", type=int, nargs="+", default=[48])
    parser.add_argument("--search-bytes", type=int, default=None,
                        help="IVF-PQ code bytes (default: compact_build.DEFAULT_SEARCH_BYTES)")
    parser.add_argument("--no-opq", action="store_true", help="no rotation before PQ")
    parser.add_argument("--skip-punctuation", action="store_true",
                        help="leave out tokens that are only punctuation (compact_build.py)")
    parser.add_argument("--reference", default=None,
                        help="a dump-based phrase index of the same dump (exact int8 vectors)")
    parser.add_argument("--work", required=True, help="folder for the built indexes")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from convqa.front.tools.phrase_ablation import evaluate

    rows = []
    if args.reference:
        row = {"index": "dump-based (int8 vectors, exact scores)",
               **evaluate(args.reference, args.model, args.benchmark)}
        print(row, flush=True)
        rows.append(row)
    for code_bytes in args.code_bytes:
        for keep in args.keep:
            name = f"keep-{keep:g}-m{code_bytes}" + ("-noopq" if args.no_opq else "") + \
                (f"-s{args.search_bytes}" if args.search_bytes else "") + \
                ("-nopunct" if args.skip_punctuation else "")
            out = Path(args.work) / name
            row = {"index": name, "keep": keep, "code_bytes": code_bytes,
                   "skip_punctuation": args.skip_punctuation,
                   **build(args.dump, out, keep, code_bytes, not args.no_opq, args.passages,
                           args.model, args.search_bytes, args.skip_punctuation)}
            row.update(evaluate(str(out), args.model, args.benchmark))
            print(row, flush=True)
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
