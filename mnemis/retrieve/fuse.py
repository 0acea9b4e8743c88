"""Fusion of System-1 and System-2 results (the paper), batched across queries.

Per item type (episodes; entities and categories together; facts) the candidates of a query are the
union of the routes its ``mode`` asks for, de-duplicated by id (System-1 first, score dicts merged).
Then, per ``scorer``:

- ``reranker``: every (query, item text) pair of the whole batch goes to ONE ``reranker.score`` call
  (the reranker batches internally); each list is sorted by that score (ties keep union order).
- ``rrf``: no model. System-1's own RRF order is kept and System-2 items are appended after it in
  walk order, because System-2 output has no ranking (paper footnote 2).
- ``rrf_routes``: no model. Reciprocal-rank fusion of the two routes' lists: an item scores
  ``sum 1 / (rrf_k + rank)`` over the routes that returned it (rank from 1 in that route's list; System-2's in
  walk order: selected nodes first, then their neighbours, facts and episodes in expansion order), so an item
  both routes found rises and System-2's picks are interleaved with System-1's best instead of trailing them.
  ``system2_weight`` scales System-2's term (``w / (rrf_k + rank)``): 1 weighs the routes alike; below 1 System-1's
  order leads and the walk lifts what it reached by fewer places (0 = System-1's order, the walk only adding
  items at the tail).

``system2_order``: ``walk`` hands System-2's lists over as the walk produced them; ``similarity`` first puts them
in System-1's relevance order over just the items the walk reached (:meth:`mnemis.retrieve.system1.System1.rank_within`;
needs ``system1``), which is what ``rrf_routes`` (and the ``max_pairs`` head) then ranks by.

``max_pairs`` (with ``reranker``): the reranker scores at most that many (question, item) pairs per question,
shared among the types in proportion to their budgets; each type's list is first put in ``rrf_routes`` order,
its head is scored and sorted, and the rest follows in that order. A causal LM scored as P("yes")
(:class:`mnemis.models.rerank.CausalLMReranker`, e.g. the selection model itself) is then affordable on CPU.

Lists are cut to ``k`` episodes, ``graph_factor × k`` entities+categories and ``graph_factor × k``
facts (10 / 20 / 20 by default; ``k=30`` gives 30 / 60 / 60).

Modes: ``system1`` (System-1 only, e.g. reranked), ``system2`` (System-2 only) and ``both``. A query
whose System-2 walk fell back (flag ``s2_fallback``) uses System-1 alone in both System-2 modes and
keeps the flag. Reranker document text per type comes from :func:`mnemis.retrieve.context.format_item`:
episode -> its formatted line, entity/category -> ``name [tags]: summary``,
fact -> ``fact (from – to|now)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np

from mnemis.models.protocols import Reranker
from mnemis.retrieve.context import fetch_items, format_item
from mnemis.retrieve.system2 import FALLBACK_FLAG, System2Result
from mnemis.store.sqlite import GraphStore
from mnemis.types import Hit, Question, RetrievedContext

log = logging.getLogger(__name__)
Mode = Literal["system1", "system2", "both"]
Scorer = Literal["reranker", "rrf", "rrf_routes"]
Order = Literal["walk", "similarity"]
SCORERS = ("reranker", "rrf", "rrf_routes")
FIELDS = ("episodes", "entities", "facts")


class Fuser:
    """Union, score and cut the routes' lists for a batch of questions.

    Args:
        store: graph store (item texts for the reranker).
        reranker: a :class:`~mnemis.models.protocols.Reranker`; needed when ``scorer="reranker"``.
        k: episode budget; entities+categories and facts get ``graph_factor * k``.
        mode: ``system1``, ``system2`` or ``both``.
        scorer: ``reranker``, ``rrf`` or ``rrf_routes``.
        graph_factor: multiplier of ``k`` for the entity and fact budgets (2 in the paper).
        rrf_k: the constant of ``rrf_routes`` (and of the order ``max_pairs`` scores first).
        max_pairs: (``reranker``) most pairs scored per question; None = every pair (the paper).
        system2_order: ``walk`` or ``similarity`` (System-2's lists in System-1's order before scoring).
        system1: a :class:`~mnemis.retrieve.system1.System1` (its ``rank_within``); needed for ``similarity``.
        system2_weight: weight of System-2's list in ``rrf_routes`` (and in the order ``max_pairs`` scores first);
            System-1's weighs 1.
    """

    def __init__(self, store: GraphStore, reranker: Reranker | None = None, *, k: int = 10,
                 mode: Mode = "both", scorer: Scorer = "reranker", graph_factor: int = 2, rrf_k: int = 60,
                 max_pairs: int | None = None, system2_order: Order = "walk", system1=None,
                 system2_weight: float = 1.0) -> None:
        if mode not in ("system1", "system2", "both"):
            raise ValueError(f"unknown fusion mode {mode!r} (system1, system2, both)")
        if scorer not in SCORERS:
            raise ValueError(f"unknown scorer {scorer!r} ({', '.join(SCORERS)})")
        if scorer == "reranker" and reranker is None:
            raise ValueError("scorer='reranker' needs a reranker")
        if k < 1 or graph_factor < 1:
            raise ValueError("k and graph_factor must be >= 1")
        if rrf_k < 0:
            raise ValueError(f"fusion rrf_k must be >= 0, got {rrf_k}")
        if max_pairs is not None and max_pairs < len(FIELDS):
            raise ValueError(f"fusion max_pairs must be at least {len(FIELDS)} (one per item type) or null, "
                             f"got {max_pairs}")
        if not system2_weight >= 0:  # (also refuses NaN)
            raise ValueError(f"fusion system2_weight must be >= 0, got {system2_weight}")
        if system2_order not in ("walk", "similarity"):
            raise ValueError(f"unknown system2_order {system2_order!r} (walk, similarity)")
        self.store, self.reranker = store, reranker
        self.system2_order, self.system1 = system2_order, system1
        self.k, self.mode, self.scorer, self.graph_factor = k, mode, scorer, graph_factor
        self.rrf_k, self.max_pairs, self.system2_weight = rrf_k, max_pairs, float(system2_weight)

    def budget(self, field: str) -> int:
        return self.k if field == "episodes" else self.graph_factor * self.k

    def fuse(
        self,
        questions: Sequence[Question],
        system1: Sequence[RetrievedContext] | None = None,
        system2: Sequence[System2Result | RetrievedContext] | None = None,
    ) -> list[RetrievedContext]:
        """Final contexts for ``questions`` (same order); route lists are aligned with ``questions``."""
        n = len(questions)
        for name, lst in (("system1", system1), ("system2", system2)):
            if lst is not None and len(lst) != n:
                raise ValueError(f"{len(lst)} {name} results for {n} questions")
        if self.mode in ("system1",) and system1 is None:
            raise ValueError("mode 'system1' needs System-1 results")
        if self.mode in ("system2", "both") and system2 is None:
            raise ValueError(f"mode {self.mode!r} needs System-2 results")
        s2 = None
        if system2 is not None:
            s2 = [r.context if isinstance(r, System2Result) else r for r in system2]
            if self.system2_order == "similarity" and self.mode != "system1":
                if self.system1 is None:
                    raise ValueError("system2_order='similarity' needs System-1 (its rank_within) to order "
                                     "System-2's lists: pass system1=")
                s2 = self.system1.rank_within(questions, s2)  # new contexts: the walk's record keeps its order
        unions = [self._union(i, q, system1, s2) for i, q in enumerate(questions)]
        if self.scorer == "rrf_routes" or (self.scorer == "reranker" and self.max_pairs is not None):
            for i, ctx in enumerate(unions):
                c2 = s2[i] if s2 is not None else None
                self._route_rrf(ctx, self._routes(system1[i] if system1 is not None else None, c2), c2)
        if self.scorer == "reranker":
            self._rerank(questions, unions)
        for ctx in unions:
            for f in FIELDS:
                setattr(ctx, f, getattr(ctx, f)[: self.budget(f)])
        return unions

    # ------------------------------------------------------------------ internals
    def _union(self, i: int, q: Question, s1: Sequence[RetrievedContext] | None,
               s2: Sequence[RetrievedContext] | None) -> RetrievedContext:
        c1 = s1[i] if s1 is not None else None
        c2 = s2[i] if s2 is not None else None
        for c in (c1, c2):
            if c is not None and c.group_id != q.group_id:
                raise ValueError(f"route result of group {c.group_id!r} aligned with question {q.id!r} "
                                 f"of group {q.group_id!r}")
        fallback = c2 is not None and FALLBACK_FLAG in c2.flags
        routes = self._routes(c1, c2)
        flags = list(dict.fromkeys(f for c in (c1, c2) if c is not None for f in c.flags))
        if fallback and c1 is None:
            flags.append("s2_fallback_without_system1")
        out = RetrievedContext(question_id=q.id, group_id=q.group_id, flags=flags)
        for f in FIELDS:
            merged: dict[str, Hit] = {}
            for c in routes:
                for h in getattr(c, f):
                    if h.id in merged:
                        old = merged[h.id].scores
                        old.update({k: v for k, v in h.scores.items() if k not in old})
                    else:
                        merged[h.id] = h.model_copy(deep=True)
            setattr(out, f, list(merged.values()))
        return out

    def _routes(self, c1: RetrievedContext | None, c2: RetrievedContext | None) -> list[RetrievedContext]:
        """The route results the mode takes (System-1 alone when the walk fell back)."""
        fallback = c2 is not None and FALLBACK_FLAG in c2.flags
        routes = []
        if c1 is not None and (self.mode in ("system1", "both") or fallback):
            routes.append(c1)
        if c2 is not None and self.mode in ("system2", "both") and not fallback:
            routes.append(c2)
        return routes

    def _route_rrf(self, ctx: RetrievedContext, routes: Sequence[RetrievedContext],
                   system2: RetrievedContext | None) -> None:
        """Each list of ``ctx`` sorted by reciprocal-rank fusion over the routes' own lists (ties keep union
        order; System-2's list, ``system2``, weighs ``system2_weight``); the fused score is recorded as
        ``rrf_routes``."""
        for f in FIELDS:
            fused: dict[str, float] = {}
            for route in routes:
                weight = self.system2_weight if route is system2 else 1.0
                for rank, h in enumerate(getattr(route, f), start=1):
                    fused[h.id] = fused.get(h.id, 0.0) + weight / (self.rrf_k + rank)
            lst = getattr(ctx, f)
            for h in lst:
                h.scores["rrf_routes"] = fused.get(h.id, 0.0)
                if self.scorer == "rrf_routes":
                    h.score = h.scores["rrf_routes"]
            order = sorted(range(len(lst)), key=lambda j: (-lst[j].scores["rrf_routes"], j))
            setattr(ctx, f, [lst[j] for j in order])

    def pair_budget(self, field: str) -> int | None:
        """Pairs per question the reranker scores in ``field`` (``max_pairs`` shared by the types' budgets)."""
        if self.max_pairs is None:
            return None
        total = sum(self.budget(f) for f in FIELDS)
        return max(1, self.max_pairs * self.budget(field) // total)

    def _rerank(self, questions: Sequence[Question], unions: list[RetrievedContext]) -> None:
        items = fetch_items(self.store, unions)
        queries: list[str] = []
        docs: list[str] = []
        slots: list[tuple[int, str, int]] = []
        missing = 0
        for i, (q, ctx) in enumerate(zip(questions, unions)):
            for f in FIELDS:
                kept = []
                limit = self.pair_budget(f)
                for h in getattr(ctx, f):
                    item = items.get((ctx.group_id, h.id))
                    if item is None:
                        missing += 1
                        continue
                    if limit is not None and len(kept) >= limit:  # past the pair budget: kept, not scored
                        kept.append(h)
                        continue
                    slots.append((i, f, len(kept)))
                    kept.append(h)
                    queries.append(q.question)
                    docs.append(format_item(item))
                setattr(ctx, f, kept)
        if missing:
            log.warning("fusion: %d retrieved ids are not in the store; dropped", missing)
        if not docs:
            return
        scores = np.asarray(self.reranker.score(queries, docs), dtype=np.float64).reshape(-1)
        if scores.shape[0] != len(docs):
            raise RuntimeError(f"reranker returned {scores.shape[0]} scores for {len(docs)} documents")
        for (i, f, j), s in zip(slots, scores):
            hit = getattr(unions[i], f)[j]
            hit.score = float(s)
            hit.scores["rerank"] = float(s)
        for ctx in unions:
            for f in FIELDS:
                lst = getattr(ctx, f)
                n = len(lst) if self.pair_budget(f) is None else min(len(lst), self.pair_budget(f) or 0)
                order = sorted(range(n), key=lambda j: (-lst[j].score, j))  # the scored head; the rest keeps order
                setattr(ctx, f, [lst[j] for j in order] + lst[n:])
