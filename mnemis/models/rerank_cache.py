"""Reranker scores, deduplicated within a call and cached on disk across calls and processes.

:class:`CachedReranker` wraps any reranker (``model_id`` + ``score(query|queries, documents)``). Each call
scores every distinct (query, document) pair once, looks the pairs up in a SQLite file keyed by
sha256(reranker identity, query, document) and sends only the misses to the wrapped model (built on the first miss
when it is given as a factory with its identity, :meth:`CachedReranker.for_node`). A sweep over
``retrieval.k`` or routes therefore rescores nothing it has scored before. Identity is the wrapped
reranker's ``model_id`` (a name plus a hash of the weight files, never a path) plus its instruction and
token budget, the settings that change a score.

``stats`` counts pairs asked, unique pairs, cache hits and pairs scored since construction. A wrapped model that
raises (engine dead, out of memory) is retried with back-off and then stops the stage with ``EngineFailure``
(:mod:`mnemis.models.failures`); nothing of that call is cached.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemis.models.failures import with_retries
from mnemis.sqlite_file import SQLiteFile

SCHEMA = "CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, score REAL NOT NULL)"
_LOOKUP_CHUNK = 500  # SQLite's variable limit is 999 on old builds


@dataclass
class RerankStats:
    pairs: int = 0          # pairs asked for
    unique: int = 0         # distinct pairs among them (per call)
    cache_hits: int = 0     # distinct pairs found on disk
    scored: int = 0         # distinct pairs sent to the model

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hit_rate"] = round(self.cache_hits / self.unique, 4) if self.unique else None
        return d


def reranker_identity(reranker: Any) -> str:
    """The wrapped model's identity plus the settings that change its scores."""
    parts = {"model": getattr(reranker, "model_id", type(reranker).__name__)}
    for attr in ("instruction", "max_length"):
        if hasattr(reranker, attr):
            parts[attr] = getattr(reranker, attr)
    return json.dumps(parts, sort_keys=True)


def pair_key(identity: str, query: str, document: str) -> str:
    blob = json.dumps([identity, query, document], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CachedReranker:
    """Deduplicating, disk-caching front for a reranker.

    Args:
        reranker: the model (any object with ``model_id`` and ``score``).
        cache_dir: folder of ``rerank.sqlite``; ``None`` = deduplicate only, no disk cache.
        engine_retries / engine_backoff_s: retries of a raising ``score`` call and the first wait (doubling).
    """

    def __init__(self, reranker: Any, cache_dir: str | Path | None = None, *, identity: str | None = None,
                 engine_retries: int = 3, engine_backoff_s: float = 2.0) -> None:
        lazy = identity is not None and callable(reranker) and not hasattr(reranker, "score")
        self._inner = None if lazy else reranker
        self._factory = reranker if lazy else None
        self.identity = identity if lazy else reranker_identity(reranker)
        self.model_id = json.loads(self.identity)["model"]
        self.engine_retries, self.engine_backoff_s = engine_retries, engine_backoff_s
        self.stats = RerankStats()
        self._db: SQLiteFile | None = None
        if cache_dir is not None:
            self._db = SQLiteFile(Path(cache_dir) / "rerank.sqlite")
            self._db._create(SCHEMA)

    @property
    def inner(self) -> Any:
        """The wrapped reranker (built now if it was given as a factory with its identity)."""
        if self._inner is None:
            assert self._factory is not None
            from mnemis.models.cache_identity import build_as_keyed

            self._inner = build_as_keyed(self._factory, reranker_identity, self.identity, "reranker")
        return self._inner

    @classmethod
    def for_node(cls, node: Any, build: Any, cache_dir: str | Path) -> CachedReranker:
        """The cache for the reranker a config ``node`` builds: lazily built when the cache knows the node's
        identity (:mod:`mnemis.models.cache_identity`), else built now and its identity recorded."""
        from mnemis.models.cache_identity import known_identity, node_text, remember_identity

        db = SQLiteFile(Path(cache_dir) / "rerank.sqlite")
        try:
            known = known_identity(db, node_text(node))
            if known is not None:
                return cls(build, cache_dir, identity=known[0])
            out = cls(build(), cache_dir)
            remember_identity(db, node_text(node), out.identity, None)
            return out
        finally:
            db.close()

    def __getattr__(self, name: str) -> Any:  # instruction, batch_size, ... of the wrapped model,
        # only once built: probing an attribute (hasattr) must not load the weights
        if name.startswith("_") or self.__dict__.get("_inner") is None:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def reset_stats(self) -> None:
        self.stats = RerankStats()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """Scores in input order, as the wrapped reranker's ``score`` would return them."""
        documents = [str(d) for d in documents]
        queries = [query] * len(documents) if isinstance(query, str) else [str(q) for q in query]
        if len(queries) != len(documents):
            raise ValueError(f"got {len(queries)} queries for {len(documents)} documents "
                             "(pass one query or one per document)")
        keys = [pair_key(self.identity, q, d) for q, d in zip(queries, documents)]
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        self.stats.pairs += len(keys)
        self.stats.unique += len(first)
        known = self._lookup(list(first))
        self.stats.cache_hits += len(known)
        missing = [k for k in first if k not in known]
        if missing:
            idx = [first[k] for k in missing]
            raw = with_retries(lambda: self.inner.score([queries[i] for i in idx], [documents[i] for i in idx]),
                               stage="rerank", items=len(idx), retries=self.engine_retries,
                               first_backoff_s=self.engine_backoff_s)
            fresh = np.asarray(raw, dtype=np.float64).reshape(-1)
            if fresh.shape[0] != len(idx):
                raise RuntimeError(f"reranker {self.model_id} returned {fresh.shape[0]} scores for {len(idx)} pairs")
            if not np.isfinite(fresh).all():
                raise RuntimeError(f"reranker {self.model_id} returned non-finite scores")
            new = dict(zip(missing, fresh.tolist()))
            self._store(new)
            known.update(new)
            self.stats.scored += len(missing)
        return np.asarray([known[k] for k in keys], dtype=np.float32)

    def _lookup(self, keys: list[str]) -> dict[str, float]:
        if self._db is None or not keys:
            return {}
        out: dict[str, float] = {}
        for s in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[s : s + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            out.update(self._db._rows(f"SELECT key, score FROM scores WHERE key IN ({marks})", chunk))
        return out

    def _store(self, scores: dict[str, float]) -> None:
        if self._db is None or not scores:
            return
        with self._db.transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO scores (key, score) VALUES (?, ?)", list(scores.items()))
