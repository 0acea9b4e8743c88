"""Evidence recall@k / hit@k / MRR arithmetic."""

from __future__ import annotations

import pytest

from mnemis.eval.recall import evidence_recall, question_scores


def test_question_scores():
    s = question_scores(["x", "a", "y", "b"], ["a", "b", "c"], ks=(1, 2, 4))
    assert s["recall@1"] == 0 and s["recall@2"] == pytest.approx(1 / 3) and s["recall@4"] == pytest.approx(2 / 3)
    assert s["hit@1"] == 0 and s["hit@2"] == 1 and s["mrr"] == 0.5
    assert question_scores(["x"], ["a"])["mrr"] == 0
    with pytest.raises(ValueError):
        question_scores(["x"], [])


def test_evidence_recall_per_category():
    out = evidence_recall([["a"], ["b", "c"], ["z"]], [["a"], ["c"], []], ["single-hop", "temporal", "temporal"], ks=(1,))
    assert out["single-hop"]["recall@1"] == 1 and out["single-hop"]["n"] == 1
    assert out["temporal"]["recall@1"] == 0 and out["temporal"]["mrr"] == 0.5 and out["temporal"]["skipped"] == 1
    assert out["overall"]["recall@1"] == 0.5 and out["overall"]["n"] == 2
    assert list(out)[-1] == "overall"
    with pytest.raises(ValueError):
        evidence_recall([["a"]], [])
