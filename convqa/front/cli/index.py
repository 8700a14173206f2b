"""`convqa index`: build a BM25, dense (FAISS) or phrase index over a passage collection.

    convqa index --bm25 --passages STORE_OR_FILE --out DIR [--preset default|topiocqa|qrecc]
                 [--k1 X] [--b Y] [--store DIR] [--overwrite]
    convqa index --dense --passages STORE_OR_FILE --out DIR [--model PATH_OR_ID]
                 [--factory Flat] [--batch-size 64] [--precision auto]
    convqa index --phrase --model PHRASE_MODEL --passages STORE_OR_FILE --out DIR [--int8]
                 [--factory Flat|IVF4096,PQ48] [--keep FRACTION | --threshold LOGIT|none]
                 [--flat-max N] [--sparse] [--dense-prior [MODEL]]
    convqa index --phrase --compact --model PHRASE_MODEL --passages STORE --out DIR
                 [--keep FRACTION | --threshold LOGIT|none] [--code-bytes 48]
                 [--search-bytes 32] [--drop-dump] [--sparse [--preset P]]
                 [--dense-prior [MODEL]]

`--passages` is a passage store folder (e.g. a benchmark's passages/) or a JSONL/TSV(.gz)
collection (see convqa.corpus.readers); a file is first written as a passage store, by default
next to the index (`DIR/../passages`), and the index records the store's checksum so a retriever
is never paired with another corpus.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from convqa.errors import ConvQAError
from convqa.memory import peak_memory_note
from convqa.precision import CHOICES
from convqa.quiet import add_verbose_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "index", help="build a BM25, dense (FAISS) or phrase index over a passage collection",
        description="Build a BM25 (bm25s), dense (dual encoder + FAISS) or phrase (phrase model "
                    "+ FAISS) index over a passage store or a JSONL/TSV passage file.")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--bm25", action="store_true", help="a BM25 index (bm25s, no Java)")
    kind.add_argument("--dense", action="store_true", help="a dense FAISS index")
    kind.add_argument("--phrase", action="store_true",
                      help="a PRO-ConvQA phrase index (phrase vectors + FAISS; no reader)")
    p.add_argument("--passages", required=True, metavar="PATH",
                   help="passage store folder, or a .jsonl/.tsv(.gz) passage file")
    p.add_argument("--format", choices=("auto", "jsonl", "tsv"), default="auto",
                   help="format of a passage file (default: from its name)")
    p.add_argument("--store", metavar="DIR", help="where to write the passage store when "
                   "--passages is a file (default: OUT/../passages)")
    p.add_argument("--out", required=True, metavar="DIR", help="index folder to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing index (and store, when building one)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose_argument(p)
    bm25 = p.add_argument_group("BM25 options")
    bm25.add_argument("--preset", default="default",
                      help="k1/b of a paper: default or topiocqa (0.9/0.4), qrecc (0.82/0.68)")
    bm25.add_argument("--k1", type=float, help="override the preset's k1")
    bm25.add_argument("--b", type=float, help="override the preset's b")
    dense = p.add_argument_group("dense options")
    dense.add_argument("--model", default=None, metavar="PATH_OR_ID",
                       help="dual encoder folder or checkpoint (default: all-MiniLM-L6-v2)")
    dense.add_argument("--factory", default=None,
                       help="FAISS index factory string: Flat, HNSW32, IVF4096,PQ48 ... "
                            "(default: Flat for --dense, chosen by size for --phrase)")
    dense.add_argument("--batch-size", type=int, default=64, help="passages per encoder batch")
    dense.add_argument("--precision", default="auto", choices=CHOICES,
                       help="auto (default): time fp32, bf16 and int8 on a sample of passages "
                            "and keep the fastest that agrees with fp32; or force one")
    dense.add_argument("--no-fast", dest="precision", action="store_const", const="fp32",
                       help=argparse.SUPPRESS)  # the flag's old spelling of --precision fp32
    phrase = p.add_argument_group("phrase options (--model is a phrase model folder)")
    phrase.add_argument("--int8", action="store_true",
                        help="store phrase vectors as int8 with per-vector scale and offset "
                             "(default float16)")
    phrase.add_argument("--threshold", default=None, metavar="LOGIT",
                        help="keep tokens whose start/end filter logit exceeds this; 'none' "
                             "keeps every word-boundary token")
    phrase.add_argument("--keep", type=float, default=None, metavar="FRACTION",
                        help="instead of --threshold: keep this fraction of the tokens, the "
                             "thresholds set from a sample of passages (default 1: all)")
    phrase.add_argument("--flat-max", type=int, default=None, metavar="N",
                        help="vectors per side up to which the automatic factory is Flat")
    phrase.add_argument("--compact", action="store_true",
                        help="a compact index for large corpora (~8 KB per passage instead of "
                             "~42 KB): product-quantized token codes, one IVF-PQ for both "
                             "sides, memory-mapped; the filter (--keep/--threshold) is applied "
                             "after the dump, which keeps every token")
    phrase.add_argument("--code-bytes", type=int, default=None, metavar="M",
                        help="--compact: bytes of each token's scoring code (default 48)")
    phrase.add_argument("--search-bytes", type=int, default=None, metavar="M",
                        help="--compact: bytes of each token's IVF-PQ search code (default 32)")
    phrase.add_argument("--skip-punctuation", action="store_true",
                        help="--compact: leave out tokens that are only punctuation (',' '(' "
                             "'.'; ~13%% of Wikipedia's word-boundary tokens): answer scoring "
                             "removes them, so no phrase needs one at its edge")
    phrase.add_argument("--sparse", action="store_true",
                        help="also index the passages with BM25 in OUT/sparse (--preset, --k1, "
                             "--b apply): phrase search then adds BM25 passage scores and "
                             "candidates, DenSPI's sparse side (docs/phrase_index.md). Rerun "
                             "on a finished index to add it")
    phrase.add_argument("--dense-prior", nargs="?", const="convqa-dpr-ihn", default=None,
                        metavar="MODEL",
                        help="also index the passages with a dual encoder (default "
                             "convqa-dpr-ihn) in OUT/dense, an SQ8 FAISS index (384 bytes per "
                             "passage; IVF1024,SQ8 from 100,000 passages): phrase search then "
                             "adds its best passages and their scores (docs/phrase_index.md). "
                             "Resumable; rerun on a finished index to add it")
    phrase.add_argument("--drop-dump", action="store_true",
                        help="--compact: delete OUT/dump once the index is built (it is only "
                             "needed to rebuild with another filter or code size), and "
                             "OUT/dense/vectors once the dense side is built")
    p.set_defaults(func=run)


def open_or_build_store(args: argparse.Namespace):
    """The passage store named by --passages, building it first when that is a file."""
    from convqa.corpus import PassageStore, read_passages

    source = Path(args.passages)
    if source.is_dir():
        return PassageStore.open(source)
    store_path = Path(args.store) if args.store else Path(args.out).parent / "passages"
    if store_path.exists() and not args.overwrite:
        raise ConvQAError(f"{store_path}: already exists; pass it as --passages, choose another "
                          "--store, or add --overwrite")
    passages = read_passages(source, args.format)
    store = PassageStore.build(passages, store_path, progress=not args.quiet,
                               overwrite=args.overwrite, source=str(source))
    print(f"passage store: {len(store)} passages from {source} -> {store_path}")
    return store


def bm25_config(args: argparse.Namespace):
    """The BM25 settings of --preset, --k1 and --b (for --bm25, and --phrase --sparse)."""
    from retrievers.bm25 import PRESETS, BM25Config

    if args.preset not in PRESETS:
        raise ConvQAError(f"unknown preset '{args.preset}' (known: {', '.join(PRESETS)})")
    return BM25Config(preset=args.preset, k1=args.k1, b=args.b)


def run(args: argparse.Namespace) -> int:
    if args.dense:
        return run_dense(args)
    if args.phrase:
        return run_phrase(args)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ConvQAError(f"{out}: already exists; add --overwrite to replace it")
    from retrievers.bm25 import BM25Retriever

    config = bm25_config(args)
    k1, b = config.params()
    store = open_or_build_store(args)
    started = time.perf_counter()
    retriever = BM25Retriever.build_from_store(store, config, show_progress=not args.quiet)
    retriever.save(out)
    seconds = time.perf_counter() - started
    print(f"BM25 index (k1={k1}, b={b}) of {len(store)} passages written to {out} "
          f"in {seconds:.1f} s")
    print(f"use it with: --retriever '{{name: bm25, index: {out}}}' --passages {store.path}")
    return 0


def run_dense(args: argparse.Namespace) -> int:
    """Encode the store with a dual encoder and write a FAISS index (retrievers.dense).

    Unlike BM25, an existing output folder is resumed, not refused: encoding is sharded and a
    killed run continues where it stopped. --overwrite starts over."""
    import shutil

    from convqa.models import DEFAULT_MODEL
    from retrievers.dense.build import VECTORS_DIR, build_dense_index
    from retrievers.dense.index import META_FILE

    if args.batch_size < 1:
        raise ConvQAError("--batch-size must be at least 1")
    if args.k1 is not None or args.b is not None or args.preset != "default":
        raise ConvQAError("--preset, --k1 and --b are BM25 options; they do not go with --dense")
    out = Path(args.out)
    if out.exists() and args.overwrite:
        if not ((out / META_FILE).exists() or (out / VECTORS_DIR).is_dir()):
            raise ConvQAError(f"{out}: exists and is not a dense index; not replacing it")
        shutil.rmtree(out)
    store = open_or_build_store(args)
    started = time.perf_counter()
    args.factory = args.factory or "Flat"
    index = build_dense_index(args.model or DEFAULT_MODEL, store, out, factory=args.factory,
                              batch_size=args.batch_size, precision=args.precision,
                              progress=not args.quiet)
    seconds = time.perf_counter() - started
    print(f"dense index ({args.factory}) of {index.count} passages written to {out} "
          f"in {seconds:.1f} s{peak_memory_note()}")
    print(f"use it with: --retriever '{{name: dense, index: {out}}}'")
    return 0


# Fraction of candidate tokens a phrase index keeps by default: all of them. With the first
# trained filter (runs/phrase-v1) keeping half halved the index but cost 6 F1 points on the
# vital dev turns (23.0 -> 16.9); pass --keep or --threshold for a smaller index.
DEFAULT_KEEP = 1.0


def run_phrase(args: argparse.Namespace) -> int:
    """Dump the store's phrase vectors with a phrase model and index them (phrase_index).

    Like --dense, an existing output folder is resumed (the dump is sharded); --overwrite
    starts over."""
    import shutil

    from phrase_index.index import DUMP_DIR, META_FILE, build_phrase_index
    from phrase_index.model import PhraseModel

    if not args.model:
        raise ConvQAError("--phrase needs --model: a phrase model folder (convqa train phrase)")
    if not args.sparse and (args.k1 is not None or args.b is not None
                            or args.preset != "default"):
        raise ConvQAError("--preset, --k1 and --b are BM25 options; with --phrase they go with "
                          "--sparse")
    if args.batch_size < 1:
        raise ConvQAError("--batch-size must be at least 1")
    if args.flat_max is not None and args.flat_max < 0:
        raise ConvQAError("--flat-max must be at least 0")
    if args.threshold is not None and args.keep is not None:
        raise ConvQAError("--threshold and --keep do not go together")
    threshold, keep = None, args.keep
    if args.threshold is None and keep is None:
        keep = DEFAULT_KEEP
    if args.threshold is not None:
        try:
            threshold = None if args.threshold.lower() == "none" else float(args.threshold)
        except ValueError:
            raise ConvQAError(f"--threshold must be a number or 'none', got {args.threshold!r}"
                              ) from None
    compact_only = {"--code-bytes": args.code_bytes, "--search-bytes": args.search_bytes,
                    "--drop-dump": args.drop_dump or None,
                    "--skip-punctuation": args.skip_punctuation or None}
    if not args.compact and any(v is not None for v in compact_only.values()):
        raise ConvQAError(f"{', '.join(k for k, v in compact_only.items() if v is not None)} "
                          "go with --compact")
    if args.compact and args.flat_max is not None:
        raise ConvQAError("--flat-max does not go with --compact (its search index is IVF-PQ)")
    out = Path(args.out)
    if out.exists() and args.overwrite:
        if not ((out / META_FILE).exists() or (out / DUMP_DIR).is_dir()):
            raise ConvQAError(f"{out}: exists and is not a phrase index; not replacing it")
        shutil.rmtree(out)
    model = PhraseModel.load(args.model)
    if model.has_adapters:
        model.merge_adapters()
    store = open_or_build_store(args)
    started = time.perf_counter()
    if args.compact:
        code = _run_compact(args, model, store, out, threshold, keep, started)
        return _add_sides(args, store, out) if code == 0 else code
    options = {} if args.flat_max is None else {"flat_max": args.flat_max}
    index = build_phrase_index(model, store, out, dtype="int8" if args.int8 else "float16",
                               factory=args.factory, start_threshold=threshold,
                               end_threshold=threshold, keep_fraction=keep,
                               batch_size=args.batch_size,
                               precision=args.precision, progress=not args.quiet, **options)
    seconds = time.perf_counter() - started
    vectors, factories = index.meta["vectors"], index.meta["factory"]
    print(f"phrase index of {index.count} passages written to {out} in {seconds:.1f} s: "
          f"{vectors['start']} start ({factories['start']}) + {vectors['end']} end "
          f"({factories['end']}) vectors, {index.bytes_per_passage():,.0f} bytes per passage"
          f"{peak_memory_note()}")
    print(f"use it with: convqa answer --phrase-index {out}")
    return _add_sides(args, store, out)


def _add_sides(args: argparse.Namespace, store, out: Path) -> int:
    """The passage priors asked for: --sparse (BM25), then --dense-prior."""
    code = _add_sparse(args, store, out)
    return _add_dense(args, store, out) if code == 0 else code


def _add_dense(args: argparse.Namespace, store, out: Path) -> int:
    """--dense-prior: a dense index of the same store in OUT/dense, unless one is there."""
    if not args.dense_prior:
        return 0
    from phrase_index.dense_prior import DENSE_DIR, add_dense_side

    folder = out / DENSE_DIR
    started = time.perf_counter()
    if not add_dense_side(out, store, args.dense_prior, precision=args.precision,
                          drop_vectors=args.drop_dump, show_progress=not args.quiet):
        print(f"dense side: kept the dense index in {folder}")
        return 0
    print(f"dense side: {args.dense_prior} index of {len(store)} passages written to {folder} "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


def _add_sparse(args: argparse.Namespace, store, out: Path) -> int:
    """--sparse: a BM25 index of the same store in OUT/sparse, unless one is there already."""
    if not args.sparse:
        return 0
    from phrase_index.sparse import SPARSE_DIR, add_sparse_side

    folder = out / SPARSE_DIR
    started = time.perf_counter()
    if not add_sparse_side(out, store, bm25_config(args), show_progress=not args.quiet):
        print(f"sparse side: kept the BM25 index in {folder}")
        return 0
    print(f"sparse side: BM25 index of {len(store)} passages written to {folder} in "
          f"{time.perf_counter() - started:.1f} s")
    return 0


def _run_compact(args: argparse.Namespace, model, store, out: Path, threshold, keep,
                 started: float) -> int:
    from phrase_index.compact_build import (DEFAULT_CODE_BYTES, DEFAULT_SEARCH_BYTES,
                                            build_compact_phrase_index)

    thresholds = None
    if args.threshold is not None:
        thresholds = {"start": threshold, "end": threshold}
    index = build_compact_phrase_index(
        model, store, out, keep_fraction=None if keep is None or keep >= 1 else keep,
        thresholds=thresholds, code_bytes=args.code_bytes or DEFAULT_CODE_BYTES,
        search_bytes=args.search_bytes or DEFAULT_SEARCH_BYTES, factory=args.factory,
        batch_size=args.batch_size, precision=args.precision, drop_dump=args.drop_dump,
        skip_punctuation=args.skip_punctuation, progress=not args.quiet)
    seconds = time.perf_counter() - started
    meta = index.meta
    print(f"compact phrase index of {index.count} passages written to {out} in {seconds:.1f} s: "
          f"{meta['tokens']:,} tokens kept of {meta['dump_tokens']:,} ({meta['vectors']['start']:,}"
          f" start, {meta['vectors']['end']:,} end; {meta['factory']}), "
          f"{meta['bytes']['total'] / 2**30:.2f} GiB, {index.bytes_per_passage():,.0f} bytes "
          f"per passage{peak_memory_note()}")
    print(f"use it with: convqa answer --phrase-index {out}")
    return 0
