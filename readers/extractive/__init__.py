"""The DPR-style extractive reader: an encoder with a span head and a passage-selection head.

- `model`: `ExtractiveReader` (build, from_pretrained, save_pretrained, LoRA, fingerprint);
- `inputs`: (query, passage) windows with character offsets into the passage text;
- `decode`: best span per passage, "best_passage" (DPR) or "global" choice, -> `Answer`;
- `loss`: selection cross-entropy + marginal likelihood of all gold spans;
- `data`: training examples (JSONL format), built from SQuAD files or the TopiOCQA benchmark;
- `train`: the accelerate training loop with resumable checkpoints;
- `heldout`: `evaluate_reader` and the held-out scores per source a run reports;
- `run`: one resumable run, data -> training -> held-out scores (`convqa train reader`);
- `reader`: the `extractive` component of the READERS registry (`SpanReader.read`).

Nothing heavy is imported here; import the submodules.
"""
