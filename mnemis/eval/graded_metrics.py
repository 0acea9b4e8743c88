"""Summaries of graded scores (``QuestionRecord.scores`` / ``score_details``) per category, for one judge.

Beside the headline (the mean score with its bootstrap CI, in ``metrics.accuracy_table``), per category:
the mean rubric score with the judge's 0.5 kept and floored, the event-ordering parts (tau_norm, F1,
precision, recall), the cognitive labels, and ``upstream``: the value BEAM's own report script gives an
ability (``src/evaluation/report_results.py``): per conversation the mean over its questions of the rubric
score read with ``int()`` (a 0.5 counts 0), or of tau_norm alone for event ordering (its report leaves out
the F1 factor), then the mean over conversations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemis.eval.records import QuestionRecord

PARTS = ("rubric_mean", "rubric_mean_floor", "tau_norm", "f1", "precision", "recall")


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def upstream_value(rec: QuestionRecord, judge: str) -> float | None:
    """The per-question value BEAM's report script averages (None when the judge gave no usable score)."""
    d = rec.score_details.get(judge) or {}
    if rec.scores.get(judge) is None:
        return None
    if rec.category == "event_ordering" and "tau_norm" in d:
        return d["tau_norm"]
    return d.get("rubric_mean_floor", rec.scores[judge])


def graded_summary(records: Sequence[QuestionRecord], judge: str) -> dict[str, Any]:
    """``{"by_category": {cat: {...}}, "upstream_overall": mean over categories of ``upstream``}``."""
    by_cat: dict[str, list[QuestionRecord]] = {}
    for r in records:
        if judge in r.scores:
            by_cat.setdefault(r.category, []).append(r)
    out: dict[str, Any] = {}
    for cat, recs in by_cat.items():
        cell: dict[str, Any] = {"n": len(recs), "failures": sum(r.scores[judge] is None for r in recs)}
        details = [r.score_details.get(judge) or {} for r in recs]
        for part in PARTS:
            vals = [d[part] for d in details if isinstance(d.get(part), (int, float))]
            if vals:
                cell[part] = _mean(vals)
        labels = [d["label"] for d in details if d.get("label")]
        if labels:
            cell["labels"] = {lab: labels.count(lab) for lab in sorted(set(labels))}
        per_group: dict[str, list[float]] = {}
        for r in recs:
            v = upstream_value(r, judge)
            if v is not None:
                per_group.setdefault(r.group_id, []).append(v)
        cell["upstream"] = _mean([_mean(v) for v in per_group.values()])  # type: ignore[misc]
        out[cat] = cell
    ups = [c["upstream"] for c in out.values() if c.get("upstream") is not None]
    return {"by_category": out, "upstream_overall": _mean(ups)}
