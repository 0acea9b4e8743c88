"""Reciprocal rank fusion (RRF) of ranked lists.

``fused(x) = Σ_l w_l / (k_rrf + rank_l(x))`` with 1-based ranks, over the lists that contain ``x``.

The function's default ``k_rrf = 60`` is the usual constant (Cormack et al. 2009). Graphiti, and so the
reference method (the paper's System-1, as its released code), uses ``1 / rank``, i.e. ``k_rrf = 0``. System-1 uses its own
default, ``k_rrf = 10`` (:data:`mnemis.retrieve.system1.DEFAULT_RRF_K`), chosen out of sample by 2-fold
cross-validation over LoCoMo conversations (``experiments/bench/system1_cv.py``; figures: docs/results.md's
System-1 recall table and ``experiments/results/system1_cv.json``). Small k lets the top of each list dominate; k = 0 over-rewards
rank 1 of one list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_K_RRF = 60.0


@dataclass
class Fused:
    """Fused ranking: ``ids`` best first, their fused ``scores``, and per id the raw score it got in
    each input list (``parts[i][list_name]``), absent for lists that did not return it."""

    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    parts: list[dict[str, float]] = field(default_factory=list)


def rrf(
    lists: Mapping[str, tuple[Sequence[str], Sequence[float]]],
    *,
    k_rrf: float = DEFAULT_K_RRF,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> Fused:
    """Fuse named ranked lists.

    Args:
        lists: ``name -> (ids best first, their scores)``; each list's ids must be unique.
        k_rrf: RRF constant (``0`` = Graphiti's ``1/rank``).
        weights: optional per-list weight (default 1 for every list).
        limit: keep only the best ``limit`` fused items.

    Returns:
        :class:`Fused`. Ties in the fused score are broken by the best rank in any list, then by the
        order of the lists and positions (deterministic).
    """
    if k_rrf < 0:
        raise ValueError(f"k_rrf must be >= 0, got {k_rrf}")
    weights = dict(weights or {})
    unknown = set(weights) - set(lists)
    if unknown:
        raise ValueError(f"weights given for unknown lists {sorted(unknown)}")
    fused: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    parts: dict[str, dict[str, float]] = {}
    for name, (ids, scores) in lists.items():
        if len(ids) != len(scores):
            raise ValueError(f"list {name!r}: {len(ids)} ids but {len(scores)} scores")
        if len(set(ids)) != len(ids):
            raise ValueError(f"list {name!r} repeats ids")
        w = float(weights.get(name, 1.0))
        for rank, (item, score) in enumerate(zip(ids, scores), start=1):
            fused[item] = fused.get(item, 0.0) + w / (k_rrf + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
            parts.setdefault(item, {})[name] = float(score)
    order = sorted(fused, key=lambda i: (-fused[i], best_rank[i]))  # stable: first-seen order last
    if limit is not None:
        order = order[: max(0, limit)]
    return Fused(ids=order, scores=[fused[i] for i in order], parts=[parts[i] for i in order])
