"""Token F1, BLEU-1 and LoCoMo F1 against hand-computed values; their per-category and per-seed tables."""

from __future__ import annotations

import math

import pytest

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.answer_scores import answer_scores, bleu1, bleu_tokens, locomo_f1, token_f1
from mnemis.eval.metrics import compute_metrics
from mnemis.eval.records import build_records
from tests.helpers.eval import make_question


@pytest.mark.parametrize("answer,gold,expected", [
    ("The dog, Max!", "Max the dog", 1.0),                 # same token set, punctuation dropped
    ("She went to Paris in May", "Paris", 2 / 7),          # p = 1/6, r = 1
    ("yes yes no", "no", 2 / 3),                           # sets: p = 1/2, r = 1
    ("She painted", "painting", 0.0),                      # no stemming in Mem0's F1
    ("", "Paris", 0.0),
])
def test_token_f1(answer, gold, expected):
    assert token_f1(answer, gold) == pytest.approx(expected)


@pytest.mark.parametrize("answer,gold,expected", [
    ("Paris", "Paris, France", math.exp(1 - 3)),           # p = 1, c = 1 < r = 3
    ("the the the", "the cat", 1 / 3),                     # clipped to 1 of 3, c > r: no penalty
    ("7 May 2023", "2023-05-07", 0.0),
    ("She moved in 2023-05-07.", "2023-05-07", 1 / 5),     # date kept whole, '.' is a token
    ("Paris France", "paris, france", math.exp(1 - 3 / 2)),  # p = 1, c = 2 < r = 3
])
def test_bleu1(answer, gold, expected):
    assert bleu1(answer, gold) == pytest.approx(expected)


def test_bleu_tokens():
    assert bleu_tokens("I don't know, it's 7:30.") == ["i", "do", "n't", "know", ",", "it", "'s", "7:30", "."]


@pytest.mark.parametrize("answer,gold,category,expected", [
    ("The painting of a sunset", "A sunset painting", "single-hop", 0.8),   # painting of sunset | sunset painting
    ("She painted", "painting", "temporal", 2 / 3),                          # Porter: painted = painting
    ("pottery, painting and camping", "painting, swimming", "multi-hop", 1 / 3),  # (2/3 + 0) / 2
    ("yes", "Likely yes; she likes nature", "open-domain", 2 / 3),           # gold cut at ';'
    ("This is not mentioned in the memories.", "Melanie's dog", "adversarial", 1.0),
    ("No information available", "x", "adversarial", 1.0),
    ("In May", "x", "adversarial", 0.0),
    ("Paris and the Louvre", "the Louvre, Paris", "single-hop", 1.0),        # and/the and commas removed
])
def test_locomo_f1(answer, gold, category, expected):
    assert locomo_f1(answer, gold, category) == pytest.approx(expected)


def test_empty_answer_scores_zero():
    assert answer_scores("", "Paris", "single-hop") == {"f1": 0.0, "bleu1": 0.0, "locomo_f1": 0.0}
    assert answer_scores("  ", "not mentioned", "adversarial")["locomo_f1"] == 0.0


def _recs(seed, answers, cats):
    qs = [make_question(i, category=c, answer="Paris") for i, c in enumerate(cats)]
    ans = [AnswerRecord(question_id=q.id, group_id=q.group_id, answer=a, error=None if a else "empty answer")
           for q, a in zip(qs, answers)]
    return build_records(qs, ans, {"j": [True] * len(qs)}, seed=seed)


def test_tables_per_category_and_over_seeds():
    cats = ["single-hop", "single-hop", "temporal", "adversarial"]
    recs = _recs(0, ["Paris", "Rome", "in Paris", "not mentioned"], cats)
    assert recs[2].answer_scores == pytest.approx({"f1": 2 / 3, "bleu1": 0.5, "locomo_f1": 2 / 3})
    m = compute_metrics(recs, n_boot=10)
    t = m["answer_scores"]
    assert t["by_category"]["single-hop"]["f1"] == pytest.approx(0.5) and t["by_category"]["single-hop"]["n"] == 2
    assert t["overall"]["f1"] == pytest.approx((1 + 0 + 2 / 3) / 3) and t["overall"]["n"] == 3  # no adversarial
    assert t["separate"]["adversarial"]["locomo_f1"] == 1.0 and "answer_scores_seeds" not in m
    two = recs + _recs(1, ["", "", "", ""], cats)  # seed 1: every answer failed
    s = compute_metrics(two, n_boot=10)["answer_scores_seeds"]
    overall_f1 = s["overall"]["f1"]
    assert s["seeds"] == [0, 1] and overall_f1["values"] == pytest.approx([(1 + 2 / 3) / 3, 0.0])
    assert overall_f1["mean"] == pytest.approx((1 + 2 / 3) / 6)
    assert overall_f1["std"] == pytest.approx((1 + 2 / 3) / 3 / math.sqrt(2))  # sample std of two values
    assert s["by_category"]["single-hop"]["f1"]["values"] == pytest.approx([0.5, 0.0])


def test_old_records_without_scores_are_scored():
    rec = _recs(0, ["Paris"], ["single-hop"])[0].model_copy(update={"answer_scores": {}})
    assert compute_metrics([rec], n_boot=10)["answer_scores"]["overall"]["f1"] == 1.0
