"""Product-quantized token vectors that are scored without decoding them.

A compact phrase index keeps one `m`-byte code per token instead of a 392-byte int8 vector: the
vector is rotated (OPQ, learned so that the sub-vectors quantize well; the identity without
OPQ) and cut into `m` sub-vectors, each replaced by the nearest of 256 centroids of its
sub-space. The inner product with a query is then a sum of `m` table lookups: the query is
rotated once, `tables[j, c] = q_j . centroid[j, c]`, and `score(code) = sum_j tables[j,
code[j]]` (the rotation is orthogonal, so rotating both sides keeps inner products).

    codec = PQCodec.train(sample_vectors, m=48)
    codes = codec.encode(vectors)            # [n, 48] uint8
    scores = codec.scores(codes, query)      # ~ vectors @ query

Saved as two .npy files (`rotation.npy` `[d, d]`, `centroids.npy` `[m, 256, d / m]`, float32),
written atomically; FAISS trains and encodes, numpy scores, so a search needs no FAISS object
for it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convqa.errors import ConfigError, DataError

CENTROIDS = 256   # 8-bit codes
FILES = ("rotation.npy", "centroids.npy")


@dataclass
class PQCodec:
    """Rotation `[d, d]` (rotated = x @ rotation) and centroids `[m, 256, d / m]`."""

    rotation: np.ndarray
    centroids: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.rotation.shape[0])

    @property
    def m(self) -> int:
        return int(self.centroids.shape[0])

    @classmethod
    def train(cls, sample: np.ndarray, m: int, opq: bool = True, seed: int = 0,
              opq_iterations: int = 20) -> "PQCodec":
        """Learn the rotation (OPQ) and the centroids from `sample` `[n, d]` float32."""
        import faiss

        x = np.ascontiguousarray(sample, dtype=np.float32)
        n, d = x.shape
        if isinstance(m, bool) or not isinstance(m, int) or m < 1 or d % m:
            raise ConfigError(f"code bytes must divide the vector size {d}, got {m!r}")
        if n < CENTROIDS:
            raise ConfigError(f"{n} sample vectors are too few to train {CENTROIDS} centroids "
                              "per code byte")
        rotation = np.eye(d, dtype=np.float32)
        if opq:
            matrix = faiss.OPQMatrix(d, m)
            matrix.niter = opq_iterations
            matrix.verbose = False
            matrix.pq = faiss.ProductQuantizer(d, m, 8)  # seeded below through cp.seed
            matrix.pq.cp.seed = seed
            matrix.train(x)
            rotation = faiss.vector_to_array(matrix.A).reshape(d, d).T.copy()
        pq = faiss.ProductQuantizer(d, m, 8)
        pq.cp.seed = seed
        pq.train(np.ascontiguousarray(x @ rotation))
        centroids = faiss.vector_to_array(pq.centroids).reshape(m, CENTROIDS, d // m)
        return cls(rotation.astype(np.float32), centroids.astype(np.float32))

    def _quantizer(self):
        import faiss

        pq = faiss.ProductQuantizer(self.dim, self.m, 8)
        faiss.copy_array_to_vector(np.ascontiguousarray(self.centroids.ravel()), pq.centroids)
        return pq

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """`[n, m]` uint8 codes of float32 vectors `[n, d]`."""
        x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32) @ self.rotation)
        if len(x) == 0:
            return np.zeros((0, self.m), dtype=np.uint8)
        return self._quantizer().compute_codes(x)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The float32 vectors `[n, d]` the codes stand for (rotated back)."""
        codes = np.asarray(codes, dtype=np.intp)
        parts = self.centroids[np.arange(self.m), codes]          # [n, m, d / m]
        return parts.reshape(len(codes), self.dim) @ self.rotation.T

    def tables(self, query: np.ndarray) -> np.ndarray:
        """`[m, 256]` float32: the query's inner product with every centroid of each
        sub-space."""
        rotated = np.asarray(query, dtype=np.float32) @ self.rotation
        return np.einsum("mkd,md->mk", self.centroids, rotated.reshape(self.m, -1))

    def scores(self, codes: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products `[n]` of the coded vectors with a float32 `query` `[d]`."""
        if len(codes) == 0:
            return np.zeros(0, dtype=np.float32)
        flat = self.tables(query).ravel()
        index = codes.astype(np.intp) + (np.arange(self.m, dtype=np.intp) * CENTROIDS)
        return flat[index].sum(axis=1, dtype=np.float32)

    # -- saving and loading ---------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, array in zip(FILES, (self.rotation, self.centroids)):
            tmp = folder / f".{name}.tmp"
            with open(tmp, "wb") as handle:
                np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, folder / name)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "PQCodec":
        folder = Path(folder)
        arrays = []
        for name in FILES:
            path = folder / name
            try:
                arrays.append(np.load(path, allow_pickle=False))
            except (OSError, ValueError) as exc:
                raise DataError(f"cannot read the phrase codec: {exc}", path) from None
        rotation, centroids = arrays
        d = rotation.shape[0] if rotation.ndim == 2 else -1
        if (rotation.shape != (d, d) or centroids.ndim != 3 or centroids.shape[1] != CENTROIDS
                or centroids.shape[0] * centroids.shape[2] != d):
            raise DataError(f"damaged codec: rotation {rotation.shape}, centroids "
                            f"{centroids.shape}", folder)
        return cls(rotation.astype(np.float32), centroids.astype(np.float32))
