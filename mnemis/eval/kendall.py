"""Kendall's tau-b, and BEAM's event-ordering score built on it (our implementation of the benchmark's rule).

``kendall_tau_b(x, y)``: (concordant - discordant) / sqrt((pairs not tied in x) * (pairs not tied in y)),
over all pairs; None when either side is constant (undefined; scipy returns nan).

``event_ordering_score(reference, aligned)``: BEAM compares the reference order of events with the reply's
lines after each line that an LLM judged to describe a reference item was replaced by that item
(``align``). Precision / recall / F1 count matched items (tp: distinct items in both, fp: reply lines that
match nothing, fn: reference items nothing matched). Every distinct item of either list gets a rank in each
list (its position, 1-based, the last one for a repeated line; one rank past the end for an item the list
lacks); tau-b of the two rank vectors, normalised to [0, 1] as (tau + 1) / 2 (0 when undefined), times F1
is the question's score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two equally long sequences (None when fewer than two items or either is constant)."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: lengths differ ({len(x)} vs {len(y)})")
    concordant = discordant = untied_x = untied_y = 0
    for i, j in combinations(range(len(x)), 2):
        sx, sy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
        untied_x += sx != 0
        untied_y += sy != 0
        if sx and sy:
            if sx == sy:
                concordant += 1
            else:
                discordant += 1
    if not untied_x or not untied_y:
        return None
    return (concordant - discordant) / math.sqrt(untied_x * untied_y)


def align(reference: Sequence[str], lines: Sequence[str], same: Callable[[int, int], bool | None]) -> list[str]:
    """Each reply line replaced by the first still-unused reference item it describes (``same(line_index,
    ref_index)``; None counts as no), else kept as it is: BEAM's greedy one-to-one alignment."""
    used: set[int] = set()
    out = []
    for i, line in enumerate(lines):
        match = next((j for j in range(len(reference)) if j not in used and same(i, j)), None)
        if match is None:
            out.append(line)
        else:
            used.add(match)
            out.append(reference[match])
    return out


def _ranks(seq: Sequence[str], union: Sequence[str]) -> list[int]:
    pos = {item: k + 1 for k, item in enumerate(seq)}
    missing = len(union) + 1
    return [pos.get(u, missing) for u in union]


def event_ordering_score(reference: Sequence[str], aligned: Sequence[str]) -> dict[str, Any]:
    """precision, recall, f1, tau_b (None when undefined), tau_norm and ``score`` = tau_norm * f1."""
    ref_set, sys_set = set(reference), set(aligned)
    tp = len(ref_set & sys_set)
    fp = sum(x not in ref_set for x in aligned)
    fn = sum(x not in sys_set for x in reference)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    union = list(dict.fromkeys([*reference, *aligned]))
    tau = kendall_tau_b(_ranks(reference, union), _ranks(aligned, union))
    tau_norm = (tau + 1) / 2 if tau is not None else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tau_b": tau, "tau_norm": tau_norm,
            "score": tau_norm * f1, "matched": tp}
