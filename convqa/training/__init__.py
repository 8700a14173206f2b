"""What every convqa trainer (DPR, ConvDR, the extractive and FiD readers, the phrase model)
shares, so that each trainer keeps only its batches and its loss:

- `schedule`: the settings every trainer config has (checks, the resume key), the step plan,
  the LR schedule and the seeded order of the examples;
- `checkpoint`: the files of OUT/checkpoint, written atomically, read without unpickling code;
- `loader`: the batches of a run built ahead by DataLoader workers (`loader_workers`);
- `loop`: `StepTrainer`, the resumable accelerate loop (accumulation, clipping, logging,
  checkpoints, the finished model and training.json).

Nothing heavy is imported here; import the submodules.
"""
