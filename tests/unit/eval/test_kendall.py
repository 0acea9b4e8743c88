"""Kendall's tau-b and BEAM's event-ordering score against values computed by hand."""

from __future__ import annotations

import math

import pytest

from mnemis.eval.kendall import align, event_ordering_score, kendall_tau_b


def test_tau_b_by_hand():
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # (1,2,3) vs (2,1,3): pairs (1,2) discordant, (1,3) and (2,3) concordant -> (2 - 1) / 3
    assert kendall_tau_b([1, 2, 3], [2, 1, 3]) == pytest.approx(1 / 3)
    # ties: x = (1,1,2), y = (1,2,3): pair (0,1) tied in x only; C = 2, D = 0; untied x = 2, untied y = 3
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(2 * 3))
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None and kendall_tau_b([1], [1]) is None
    with pytest.raises(ValueError, match="lengths differ"):
        kendall_tau_b([1, 2], [1])


def test_tau_b_agrees_with_scipy_where_it_is_installed():
    stats = pytest.importorskip("scipy.stats")
    import random

    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(2, 9)
        x, y = [rng.randint(1, 4) for _ in range(n)], [rng.randint(1, 4) for _ in range(n)]
        ours, theirs = kendall_tau_b(x, y), stats.kendalltau(x, y, variant="b").statistic
        assert (ours is None and math.isnan(theirs)) or ours == pytest.approx(theirs)


def test_align_is_greedy_and_one_to_one():
    ref = ["plan", "buy", "move"]
    lines = ["first I planned", "then I planned again", "moved the pots"]
    same = {(0, 0): True, (1, 0): True, (2, 2): True}
    out = align(ref, lines, lambda i, j: same.get((i, j), False))
    assert out == ["plan", "then I planned again", "move"]  # item 0 already used: line 1 keeps its text
    assert align(ref, lines, lambda i, j: None) == lines  # failed judgements count as no match


def test_event_ordering_score_by_hand():
    perfect = event_ordering_score(["a", "b", "c"], ["a", "b", "c"])
    assert perfect["f1"] == 1.0 and perfect["tau_norm"] == 1.0 and perfect["score"] == 1.0
    swapped = event_ordering_score(["a", "b", "c"], ["b", "a", "c"])
    assert swapped["f1"] == 1.0 and swapped["tau_b"] == pytest.approx(1 / 3)
    assert swapped["score"] == pytest.approx(2 / 3)  # (1/3 + 1) / 2 x 1
    # one wrong line: union a,b,c,x; ranks ref (1,2,3,5) vs reply (1,5,3,2): C = 3, D = 3 -> tau 0
    miss = event_ordering_score(["a", "b", "c"], ["a", "x", "c"])
    assert miss["precision"] == miss["recall"] == miss["f1"] == pytest.approx(2 / 3)
    assert miss["tau_b"] == 0.0 and miss["score"] == pytest.approx(0.5 * 2 / 3)
    # nothing matched: F1 0, so the score is 0 whatever tau says (BEAM's report would still show tau_norm)
    none = event_ordering_score(["a", "b", "c"], ["ok"])
    assert none["f1"] == 0.0 and none["score"] == 0.0
    assert none["tau_b"] == pytest.approx(-3 / math.sqrt(6 * 3)) and none["tau_norm"] > 0
    empty = event_ordering_score(["a", "b"], [])
    assert empty["tau_b"] is None and empty["tau_norm"] == 0.0 and empty["score"] == 0.0
