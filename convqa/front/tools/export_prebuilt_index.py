"""Regenerate the embedded corpus's prebuilt dense vectors (convqa/assets/embedded-index) from a
dense index of the embedded passage store built with the shipped DPR-IHN encoder in fp32:

    convqa answer --prepare --retriever bm25            # the embedded passage store
    convqa index --dense --model convqa-dpr-ihn --precision fp32 \\
        --passages ~/.cache/convqa/vital-w100-v1/passages --out /tmp/dense-fp32
    python -m convqa.front.tools.export_prebuilt_index --index /tmp/dense-fp32

The index's vectors/ folder (fp32-encoded, stored float16) is read, checked against the store
and the encoder, and written as int8 + per-vector scale/offset.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


from convqa.corpus import PassageStore
from convqa.front.embedded import DEFAULT_DENSE_MODEL, EMBEDDED_VERSION
from convqa.errors import ConvQAError, reports_errors
from convqa.precision import cpu_capability, normalize_precision
from convqa.front.prebuilt_index import PREBUILT_DIR, export_prebuilt
from retrievers.dense.build import load_encoder
from retrievers.dense.encode import VectorShards
from retrievers.dense.index import DenseIndex


@reports_errors("export_prebuilt_index")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index", required=True, help="dense index folder (with vectors/)")
    p.add_argument("--out", default=str(PREBUILT_DIR))
    args = p.parse_args(argv)
    meta = DenseIndex.read_meta(args.index)
    shards = VectorShards.open(Path(args.index) / "vectors")
    if normalize_precision(shards.manifest.get("precision")) != "fp32":
        raise ConvQAError(f"{args.index} was encoded in {shards.manifest.get('precision')}; "
                          "the shipped vectors are made from fp32")
    store = PassageStore.open(meta["passages"])
    encoder = load_encoder(DEFAULT_DENSE_MODEL)
    if shards.fingerprint != encoder.fingerprint():
        raise ConvQAError(f"{args.index} was not encoded by the shipped {DEFAULT_DENSE_MODEL}")
    if shards.corpus_checksum != store.checksum:
        raise ConvQAError(f"{args.index} does not match the passage store {meta['passages']}")
    out = export_prebuilt(shards.load(), corpus_checksum=store.checksum,
                          encoder=DEFAULT_DENSE_MODEL, fingerprint=shards.fingerprint,
                          out_dir=args.out, embedded_version=EMBEDDED_VERSION,
                          encoded_precision="fp32", made_on=cpu_capability())
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
