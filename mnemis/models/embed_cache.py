"""Embeddings cached on disk, so a replay computes no vector and is exact on any CPU.

:class:`CachedEmbedder` wraps any embedder (``model_id``, ``dim``, ``encode(texts, kind=...)``). Each call looks
every text up in a SQLite file keyed by sha256(embedder identity, kind, text); a call with a text not stored goes
to the wrapped model whole, as it would without the cache, and the new vectors are stored. The vectors are stored as the float32 bytes the model returned, so a later run (or a replay
from a run's archive, :mod:`mnemis.models.cache_archive`) gets bit-identical vectors whatever the CPU's vector
kernels, thread count or library versions. The identity is the wrapped embedder's ``model_id`` (a name plus a
hash of the weight files and the output size) plus the settings that change a vector (query instruction, query
precision, normalisation).

The wrapped embedder may be given as a zero-argument factory: it is then built only on the first miss, so a
replay whose vectors are all archived loads no weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mnemis.store.connection import SQLiteFile

SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, vec BLOB NOT NULL)"
_LOOKUP_CHUNK = 500
_IDENTITY_ATTRS = ("query_instruction", "query_precision", "normalize", "dim")


def embedder_identity(embedder: Any) -> str:
    """The embedder's ``model_id`` plus the settings that change its vectors."""
    parts = {"model": getattr(embedder, "model_id", type(embedder).__name__)}
    for attr in _IDENTITY_ATTRS:
        if hasattr(embedder, attr):
            parts[attr] = getattr(embedder, attr)
    return json.dumps(parts, sort_keys=True, default=str)


def text_key(identity: str, kind: str, text: str) -> str:
    blob = json.dumps([identity, kind, text], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def pack(vec: np.ndarray) -> bytes:
    """A vector as little-endian float32 bytes (the archive's and the cache's form)."""
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def unpack(blob: bytes, dim: int) -> np.ndarray:
    vec = np.frombuffer(blob, dtype="<f4")
    if vec.shape[0] != dim:
        raise ValueError(f"stored vector has {vec.shape[0]} values, its row says {dim}")
    return vec.astype(np.float32)


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
            self._inner = self._factory()
            built = embedder_identity(self._inner)
            if built != self.identity:
                raise ValueError(f"the embedder built has identity {built}, its cache entries were keyed {self.identity}")
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
        """Vectors in input order: all stored ones when every text is stored, else what the wrapped embedder
        returns for the whole call (the batch it would have seen without a cache: a vector can depend on its
        batch in the last bits), the new texts' vectors stored (a text keeps its first vector)."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(self.identity, kind, t) for t in texts]
        uniq = list(dict.fromkeys(keys))
        known = self._lookup(uniq)
        if len(known) == len(uniq):
            self.hits += len(keys)
            return np.stack([known[k] for k in keys]).astype(np.float32, copy=False)
        fresh = np.asarray(self.inner.encode(texts, kind=kind), dtype=np.float32)
        if fresh.ndim != 2 or fresh.shape[0] != len(texts):
            raise RuntimeError(f"embedder {self.model_id} returned shape {fresh.shape} for {len(texts)} texts")
        new: dict[str, np.ndarray] = {}
        for k, vec in zip(keys, fresh):
            if k not in known:
                new.setdefault(k, vec)
        self._store(new)
        self.computed += len(texts)
        return fresh

    def _lookup(self, keys: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for s in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[s : s + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, dim, blob in self._db._rows(f"SELECT key, dim, vec FROM vectors WHERE key IN ({marks})", chunk):
                out[key] = unpack(blob, int(dim))
        return out

    def _store(self, vecs: dict[str, np.ndarray]) -> None:
        with self._db.transaction() as cur:
            cur.executemany("INSERT OR IGNORE INTO vectors (key, dim, vec) VALUES (?, ?, ?)",
                            [(k, int(v.shape[0]), pack(v)) for k, v in vecs.items()])
