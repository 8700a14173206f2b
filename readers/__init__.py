"""Readers that turn retrieved passages into answers (extractive DPR reader, Fusion-in-Decoder)."""
