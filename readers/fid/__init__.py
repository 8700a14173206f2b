"""Fusion-in-Decoder generative reader (Izacard & Grave, 2021) over T5-family checkpoints.

- `model`: `FiDConfig`, `FiDReader` (fused encoding, loss, generation, save/load, LoRA);
- `data`: the examples file and the tensors the model reads;
- `train`: the accelerate training loop with resumable checkpoints, and `evaluate_fid`;
- `reader`: the `fid` pipeline component (`READERS.build({"name": "fid", "model": PATH})`);
- `cli`: `convqa train fid`.

Nothing heavy is imported here; import the submodules.
"""
