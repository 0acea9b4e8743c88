"""Embeddings cached on disk, so a replay computes no vector and is exact on any CPU.

:class:`CachedEmbedder` wraps any embedder (``model_id``, ``dim``, ``encode(texts, kind=...)``). A vector depends
in its last bits on the batch it was computed in (padding to the batch's longest text changes the matrix shapes and
so the kernels' summation order) as well as on the CPU's vector kernels, thread count and library versions. So the
cache keeps each ``encode`` call whole: the key is sha256(embedder identity, kind, the call's texts in order), the
value the float32 matrix the model returned. A later run that makes the same call (a replay from a run's archive,
:mod:`mnemis.models.cache_archive`) gets the bit-identical matrix whatever machine it runs on, and a run without the
cache would have computed exactly that matrix on the machine that made it. The identity is the wrapped embedder's
``model_id`` (a name plus a hash of the weight files and the output size) plus the settings that change a vector
(query instruction, query precision, normalisation).

The wrapped embedder may be given as a zero-argument factory: it is then built only on the first miss, so a
replay whose calls are all archived loads no weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mnemis.sqlite_file import SQLiteFile

SCHEMA = ("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, n INTEGER NOT NULL, dim INTEGER NOT NULL, "
          "vecs BLOB NOT NULL)")
_IDENTITY_ATTRS = ("query_instruction", "query_precision", "normalize", "dim")


def embedder_identity(embedder: Any) -> str:
    """The embedder's ``model_id`` plus the settings that change its vectors."""
    parts = {"model": getattr(embedder, "model_id", type(embedder).__name__)}
    for attr in _IDENTITY_ATTRS:
        if hasattr(embedder, attr):
            parts[attr] = getattr(embedder, attr)
    return json.dumps(parts, sort_keys=True, default=str)


def call_key(identity: str, kind: str, texts: Sequence[str]) -> str:
    blob = json.dumps([identity, kind, list(texts)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def pack(matrix: np.ndarray) -> bytes:
    """A matrix as little-endian float32 bytes, row by row (the cache's and the archive's form)."""
    return np.ascontiguousarray(matrix, dtype="<f4").tobytes()


def unpack(blob: bytes, n: int, dim: int) -> np.ndarray:
    flat = np.frombuffer(blob, dtype="<f4")
    if flat.shape[0] != n * dim:
        raise ValueError(f"stored call has {flat.shape[0]} values, its row says {n} x {dim}")
    return flat.reshape(n, dim).astype(np.float32)


class CachedEmbedder:
    """Disk-caching front for an embedder.

    Args:
        embedder: the model, or a zero-argument factory that builds it (called on the first miss only).
        cache_dir: folder of ``embed.sqlite``.
        identity: the cache identity when ``embedder`` is a factory (:func:`embedder_identity` of what it builds);
            computed from the model otherwise.
        dim: the output size when ``embedder`` is a factory (known from the config or an earlier run).
    """

    def __init__(self, embedder: Any, cache_dir: str | Path, *, identity: str | None = None,
                 dim: int | None = None) -> None:
        self._inner = None if callable(embedder) and not hasattr(embedder, "encode") else embedder
        self._factory: Callable[[], Any] | None = embedder if self._inner is None else None
        if self._inner is None and identity is None:
            raise ValueError("a lazily built embedder needs its cache identity")
        self.identity = identity or embedder_identity(self._inner)
        self._dim = dim
        self.hits = 0
        self.computed = 0
        self._db = SQLiteFile(Path(cache_dir) / "embed.sqlite")
        self._db._create(SCHEMA)

    @property
    def inner(self) -> Any:
        """The wrapped embedder (built now if it was given as a factory)."""
        if self._inner is None:
            assert self._factory is not None
            from mnemis.models.cache_identity import build_as_keyed

            self._inner = build_as_keyed(self._factory, embedder_identity, self.identity, "embedder")
        return self._inner

    @property
    def model_id(self) -> str:
        return json.loads(self.identity)["model"]

    @property
    def dim(self) -> int:
        return int(self._dim if self._dim is not None else self.inner.dim)

    def __getattr__(self, name: str) -> Any:  # query_instruction, batch_size, ... of the wrapped model
        # only once built: probing an attribute (hasattr) must not load the weights
        if name.startswith("_") or self.__dict__.get("_inner") is None:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def close(self) -> None:
        self._db.close()

    @classmethod
    def for_node(cls, node: Any, build: Callable[[], Any], cache_dir: str | Path) -> CachedEmbedder:
        """The cache for the embedder a config ``node`` builds: lazily built when the cache knows the node's
        identity (:mod:`mnemis.models.cache_identity`), else built now and its identity recorded."""
        from mnemis.models.cache_identity import known_identity, node_text, remember_identity

        db = SQLiteFile(Path(cache_dir) / "embed.sqlite")
        try:
            known = known_identity(db, node_text(node))
            if known is not None:
                return cls(build, cache_dir, identity=known[0], dim=known[1])
            inner = build()
            out = cls(inner, cache_dir)
            remember_identity(db, node_text(node), out.identity, int(inner.dim))
            return out
        finally:
            db.close()

    def encode(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        """The matrix the wrapped embedder returns for this call: the stored one when this exact call (same texts,
        same order, same kind) was made before, else computed now and stored."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        key = call_key(self.identity, kind, texts)
        rows = self._db._rows("SELECT n, dim, vecs FROM calls WHERE key = ?", [key])
        if rows:
            self.hits += len(texts)
            return unpack(rows[0][2], int(rows[0][0]), int(rows[0][1]))
        fresh = np.asarray(self.inner.encode(texts, kind=kind), dtype=np.float32)
        if fresh.ndim != 2 or fresh.shape[0] != len(texts):
            raise RuntimeError(f"embedder {self.model_id} returned shape {fresh.shape} for {len(texts)} texts")
        with self._db.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO calls (key, n, dim, vecs) VALUES (?, ?, ?, ?)",
                        (key, fresh.shape[0], fresh.shape[1], pack(fresh)))
        self.computed += len(texts)
        return fresh
