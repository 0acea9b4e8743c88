"""System-1 similarity search (the paper): per item type, cosine + BM25 lists fused by RRF.

For each query and each item type (episodes, entities, facts) two candidate lists are drawn from the
query's own group only: the ``pool_factor × budget`` nearest items by cosine (optionally only those
with cosine ≥ ``min_cosine``) and the ``pool_factor × budget`` best BM25 items. Reciprocal rank fusion
orders their union, truncated to the budget: ``k`` episodes, ``2k`` entities, ``2k`` facts. Every
:class:`~mnemis.types.Hit` keeps the score it got from each list (``cosine``, ``bm25``) and the fused
``rrf`` score.

Batch API: ``search`` embeds every query of the batch in one ``encode`` call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from mnemis.index.catalog import IndexCatalog, ItemIndexes
from mnemis.index.rrf import rrf
from mnemis.models.protocols import Embedder
from mnemis.store.sqlite import GraphStore
from mnemis.texts import BM25_RECIPE, EpisodeRecipe
from mnemis.types import Hit, Question, RetrievedContext

Route = Literal["both", "rag", "graph"]
ROUTE_ITEMS: dict[str, tuple[str, ...]] = {"rag": ("episode",), "graph": ("entity", "fact"), "both": ("episode", "entity", "fact")}
_FIELD = {"episode": "episodes", "entity": "entities", "fact": "facts"}
_WH = re.compile(r"^\s*(what|when|where|who|whom|whose|which|why|how|did|does|do|is|are|was|were|has|have|had)\b\W*", re.I)


# BM25 counts three times in the fusion: chosen out of sample by 2-fold cross-validation over LoCoMo
# conversations with MiniLM (experiments/bench/system1_cv.py; both folds picked 3).
DEFAULT_WEIGHTS = {"cosine": 1.0, "bm25": 3.0}
# RRF constant, measured on the same eval (see mnemis.index.rrf); Graphiti and the paper use 0, the literature 60.
DEFAULT_RRF_K = 10.0


class UnknownGroupError(KeyError):
    """A query names a group that has no rows in the store."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def normalize_query(text: str) -> str:
    """Query-side normalisation used before BM25: drop a leading question word (e.g. ``When did``)."""
    return _WH.sub("", text, count=1)


