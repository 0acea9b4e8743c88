"""Evidence recall@k and MRR of ranked episode lists against gold evidence ids (pure functions).

Definitions (per question with at least one gold evidence id; questions without evidence are skipped
and counted in ``skipped``):

- ``recall@k`` = |gold ∩ top-k| / |gold| (partial credit for multi-evidence questions);
- ``hit@k`` = 1 if any gold id is in the top k;
- ``mrr`` = 1 / rank of the first gold id in the whole ranked list (0 when absent).

Aggregates are means over questions, per category and ``overall``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DEFAULT_KS = (5, 10, 20)


def question_scores(ranked: Sequence[str], gold: Sequence[str], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Recall@k, hit@k and reciprocal rank of one ranked list; ``gold`` must be non-empty."""
    wanted = set(gold)
    if not wanted:
        raise ValueError("gold evidence is empty")
    out: dict[str, float] = {}
    for k in ks:
        top = set(ranked[:k])
        out[f"recall@{k}"] = len(wanted & top) / len(wanted)
        out[f"hit@{k}"] = float(bool(wanted & top))
    first = next((r for r, i in enumerate(ranked, start=1) if i in wanted), None)
    out["mrr"] = 1.0 / first if first else 0.0
    return out


def evidence_recall(
    ranked: Sequence[Sequence[str]],
    gold: Sequence[Sequence[str]],
    categories: Sequence[str] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, dict[str, float]]:
    """Mean metrics per category and ``overall``.

    Args:
        ranked: per question, retrieved episode ids best first.
        gold: per question, gold evidence episode ids.
        categories: per question, its category (all ``"all"`` when omitted).
        ks: cut-offs.

    Returns:
        ``{category: {"recall@5": …, "hit@5": …, "mrr": …, "n": count, "skipped": no-evidence count}}``
        with an ``overall`` entry.
    """
    if len(ranked) != len(gold):
        raise ValueError(f"{len(ranked)} ranked lists for {len(gold)} gold lists")
    cats = list(categories) if categories is not None else ["all"] * len(gold)
    if len(cats) != len(gold):
        raise ValueError(f"{len(cats)} categories for {len(gold)} questions")
    sums: dict[str, dict[str, float]] = {}
    for r, g, c in zip(ranked, gold, cats):
        for key in (c, "overall"):
            acc = sums.setdefault(key, {"n": 0.0, "skipped": 0.0})
            if not g:
                acc["skipped"] += 1
                continue
            acc["n"] += 1
            for m, v in question_scores(r, g, ks).items():
                acc[m] = acc.get(m, 0.0) + v
    return {key: _means(acc) for key, acc in sorted(sums.items(), key=lambda kv: (kv[0] == "overall", kv[0]))}


def _means(acc: Mapping[str, float]) -> dict[str, float]:
    n = acc["n"]
    out = {m: (v / n if n else 0.0) for m, v in acc.items() if m not in ("n", "skipped")}
    out["n"], out["skipped"] = int(n), int(acc["skipped"])
    return out
