"""Accuracy per category and overall, bootstrap CIs by group, seed mean ± std: pure functions over records.

LoCoMo's headline covers categories 1-4; ``adversarial`` (category 5, correct = declining) is
reported separately. LongMemEval's overall covers every question. A judge failure (label None) counts
as WRONG by default (``failed="skip"`` leaves it out); failures are always counted. Beside the judges,
``answer_scores`` holds token F1 and BLEU-1 (``mnemis.eval.answer_scores``), which no judge decides,
with the same overall / per-category split.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mnemis.eval.answer_scores import SCORES, answer_scores, mean_scores
from mnemis.eval.records import QuestionRecord, as_record

SEPARATE = ("adversarial",)
CATEGORY_ORDER = (
    "multi-hop", "temporal", "open-domain", "single-hop", "adversarial",
    "single-session-user", "multi-session", "single-session-preference", "temporal-reasoning",
    "knowledge-update", "single-session-assistant",
)


def order_categories(cats: Iterable[str]) -> list[str]:
    """Paper order for known categories, then the rest alphabetically."""
    cats = set(cats)
    known = [c for c in CATEGORY_ORDER if c in cats]
    return known + sorted(cats - set(known))


def label_of(rec: QuestionRecord, judge: str, audited: bool = False) -> bool | None:
    """The record's label from ``judge`` (audited labels fall back to raw ones when absent)."""
    if audited and judge in rec.audited_labels:
        return rec.audited_labels[judge]
    return rec.labels.get(judge)


def score_of(rec: QuestionRecord, judge: str, audited: bool = False) -> float | None:
    """The record's score from ``judge``: its graded score in [0, 1] when it has one (BEAM, LoCoMo-Plus
    cognitive; ``mnemis.eval.graded``), else 1 / 0 from its label; None for a judge failure."""
    if judge in rec.scores:
        return rec.scores[judge]
    lab = label_of(rec, judge, audited)
    return None if lab is None else (1.0 if lab else 0.0)


def _scores(records: Sequence[QuestionRecord], judge: str, audited: bool, failed: str) -> tuple[list, list, int]:
    """(kept records, scores in [0, 1], failures) under the failure policy."""
    kept, scores, failures = [], [], 0
    for r in records:
        sc = score_of(r, judge, audited)
        if sc is None:
            failures += 1
            if failed == "skip":
                continue
        kept.append(r)
        scores.append(sc or 0.0)
    return kept, scores, failures


def unscored_counts(records: Sequence[QuestionRecord]) -> dict[str, int]:
    """Questions of a type no scorer knows (flag ``unscored``), per category: counted, never scored."""
    out: dict[str, int] = {}
    for r in records:
        if "unscored" in r.flags:
            out[r.category] = out.get(r.category, 0) + 1
    return out


def bootstrap_ci(
    groups: Sequence[str], scores: Sequence[float], *, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05
) -> tuple[float | None, float | None, str]:
    """Percentile CI of mean(scores), resampling whole groups with replacement (seeded).

    With fewer than two groups it resamples questions instead. Returns ``(lo, hi, unit)``.
    """
    if not scores:
        return None, None, "none"
    s = np.asarray(scores, dtype=np.float64)
    keys = sorted(set(groups))
    unit = "group"
    if len(keys) < 2:
        keys, groups, unit = list(range(len(s))), list(range(len(s))), "question"
    pos = {k: i for i, k in enumerate(keys)}
    gi = np.fromiter((pos[g] for g in groups), dtype=np.int64, count=len(s))
    correct = np.bincount(gi, weights=s, minlength=len(keys))
    count = np.bincount(gi, minlength=len(keys)).astype(np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(keys), size=(n_boot, len(keys)))
    acc = correct[idx].sum(1) / np.maximum(count[idx].sum(1), 1.0)
    lo, hi = np.quantile(acc, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi), unit


def _cell(recs: Sequence[QuestionRecord], scores: Sequence[float], *, ci: bool, n_boot: int, seed: int,
          alpha: float) -> dict[str, Any]:
    total = len(scores)
    cell: dict[str, Any] = {"correct": int(sum(scores)), "total": total,
                            "accuracy": (sum(scores) / total) if total else None}
    if ci:
        lo, hi, unit = bootstrap_ci([r.group_id for r in recs], scores, n_boot=n_boot, seed=seed, alpha=alpha)
        cell["ci"] = [lo, hi]
        cell["ci_unit"] = unit
    return cell


