"""Moving training data and models to a lent GPU machine and back, within its limits: what
travels there is the repository plus at most 64 MiB of carried files, and at most 8 files of
16 MiB each (64 MiB together) come back. The GPU machine has no convqa data, no package index
and not even the default model's package, so everything a run needs is carried in these forms.

- examples.py: reader example files packed compactly (each passage once, xz) and unpacked;
- weights.py: a model folder in a transport form (word embeddings int8 per row, the other
  float tensors fp16) and back;
- export.py: a trained folder sent back in chunks under the size limit (tensors equal to a
  base folder's left out) and rebuilt here;
- merge.py: a LoRA-trained model saved with full weights (self-contained, to send back);
- carry.py: a folder too large for one call (all-mpnet-base-v2) carried in chunks over two;
- chunks.py: the chunked tar with sha256 sums both of these use.

`python -m convqa.front.tools.device_pack --help` lists the commands;
scripts/prepare_gpu_reader_reranker.sh, scripts/gpu_reader_reranker.sh and the large family's
scripts/prepare_gpu_large_family.sh and scripts/gpu_large_family.sh use them.
"""
