"""Paired comparison of two methods on the same questions: difference, bootstrap CI over questions, exact McNemar.

Two methods answered the same questions; per question each has a judge label (correct or not) or a score (token
F1). The paired difference is mean(a) - mean(b) over the questions both have; its confidence interval resamples
questions (the pairs stay together); for labels, the exact McNemar test counts the discordant pairs (a right and
b wrong, or the reverse) and asks how likely so lopsided a split is when each side is equally likely
(a two-sided binomial test with p = 1/2). Questions where either label is missing (a failed judge) are left out
and counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` pairs (a right, b wrong) against ``c`` (the reverse)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def paired_difference(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10000, seed: int = 0,
                      alpha: float = 0.05) -> dict[str, Any]:
    """mean(a) - mean(b) with a percentile bootstrap CI over the paired items."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {len(x)} vs {len(y)}")
    n = len(x)
    if n == 0:
        return {"n": 0, "a": None, "b": None, "difference": None, "ci": None}
    d = x - y
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return {"n": n, "a": float(x.mean()), "b": float(y.mean()), "difference": float(d.mean()),
            "ci": [float(lo), float(hi)]}


def paired_labels(a: Mapping[str, bool | None], b: Mapping[str, bool | None], **boot: Any) -> dict[str, Any]:
    """Paired accuracy difference and exact McNemar test of two methods' labels by question id."""
    common = [q for q in a if q in b]
    both = [q for q in common if a[q] is not None and b[q] is not None]
    xa = [float(bool(a[q])) for q in both]
    xb = [float(bool(b[q])) for q in both]
    only_a = sum(1 for q in both if a[q] and not b[q])
    only_b = sum(1 for q in both if b[q] and not a[q])
    return {**paired_difference(xa, xb, **boot), "a_only_correct": only_a, "b_only_correct": only_b,
            "mcnemar_p": mcnemar_exact(only_a, only_b), "missing_labels": len(common) - len(both)}


def paired_scores(a: Mapping[str, float], b: Mapping[str, float], **boot: Any) -> dict[str, Any]:
    """Paired difference of a per-question score (e.g. token F1) by question id."""
    both = [q for q in a if q in b]
    return paired_difference([a[q] for q in both], [b[q] for q in both], **boot)


def compare_rows(rows: Sequence[Mapping[str, Any]], a: str, b: str, *, judges: Sequence[str],
                 n_boot: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Method ``a`` against ``b`` over ``questions.jsonl`` rows: per judge (overall and per category) and for
    token F1. Rows of other methods are ignored; a method's row per question is its first seed's."""
    by: dict[str, dict[str, Mapping[str, Any]]] = {a: {}, b: {}}
    for r in rows:
        if r.get("method") in by:
            by[r["method"]].setdefault(r["question_id"], r)
    cats = sorted({r.get("category", "") for r in by[a].values()})
    out: dict[str, Any] = {"a": a, "b": b, "questions": len(set(by[a]) & set(by[b]))}
    for judge in judges:
        def labels(method: str, cat: str | None = None, judge: str = judge) -> dict[str, bool | None]:
            return {q: (r.get("labels") or {}).get(judge) for q, r in by[method].items()
                    if cat is None or r.get("category") == cat}

        out[judge] = {"overall": paired_labels(labels(a), labels(b), n_boot=n_boot, seed=seed),
                      "by_category": {c: paired_labels(labels(a, c), labels(b, c), n_boot=n_boot, seed=seed)
                                      for c in cats}}

    def f1(method: str) -> dict[str, float]:
        return {q: float((r.get("answer_scores") or {}).get("f1", 0.0)) for q, r in by[method].items()}

    out["token_f1"] = paired_scores(f1(a), f1(b), n_boot=n_boot, seed=seed)
    return out
