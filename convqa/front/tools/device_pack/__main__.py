"""Command line of the device transport tools (see __init__.py).

    python -m convqa.front.tools.device_pack examples-pack OUT.json.xz IN.jsonl...
    python -m convqa.front.tools.device_pack examples-unpack PACK OUTDIR
    python -m convqa.front.tools.device_pack reranker-examples OUT.jsonl[.xz] IN.jsonl...
    python -m convqa.front.tools.device_pack merge MODEL DIR
    python -m convqa.front.tools.device_pack model-pack DIR OUTDIR [--int8-matrices] [--xz]
    python -m convqa.front.tools.device_pack model-unpack INDIR DIR
    python -m convqa.front.tools.device_pack export-back MODEL_DIR OUTDIR [FILES...] [--base DIR]
    python -m convqa.front.tools.device_pack import-back OUTDIR RUN_DIR [--base DIR]
    python -m convqa.front.tools.device_pack split DIR OUTDIR [--pieces N]
    python -m convqa.front.tools.device_pack join DIR CHUNK_DIR...

Each prints a one-line JSON summary; bad input is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from convqa.errors import reports_errors

PROG = "python -m convqa.front.tools.device_pack"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    jobs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = jobs.add_parser("examples-pack", help="pack reader example files (each passage once, xz)")
    p.add_argument("out", metavar="OUT.json.xz")
    p.add_argument("inputs", nargs="+", metavar="IN.jsonl")
    p = jobs.add_parser("examples-unpack", help="write OUTDIR/NAME.jsonl per packed file")
    p.add_argument("pack", metavar="PACK")
    p.add_argument("outdir", metavar="OUTDIR")
    p = jobs.add_parser("reranker-examples",
                        help="reader examples as reranker examples (negatives split by article; "
                             "`convqa train reranker --examples` also reads reader files)")
    p.add_argument("out", metavar="OUT.jsonl")
    p.add_argument("inputs", nargs="+", metavar="IN.jsonl")
    p = jobs.add_parser("merge", help="a reader or reranker folder with full weights")
    p.add_argument("model", metavar="MODEL", help="folder or shipped alias (convqa-reader)")
    p.add_argument("out", metavar="DIR")
    p = jobs.add_parser("model-pack", help="transport form: word embeddings int8, rest fp16")
    p.add_argument("src", metavar="DIR")
    p.add_argument("dst", metavar="OUTDIR")
    p.add_argument("--int8-matrices", action="store_true",
                   help="every weight matrix as int8 rows, not only the word embeddings "
                        "(a MiniLM encoder: 22.8 MB instead of 33.5 MB)")
    p.add_argument("--xz", action="store_true",
                   help="xz-compress every file over 64 KiB (model-unpack undoes it)")
    p = jobs.add_parser("model-unpack", help="the model folder back from its transport form")
    p.add_argument("src", metavar="INDIR")
    p.add_argument("dst", metavar="DIR")
    p = jobs.add_parser("export-back", help="a trained folder in chunks under 16 MiB")
    p.add_argument("model", metavar="MODEL_DIR")
    p.add_argument("outdir", metavar="OUTDIR")
    p.add_argument("extras", nargs="*", metavar="FILE", help="logs, scores (missing: left out)")
    p.add_argument("--base", metavar="DIR",
                   help="the folder it was trained from: tensors equal to its are left out")
    p.add_argument("--chunk-mib", type=int, default=15, metavar="N")
    p = jobs.add_parser("import-back", help="RUN_DIR/model and the extra files from the chunks")
    p.add_argument("outdir", metavar="OUTDIR")
    p.add_argument("run", metavar="RUN_DIR")
    p.add_argument("--base", metavar="DIR", help="the base given to export-back, unpacked here")
    p = jobs.add_parser("split", help="a folder as chunks, to carry over several calls")
    p.add_argument("src", metavar="DIR")
    p.add_argument("outdir", metavar="OUTDIR")
    p.add_argument("--pieces", type=int, default=2, metavar="N",
                   help="chunks of equal size (default 2: one per call)")
    p = jobs.add_parser("join", help="the folder back from its chunks (in one or more folders)")
    p.add_argument("dst", metavar="DIR")
    p.add_argument("sources", nargs="+", metavar="CHUNK_DIR")
    return parser


def run(args: argparse.Namespace) -> dict:
    from . import carry, examples, export, merge, weights

    if args.command == "examples-pack":
        return examples.pack_examples(args.out, args.inputs)
    if args.command == "examples-unpack":
        return examples.unpack_examples(args.pack, args.outdir)
    if args.command == "reranker-examples":
        from retrievers.rerank.data import load_examples, save_examples

        return {"examples": save_examples(args.out, [e for path in args.inputs
                                                     for e in load_examples(path)])}
    if args.command == "merge":
        return merge.merge_model(args.model, args.out)
    if args.command == "model-pack":
        return weights.pack_model(args.src, args.dst, args.int8_matrices, args.xz)
    if args.command == "model-unpack":
        return weights.unpack_model(args.src, args.dst)
    if args.command == "export-back":
        return export.export_back(args.model, args.outdir, args.extras, args.base,
                                  args.chunk_mib * export.MIB,
                                  say=lambda text: print(text, file=sys.stderr))
    if args.command == "split":
        return carry.split_folder(args.src, args.outdir, args.pieces)
    if args.command == "join":
        return carry.join_folder(args.dst, args.sources)
    return export.import_back(args.outdir, args.run, args.base)


@reports_errors("device_pack")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