def accuracy_table(
    records: Iterable[QuestionRecord | Mapping[str, Any]],
    judge: str,
    *,
    audited: bool = False,
    separate: Sequence[str] = SEPARATE,
    failed: str = "wrong",
    ci: bool = True,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """``overall`` (categories not in ``separate``), ``by_category``, ``separate`` and ``judge_failures``."""
    if failed not in ("wrong", "skip"):
        raise ValueError("failed must be 'wrong' or 'skip'")
    recs = [r for r in map(as_record, records) if "unscored" not in r.flags]  # counted by unscored_counts
    kw = dict(ci=ci, n_boot=n_boot, seed=seed, alpha=alpha)
    head = [r for r in recs if r.category not in separate]
    kept, scores, failures = _scores(head, judge, audited, failed)
    table: dict[str, Any] = {"overall": _cell(kept, scores, **kw), "by_category": {}, "separate": {}}
    for cat in order_categories(r.category for r in recs):
        k, s, f = _scores([r for r in recs if r.category == cat], judge, audited, failed)
        target = table["separate"] if cat in separate else table["by_category"]
        target[cat] = _cell(k, s, **kw)
        if cat in separate:
            failures += f
    table["judge_failures"] = failures
    return table


def mean_std(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation (0 for one value) of the non-None values."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return {"mean": None, "std": None, "n": 0, "values": []}
    return {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "n": len(v),
            "values": v}


def seed_summary(records: Sequence[QuestionRecord], judge: str, *, audited: bool = False,
                 separate: Sequence[str] = SEPARATE, failed: str = "wrong") -> dict[str, Any]:
    """Repeated runs: overall and per-category accuracy per seed, as mean ± std."""
    seeds = sorted({r.seed for r in records})
    tables = [accuracy_table([r for r in records if r.seed == s], judge, audited=audited, separate=separate,
                             failed=failed, ci=False) for s in seeds]
    cats = order_categories({c for t in tables for c in (*t["by_category"], *t["separate"])})
    by_cat = {}
    for c in cats:
        vals = [(t["by_category"].get(c) or t["separate"].get(c) or {}).get("accuracy") for t in tables]
        by_cat[c] = mean_std(vals)
    return {"seeds": seeds, "overall": mean_std([t["overall"]["accuracy"] for t in tables]), "by_category": by_cat}


def scores_of(rec: QuestionRecord) -> dict[str, float]:
    """The record's answer scores (computed from its answer and gold when an older record lacks them)."""
    if all(k in rec.answer_scores for k in SCORES):
        return rec.answer_scores
    return answer_scores(rec.answer if rec.answer_error is None else "", rec.gold, rec.category)


def answer_score_table(records: Sequence[QuestionRecord], *, separate: Sequence[str] = SEPARATE) -> dict[str, Any]:
    """Mean F1 / BLEU-1 / LoCoMo F1: ``overall`` (categories not in ``separate``), ``by_category``, ``separate``."""
    table: dict[str, Any] = {"overall": mean_scores(scores_of(r) for r in records if r.category not in separate),
                             "by_category": {}, "separate": {}}
    for cat in order_categories(r.category for r in records):
        target = table["separate"] if cat in separate else table["by_category"]
        target[cat] = mean_scores(scores_of(r) for r in records if r.category == cat)
    return table


def answer_score_seeds(records: Sequence[QuestionRecord], *, separate: Sequence[str] = SEPARATE) -> dict[str, Any]:
    """Repeated runs: each answer score's overall and per-category means per seed, as mean ± std."""
    seeds = sorted({r.seed for r in records})
    tables = [answer_score_table([r for r in records if r.seed == s], separate=separate) for s in seeds]
    cats = order_categories({c for t in tables for c in (*t["by_category"], *t["separate"])})
    out: dict[str, Any] = {"seeds": seeds, "overall": {k: mean_std([t["overall"][k] for t in tables]) for k in SCORES},
                           "by_category": {}}
    for c in cats:
        cells = [t["by_category"].get(c) or t["separate"].get(c) or {} for t in tables]
        out["by_category"][c] = {k: mean_std([cell.get(k) for cell in cells]) for k in SCORES}
    return out


def judges_of(records: Sequence[QuestionRecord]) -> list[str]:
    names: list[str] = []
    for r in records:
        names += [j for j in r.labels if j not in names]
    return names


def compute_metrics(
    records: Iterable[QuestionRecord | Mapping[str, Any]],
    *,
    separate: Sequence[str] = SEPARATE,
    failed: str = "wrong",
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    headline: str | None = None,
) -> dict[str, Any]:
    """Metrics of ONE method: per judge a ``raw`` table (and ``audited`` when audited labels exist),
    seed mean ± std when several seeds are present, judge agreement, the answer scores, and
    ``headline_judge`` (``headline`` when it judged these records, else the first judge)."""
    from mnemis.eval.judge import judge_agreement

    recs = [as_record(r) for r in records]
    kw = dict(separate=separate, failed=failed, n_boot=n_boot, seed=seed, alpha=alpha)
    seeds = sorted({r.seed for r in recs})
    out: dict[str, Any] = {
        "n_questions": len({r.question_id for r in recs}),
        "n_records": len(recs),
        "n_groups": len({r.group_id for r in recs}),
        "seeds": seeds,
        "answer_failures": sum(r.answer_error is not None for r in recs),
        "headline_judge": None,
        "judges": {},
        "answer_scores": answer_score_table(recs, separate=separate),
    }
    if len(seeds) > 1:
        out["answer_scores_seeds"] = answer_score_seeds(recs, separate=separate)
    for judge in judges_of(recs):
        entry: dict[str, Any] = {"raw": accuracy_table(recs, judge, **kw)}
        if any(judge in r.audited_labels for r in recs):
            entry["audited"] = accuracy_table(recs, judge, audited=True, **kw)
            entry["audited"]["n_changed"] = len({r.question_id for r in recs if r.audited_gold is not None})
        if len(seeds) > 1:
            entry["seed_summary"] = seed_summary(recs, judge, separate=separate, failed=failed)
        out["judges"][judge] = entry
    names = judges_of(recs)
    out["headline_judge"] = headline if headline in names else (names[0] if names else None)
    labels = {j: [r.labels.get(j) for r in recs] for j in names}
    out["agreement"] = judge_agreement(labels) if len(labels) > 1 else {}
    unscored = unscored_counts(recs)
    if unscored:
        out["unscored"] = unscored
    if any(r.scores for r in recs):
        from mnemis.eval.graded_metrics import graded_summary

        for judge in names:
            out["judges"][judge]["graded"] = graded_summary(recs, judge)
    return out


def metrics_by_method(records: Iterable[QuestionRecord | Mapping[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """``compute_metrics`` for every method found in the records (the ``metrics.json`` layout)."""
    recs = [as_record(r) for r in records]
    methods: list[str] = []
    for r in recs:
        if r.method not in methods:
            methods.append(r.method)
    return {m: compute_metrics([r for r in recs if r.method == m], **kwargs) for m in methods}
