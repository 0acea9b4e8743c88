"""System-1 alone over a built store, as the retrieval benchmarks run it (``experiments/bench/system1_recall.py``,
``system1_cv.py``): one search of a batch of questions under an episode-text recipe, with the query vectors
memoised across the configurations compared."""

from __future__ import annotations

import time

import numpy as np


class CachedQueries:
    """Wraps an embedder and memoises query vectors (the same 1,540 questions are embedded once)."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.dim = inner, inner.model_id, inner.dim
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts, *, kind="document"):
        if kind != "query":
            return self.inner.encode(texts, kind=kind)
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            for t, v in zip(todo, self.inner.encode(todo, kind="query")):
                self._memo[t] = v
        return np.stack([self._memo[t] for t in texts])


def run_config(store, embedder, questions, *, recipe, **kw) -> tuple[list[list[str]], float]:
    from mnemis.retrieve.system1 import System1

    s1 = System1(store, embedder, k=20, pool_factor=1, routes="rag", recipe=recipe, cache_dir=None, **kw)
    t = time.perf_counter()
    ctxs = s1.search(questions)
    return [[h.id for h in c.episodes] for c in ctxs], time.perf_counter() - t
