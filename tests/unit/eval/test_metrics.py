from __future__ import annotations

import numpy as np
import pytest

from mnemis.eval.metrics import accuracy_table, bootstrap_ci, compute_metrics, mean_std, metrics_by_method
from mnemis.eval.records import QuestionRecord


def rec(i, cat, ok, group="g0", judge="j", seed=0, method="m", audited=None):
    return QuestionRecord(method=method, seed=seed, question_id=f"{group}:q{i}", group_id=group, category=cat,
                          question="q", gold="a", answer="a", labels={judge: ok},
                          audited_labels={} if audited is None else {judge: audited})


def test_accuracy_per_category_and_overall_excludes_adversarial():
    rs = ([rec(i, "single-hop", i < 3) for i in range(4)] + [rec(10 + i, "temporal", i == 0) for i in range(2)]
          + [rec(20 + i, "adversarial", True) for i in range(5)])
    t = accuracy_table(rs, "j", ci=False)
    assert t["by_category"]["single-hop"] == {"correct": 3, "total": 4, "accuracy": 0.75}
    assert t["by_category"]["temporal"]["accuracy"] == 0.5
    assert t["overall"] == {"correct": 4, "total": 6, "accuracy": pytest.approx(4 / 6)}
    assert "adversarial" not in t["by_category"] and t["separate"]["adversarial"]["accuracy"] == 1.0
    lme = accuracy_table(rs, "j", separate=(), ci=False)  # LongMemEval: everything in the overall
    assert lme["overall"]["total"] == 11 and lme["separate"] == {}


def test_failure_policy():
    rs = [rec(0, "single-hop", True), rec(1, "single-hop", None), rec(2, "single-hop", False)]
    wrong = accuracy_table(rs, "j", ci=False)
    skip = accuracy_table(rs, "j", ci=False, failed="skip")
    assert wrong["overall"]["accuracy"] == pytest.approx(1 / 3) and wrong["judge_failures"] == 1
    assert skip["overall"]["accuracy"] == 0.5 and skip["overall"]["total"] == 2 and skip["judge_failures"] == 1
    with pytest.raises(ValueError):
        accuracy_table(rs, "j", failed="drop")


def _groups(n_groups, per_group=10):
    groups, scores = [], []
    for g in range(n_groups):
        rate = 0.3 if g % 2 else 0.8
        for i in range(per_group):
            groups.append(f"g{g}")
            scores.append(1.0 if i < rate * per_group else 0.0)
    return groups, scores


def test_bootstrap_ci_contains_mean_shrinks_and_is_seeded():
    g4, s4 = _groups(4)
    g40, s40 = _groups(40)
    mean = sum(s4) / len(s4)
    lo, hi, unit = bootstrap_ci(g4, s4, n_boot=2000, seed=1)
    assert unit == "group" and lo <= mean <= hi and lo < hi
    lo2, hi2, _ = bootstrap_ci(g40, s40, n_boot=2000, seed=1)
    assert lo2 <= sum(s40) / len(s40) <= hi2
    assert (hi2 - lo2) < (hi - lo)
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 30, size=25)
    gv = [f"g{i}" for i, n in enumerate(sizes) for _ in range(n)]
    sv = list(rng.integers(0, 2, size=len(gv)).astype(float))
    assert bootstrap_ci(gv, sv, n_boot=300, seed=7) == bootstrap_ci(gv, sv, n_boot=300, seed=7)
    assert bootstrap_ci(gv, sv, n_boot=300, seed=7) != bootstrap_ci(gv, sv, n_boot=300, seed=8)
    # one group: questions are resampled instead
    assert bootstrap_ci(["g"] * 10, [1.0, 0.0] * 5, seed=0)[2] == "question"
    assert bootstrap_ci([], [])[:2] == (None, None)


def test_group_resampling_differs_from_question_resampling():
    # two groups, all-correct and all-wrong: group resampling gives a much wider CI
    groups = ["a"] * 50 + ["b"] * 50
    scores = [1.0] * 50 + [0.0] * 50
    lo, hi, _ = bootstrap_ci(groups, scores, n_boot=2000, seed=0)
    assert lo == 0.0 and hi == 1.0


def test_seed_mean_std_and_audited_and_methods():
    rs = []
    for seed, correct in [(0, 2), (1, 3), (2, 4)]:
        rs += [rec(i, "single-hop", i < correct, group=f"g{i % 2}", seed=seed, audited=True) for i in range(4)]
    m = compute_metrics(rs, n_boot=200)
    s = m["judges"]["j"]["seed_summary"]
    assert s["seeds"] == [0, 1, 2] and s["overall"]["mean"] == pytest.approx(0.75)
    assert s["overall"]["std"] == pytest.approx(0.25)
    assert m["judges"]["j"]["audited"]["overall"]["accuracy"] == 1.0
    assert m["judges"]["j"]["raw"]["overall"]["accuracy"] == pytest.approx(0.75)
    assert m["n_questions"] == 4 and m["n_records"] == 12 and m["agreement"] == {}
    assert mean_std([0.5]) == {"mean": 0.5, "std": 0.0, "n": 1, "values": [0.5]}
    both = metrics_by_method([rec(0, "single-hop", True, method="rag"), rec(0, "single-hop", False, method="full")])
    assert list(both) == ["rag", "full"] and both["full"]["judges"]["j"]["raw"]["overall"]["accuracy"] == 0.0


def test_two_judges_agreement_in_metrics():
    rs = [QuestionRecord(question_id=f"q{i}", group_id="g", category="temporal", question="q", gold="a",
                         labels={"a": i % 2 == 0, "b": True}) for i in range(4)]
    m = compute_metrics(rs, n_boot=100)
    assert set(m["judges"]) == {"a", "b"} and m["agreement"]["a|b"]["agreement"] == 0.5
