"""Paired comparison: exact McNemar against hand counts, the paired difference and its bootstrap CI."""

from __future__ import annotations

import math

import pytest

from mnemis.eval.paired import compare_rows, mcnemar_exact, paired_difference, paired_labels


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 0, 1.0), (5, 5, 1.0), (1, 0, 1.0),
    (6, 0, 2 / 2 ** 6),                                   # 0.03125
    (10, 2, 2 * (1 + 12 + 66) / 2 ** 12),                 # 0.0386
    (2, 10, 2 * (1 + 12 + 66) / 2 ** 12),
])
def test_mcnemar_exact_by_hand(b, c, p):
    assert math.isclose(mcnemar_exact(b, c), p)


def test_paired_difference_and_ci():
    r = paired_difference([1, 1, 1, 0], [0, 0, 1, 0], n_boot=2000, seed=1)
    assert r["n"] == 4 and r["difference"] == 0.5 and (r["a"], r["b"]) == (0.75, 0.25)
    assert r["ci"][0] <= 0.5 <= r["ci"][1] and r["ci"][0] >= 0.0
    assert paired_difference([1, 0], [1, 0])["ci"] == [0.0, 0.0]
    with pytest.raises(ValueError, match="length"):
        paired_difference([1], [1, 0])


def test_labels_pair_by_question_and_count_missing():
    a = {"q1": True, "q2": True, "q3": False, "q4": None}
    b = {"q1": False, "q2": True, "q3": False, "q4": True, "q5": True}
    r = paired_labels(a, b, n_boot=500)
    assert (r["n"], r["a_only_correct"], r["b_only_correct"], r["missing_labels"]) == (3, 1, 0, 1)
    assert r["mcnemar_p"] == 1.0 and math.isclose(r["difference"], 1 / 3)


def test_compare_rows_per_judge_category_and_f1():
    def row(m, q, cat, ok, f1):
        return {"method": m, "question_id": q, "category": cat, "labels": {"strict": ok}, "answer_scores": {"f1": f1}}

    rows = [row("mnemis", "q1", "temporal", True, 1.0), row("rag", "q1", "temporal", False, 0.0),
            row("mnemis", "q2", "single-hop", True, 0.5), row("rag", "q2", "single-hop", True, 0.5),
            row("full_context", "q1", "temporal", True, 1.0)]
    out = compare_rows(rows, "mnemis", "rag", judges=["strict"], n_boot=200)
    assert out["questions"] == 2 and out["strict"]["overall"]["difference"] == 0.5
    assert out["strict"]["by_category"]["temporal"]["a_only_correct"] == 1
    assert out["token_f1"]["difference"] == 0.5