class System1:
    """Cosine + BM25 search with RRF fusion over the items of each query's group.

    Args:
        store: graph store holding items and their embeddings (see :mod:`mnemis.ingest.embed_items`).
        embedder: query encoder (must be the model that embedded the items).
        k: episode budget; entities and facts get ``graph_factor * k``.
        graph_factor: multiplier of ``k`` for the entity and fact budgets (the same value as the fuser's).
        routes: ``both``, ``rag`` (episodes only) or ``graph`` (entities and facts only).
        rrf_k: RRF constant (see :mod:`mnemis.index.rrf` for the default).
        weights: RRF weight per list (``{"cosine": w, "bm25": w}``; ``None`` = 1 each).
        pool_factor: candidates drawn from each list = ``pool_factor × budget``.
        min_cosine: drop cosine candidates below this similarity (Graphiti uses 0.6); ``None`` keeps all.
        index: vector index name (``exact``, ``faiss_flat``, ``faiss_ivf``, ``faiss_hnsw``), or ``grouped``: exact
            search of every query of every group of the batch in one :func:`mnemis.ops.grouped_topk` call (the
            Triton kernel on CUDA, the torch reference on CPU) instead of one search per group.
        index_params: keyword arguments of the vector index.
        bm25: also search BM25 (``False`` = cosine only); ``vector=False`` in the same spirit.
        bm25_params: keyword arguments of :class:`~mnemis.index.bm25.BM25Index`.
        recipe: episode text recipe for BM25 (an :class:`EpisodeRecipe` or its fields as a dict); the embedded
            text recipe is fixed at embedding time (``embed_missing``).
        cache_dir: index cache folder (``"auto"`` next to the store, ``None`` = memory only).
        device: torch device of exact indexes.
    """

    def __init__(
        self,
        store: GraphStore,
        embedder: Embedder | None,
        *,
        k: int = 10,
        routes: Route = "both",
        rrf_k: float = DEFAULT_RRF_K,
        weights: Mapping[str, float] | None = DEFAULT_WEIGHTS,
        pool_factor: float = 2,
        graph_factor: int = 2,
        min_cosine: float | None = None,
        index: str = "exact",
        index_params: Mapping[str, object] | None = None,
        bm25: bool = True,
        vector: bool = True,
        bm25_params: Mapping[str, object] | None = None,
        recipe: EpisodeRecipe | Mapping[str, object] = BM25_RECIPE,
        query_normalize: bool = True,
        cache_dir: str | None = "auto",
        device: str = "cpu",
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if routes not in ROUTE_ITEMS:
            raise ValueError(f"unknown routes {routes!r} (both, rag, graph)")
        if not (bm25 or vector):
            raise ValueError("at least one of bm25 and vector must be enabled")
        if vector and embedder is None:
            raise ValueError("an embedder is needed for the vector list (or pass vector=False)")
        if not isinstance(recipe, EpisodeRecipe):
            recipe = EpisodeRecipe(**recipe)
        self.store, self.embedder = store, embedder
        self.k, self.routes, self.rrf_k = k, routes, rrf_k
        self.weights = dict(weights or {})
        if graph_factor < 1:
            raise ValueError(f"graph_factor must be >= 1, got {graph_factor}")
        self.pool_factor, self.graph_factor, self.min_cosine = pool_factor, graph_factor, min_cosine
        self.use_bm25, self.use_vector, self.query_normalize = bm25, vector, query_normalize
        self.grouped = index == "grouped"
        self.device = device
        self.catalog = IndexCatalog(
            store, vector="exact" if self.grouped else index, vector_params=dict(index_params or {}),
            bm25_params=dict(bm25_params or {}), recipe=recipe, cache_dir=cache_dir, device=device,
        )
        self._known_groups: set[str] = set()

    def budget(self, item: str) -> int:
        """Hits kept per type: ``k`` episodes, ``graph_factor * k`` entities and facts (the fuser's budgets)."""
        return self.k if item == "episode" else self.graph_factor * self.k

    def refresh(self, group_id: str | None = None) -> None:
        """Re-read the store (after new items or embeddings) on the next search."""
        self.catalog.invalidate(group_id)
        self._known_groups.clear()

    def _check_group(self, group_id: str) -> None:
        if group_id in self._known_groups:
            return
        counts = self.store.counts(group_id)
        if not any(counts.values()):
            raise UnknownGroupError(f"unknown group {group_id!r}: the store {self.store.path} has no rows for it")
        self._known_groups.add(group_id)

    def _parse(self, queries: Sequence[tuple[str, str] | Question]) -> list[tuple[str, str, str]]:
        out = []
        for n, q in enumerate(queries):
            qid, gid, text = (q.id, q.group_id, q.question) if isinstance(q, Question) else (str(n), q[0], q[1])
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"query {qid!r} (group {gid!r}) is empty")
            self._check_group(gid)
            out.append((qid, gid, text))
        return out

    def search(self, queries: Sequence[tuple[str, str] | Question]) -> list[RetrievedContext]:
        """Retrieve for every query; ``queries`` are ``(group_id, text)`` pairs or :class:`Question` s.

        Returns one :class:`RetrievedContext` per query, in input order (``question_id`` is the
        question's id, or the position for tuples).
        """
        parsed = self._parse(queries)
        if not parsed:
            return []
        qvecs = None
        if self.use_vector:
            qvecs = np.asarray(self.embedder.encode([t for _, _, t in parsed], kind="query"), dtype=np.float32)
        bm25_texts = [normalize_query(t) if self.query_normalize else t for _, _, t in parsed]
        out = [RetrievedContext(question_id=qid, group_id=gid) for qid, gid, _ in parsed]
        by_group: dict[str, list[int]] = {}
        for n, (_, gid, _) in enumerate(parsed):
            by_group.setdefault(gid, []).append(n)
        grouped: dict[str, dict[int, tuple[list[str], list[float]]]] = {}
        if self.grouped and self.use_vector:
            grouped = {item: self._grouped_vector_search(item, by_group, qvecs)
                       for item in ROUTE_ITEMS[self.routes]}
        for gid, rows in by_group.items():
            for item in ROUTE_ITEMS[self.routes]:
                idx = self.catalog.get(gid, item)
                if not len(idx):
                    continue
                if idx.unembedded and self.use_vector:
                    for r in rows:
                        out[r].flags.append(f"unembedded_{item}s:{idx.unembedded}")
                hits = self._search_items(idx, item, rows, qvecs, bm25_texts, grouped.get(item))
                for r, h in zip(rows, hits):
                    setattr(out[r], _FIELD[item], h)
        return out

    def rank_within(self, queries: Sequence[Question], contexts: Sequence[RetrievedContext]) -> list[RetrievedContext]:
        """Each context's lists put in System-1's own order, the search restricted to the items already in them.

        Per query and item type, the listed items get their cosine and BM25 ranks against the query over the whole
        group (the ranks :meth:`search` sees, ``min_cosine`` included) and are ordered by the same weighted RRF of
        those ranks, so the order is System-1's full ranking with every other item removed; no item is added or
        dropped. Items no index holds (categories, unembedded items with no BM25 match) follow in their given
        order. Used to give System-2's walk-ordered lists a relevance order before fusion
        (``retrieval.fusion.system2_order: similarity``). Returns new contexts (inputs untouched).
        """
        if len(queries) != len(contexts):
            raise ValueError(f"{len(contexts)} contexts for {len(queries)} queries")
        parsed = self._parse(queries)
        out = [c.model_copy(deep=True) for c in contexts]
        for (qid, gid, _), c in zip(parsed, out):
            if c.group_id != gid:
                raise ValueError(f"context of group {c.group_id!r} aligned with query {qid!r} of group {gid!r}")
        if not parsed:
            return out
        qvecs = None
        if self.use_vector:
            qvecs = np.asarray(self.embedder.encode([t for _, _, t in parsed], kind="query"), dtype=np.float32)
        texts = [normalize_query(t) if self.query_normalize else t for _, _, t in parsed]
        weights = {name: w for name, w in self.weights.items() if name in ("cosine", "bm25")}
        by_group: dict[str, list[int]] = {}
        for n, (_, gid, _) in enumerate(parsed):
            by_group.setdefault(gid, []).append(n)
        for gid, rows in by_group.items():
            for item in ROUTE_ITEMS["both"]:
                rows_here = [r for r in rows if getattr(out[r], _FIELD[item])]
                if not rows_here:
                    continue
                idx = self.catalog.get(gid, item)
                lists: list[dict[str, tuple[list[str], list[float]]]] = [{} for _ in rows_here]
                if self.use_vector and idx.vector is not None and len(idx.vector):
                    # one query a time: a row's scores then do not depend on the batch it came in (a batched
                    # product can differ in the last bit and reorder near-ties), so a replay ranks the same
                    for slot, r in enumerate(rows_here):
                        scores, ids = idx.vector.search(qvecs[r : r + 1], len(idx.vector))
                        pairs = [(i, float(x)) for i, x in zip(ids[0], scores[0])
                                 if self.min_cosine is None or x >= self.min_cosine]
                        lists[slot]["cosine"] = ([i for i, _ in pairs], [x for _, x in pairs])
                if self.use_bm25 and len(idx.bm25):
                    scores, ids = idx.bm25.search([texts[r] for r in rows_here], len(idx.bm25))
                    for slot, (s_row, i_row) in enumerate(zip(scores, ids)):
                        lists[slot]["bm25"] = (list(i_row), [float(s) for s in s_row])
                for r, named in zip(rows_here, lists):
                    named = {k: v for k, v in named.items() if v[0]}
                    # ranks over the whole group (as search ranks them), then only the given items are kept
                    fused = rrf(named, k_rrf=self.rrf_k, weights={k: w for k, w in weights.items() if k in named})
                    hits = getattr(out[r], _FIELD[item])
                    by_id = {h.id: h for h in hits}
                    ranked = []
                    for i, s, parts in zip(fused.ids, fused.scores, fused.parts):
                        h = by_id.get(i)
                        if h is not None:
                            h.scores.update({f"within_{k}": v for k, v in parts.items()})
                            h.scores["within_rrf"] = s
                            ranked.append(h)
                    seen = {h.id for h in ranked}
                    setattr(out[r], _FIELD[item], ranked + [h for h in hits if h.id not in seen])
        return out

    def pool(self, item: str) -> int:
        budget = self.budget(item)
        return max(budget, int(round(self.pool_factor * budget)))

    def _grouped_vector_search(
        self, item: str, by_group: Mapping[str, list[int]], qvecs: np.ndarray
    ) -> dict[int, tuple[list[str], list[float]]]:
        """Cosine pools of every query of every group in one grouped top-k call (``index=grouped``)."""
        import torch

        from mnemis.ops import grouped_topk

        mats, row_groups, ids, q_rows, q_groups = [], [], [], [], []
        for gnum, (gid, rows) in enumerate(by_group.items()):
            vec = self.catalog.get(gid, item).vector
            if vec is None or not len(vec):
                continue
            mats.append(vec.vectors())
            row_groups += [gnum] * len(vec)
            ids += vec.ids
            q_rows += rows
            q_groups += [gnum] * len(rows)
        if not mats:
            return {}
        device = "cuda" if self.device in ("cuda", "auto") and torch.cuda.is_available() else "cpu"
        scores, found = grouped_topk(
            torch.from_numpy(np.ascontiguousarray(qvecs[q_rows])).to(device),
            torch.tensor(q_groups, device=device), torch.from_numpy(np.concatenate(mats)).to(device),
            torch.tensor(row_groups, device=device), self.pool(item), presorted=True,
        )
        out = {}
        for r, s_row, i_row in zip(q_rows, scores.cpu().tolist(), found.cpu().tolist()):
            kept = [(ids[j], s) for j, s in zip(i_row, s_row) if j >= 0]
            out[r] = ([i for i, _ in kept], [s for _, s in kept])
        return out

    def _search_items(
        self, idx: ItemIndexes, item: str, rows: list[int], qvecs: np.ndarray | None, texts: list[str],
        grouped: Mapping[int, tuple[list[str], list[float]]] | None = None,
    ) -> list[list[Hit]]:
        budget = self.budget(item)
        pool = self.pool(item)
        lists: list[dict[str, tuple[list[str], list[float]]]] = [{} for _ in rows]
        cosine: list[tuple[list[str], list[float]]] = []
        if self.use_vector and grouped is not None:
            cosine = [grouped.get(r, ([], [])) for r in rows]
        elif self.use_vector and idx.vector is not None:
            scores, ids = idx.vector.search(qvecs[rows], pool)
            cosine = [(list(i_row), [float(s) for s in s_row]) for s_row, i_row in zip(scores, ids)]
        for slot, (i_row, s_row) in enumerate(cosine):
            pairs = list(zip(i_row, s_row))
            if self.min_cosine is not None:
                pairs = [(i, s) for i, s in pairs if s >= self.min_cosine]
            lists[slot]["cosine"] = ([i for i, _ in pairs], [s for _, s in pairs])
        if self.use_bm25:
            scores, ids = idx.bm25.search([texts[r] for r in rows], pool)
            for slot, (s_row, i_row) in enumerate(zip(scores, ids)):
                lists[slot]["bm25"] = (i_row, [float(s) for s in s_row])
        weights = {name: w for name, w in self.weights.items() if name in ("cosine", "bm25")}
        result = []
        for named in lists:
            fused = rrf(named, k_rrf=self.rrf_k, weights={n: w for n, w in weights.items() if n in named}, limit=budget)
            result.append([
                Hit(id=i, kind=item, score=s, scores={**p, "rrf": s})
                for i, s, p in zip(fused.ids, fused.scores, fused.parts)
            ])
        return result
