"""Why one method beat another on the questions where they disagree, read from ``questions.jsonl``.

A paired comparison says *how often* method ``a`` (e.g. Mnemis) and method ``b`` (e.g. RAG) disagree; this
says *why*, from each question's own record: for the questions only ``b`` answered right, was the evidence in
``a``'s answer context (``a`` saw it and still answered wrong: the answer step, or a context that buried it)
or not (``a``'s retrieval missed it), and was it in ``b``'s? Beside that: ``a``'s run flags on those questions
(System-2 fell back, picked nothing), how many episodes, entities and facts each method's answer saw, and how
long its replies were. The counts are per judge; the question ids come with them so each case can be opened
in the explorer.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

EVIDENCE_RECALL_KEY = "episodes_recall"   # share of a question's evidence episodes in the answer context
ID_KINDS = {"ent": "entities", "fact": "facts", "cat": "categories"}  # id prefixes (mnemis.types); else episode
EXAMPLES = 12                             # question ids kept per bucket


def item_kind(item_id: str) -> str:
    """``entities``, ``facts``, ``categories`` or ``episodes`` for an id in a context."""
    prefix, sep, _ = item_id.partition("_")
    return ID_KINDS.get(prefix, "episodes") if sep else "episodes"


def _first_rows(rows: Sequence[Mapping[str, Any]], method: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if r.get("method") == method:
            out.setdefault(str(r.get("question_id")), r)
    return out


def _evidence(row: Mapping[str, Any]) -> float | None:
    value = (row.get("recall") or {}).get(EVIDENCE_RECALL_KEY)
    return None if value is None else float(value)


def _why_wrong(lost: Mapping[str, Any], won: Mapping[str, Any]) -> str:
    """Where the losing method's answer stood on one question the other answered right."""
    lost_ev, won_ev = _evidence(lost), _evidence(won)
    if lost_ev is None:
        return "no_evidence_recall"        # no evidence labels, or the method keeps no context ids
    if lost_ev >= 1.0:
        return "saw_all_evidence"
    if lost_ev > 0.0:
        return "saw_some_evidence"
    return "missed_evidence_winner_saw_it" if (won_ev or 0.0) > 0.0 else "missed_evidence_winner_too"


def _context_sizes(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for r in rows.values():
        totals.update(item_kind(i) for i in (r.get("context_ids") or []))
    n = max(len(rows), 1)
    return {k: round(totals[k] / n, 2) for k in ("episodes", "entities", "facts", "categories") if totals[k]}


def _reply_chars(rows: Mapping[str, Mapping[str, Any]]) -> float | None:
    lengths = [len(str(r.get("reply") or r.get("answer") or "")) for r in rows.values()]
    return float(statistics.median(lengths)) if lengths else None


def disagreement(rows: Sequence[Mapping[str, Any]], a: str, b: str, *, judge: str) -> dict[str, Any]:
    """Agreement table of ``a`` against ``b`` under ``judge`` and, for each side's wins, why the other lost."""
    ra, rb = _first_rows(rows, a), _first_rows(rows, b)
    buckets: dict[str, list[str]] = {"both_correct": [], "both_wrong": [], "a_only": [], "b_only": []}
    missing = 0
    for q in sorted(set(ra) & set(rb)):
        la, lb = (ra[q].get("labels") or {}).get(judge), (rb[q].get("labels") or {}).get(judge)
        if la is None or lb is None:
            missing += 1
            continue
        key = "both_correct" if la and lb else "both_wrong" if not (la or lb) else "a_only" if la else "b_only"
        buckets[key].append(q)

    def why(lost: Mapping[str, Mapping[str, Any]], won: Mapping[str, Mapping[str, Any]],
            ids: list[str]) -> dict[str, Any]:
        reasons: dict[str, list[str]] = {}
        for q in ids:
            reasons.setdefault(_why_wrong(lost[q], won[q]), []).append(q)
        return {k: {"n": len(v), "question_ids": v[:EXAMPLES]} for k, v in sorted(reasons.items())}

    def flags(method_rows: Mapping[str, Mapping[str, Any]], ids: Sequence[str]) -> dict[str, int]:
        return dict(sorted(Counter(f for q in ids for f in (method_rows[q].get("flags") or [])).items()))

    return {
        "a": a, "b": b, "judge": judge, "missing_labels": missing,
        **{k: len(v) for k, v in buckets.items()},
        # the questions only b got right: why a lost them (a's evidence recall there, and b's)
        "why_a_lost": why(ra, rb, buckets["b_only"]),
        "why_b_lost": why(rb, ra, buckets["a_only"]),
        "a_flags": {"all": flags(ra, list(ra)), "b_only": flags(ra, buckets["b_only"])},
        "mean_context_items": {a: _context_sizes(ra), b: _context_sizes(rb)},
        "median_reply_chars": {a: _reply_chars(ra), b: _reply_chars(rb)},
    }


def disagreements(rows: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]], *,
                  judges: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`disagreement` for each pair whose both methods have rows, per judge: ``{"a_vs_b": {judge: ...}}``."""
    methods = {r.get("method") for r in rows}
    return {f"{a}_vs_{b}": {j: disagreement(rows, a, b, judge=j) for j in judges}
            for a, b in pairs if {a, b} <= methods}
