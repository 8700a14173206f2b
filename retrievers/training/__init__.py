"""DPR training with iterative hard negatives (DPR-IHN): examples, loss, trainer, mining, loop.

- `data`: training examples from the benchmark's labelled turns, seeded batches;
- `loss`: the DPR NLL over in-batch (gathered) and hard negatives;
- `trainer`: the accelerate training loop with resumable checkpoints;
- `mining`: hard negatives from the current model's top-k, with provenance;
- `ihn`: warm-up (in-batch negatives), then encode -> mine -> retrain from the initial checkpoint.

Nothing heavy is imported here; import the submodules.
"""
