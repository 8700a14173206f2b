"""Retrievers: BM25, dense dual encoders with FAISS indexes, their training, fusion."""
