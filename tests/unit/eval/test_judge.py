from __future__ import annotations

import pytest

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.judge import judge_agreement, judge_answers, judge_messages
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.scripted import Refused
from tests.helpers.eval import make_question, scripted_llm, verdict


def test_one_batch_per_judge_and_labels():
    strict, b1 = scripted_llm(lambda r: verdict("CORRECT" if "Paris" in r.messages[-1]["content"].split(
        "Generated answer:")[-1] else "WRONG"))
    lenient, b2 = scripted_llm(lambda r: verdict("CORRECT"))
    qs = [make_question(i) for i in range(4)]
    answers = ["Paris", "Rome", AnswerRecord(question_id="x", group_id="g0", answer="Paris, France"), "Lyon"]
    labels = judge_answers({"strict": strict, "lenient": lenient}, qs, answers)
    assert labels == {"strict": [True, False, True, False], "lenient": [True] * 4}
    assert len(b1.batches) == 1 and len(b1.batches[0]) == 4 and len(b2.batches) == 1
    assert b1.batches[0][0].stage == "judge:strict"


def test_bad_replies_are_counted_failures_not_crashes():
    replies = iter(["not json at all", verdict("CORRECT"), '{"label": "MAYBE", "reasoning": ""}',
                    Refused("prompt longer than the context")])
    llm, backend = scripted_llm(lambda r: next(replies))
    labels = judge_answers({"j": llm}, [make_question(i) for i in range(4)], ["a", "b", "c", "d"])["j"]
    assert labels == [None, True, None, None]
    assert llm.ledger.stage("judge:j").failures == 3


def test_a_dead_judge_stops_and_records_no_verdict(tmp_path):
    dead, _ = scripted_llm(lambda r: RuntimeError("connection refused"), engine_retries=0)
    with pytest.raises(EngineFailure, match="judge:j.*connection refused"):
        judge_answers({"j": dead}, [make_question(0)], ["Paris"], progress=tmp_path / "judge.jsonl")
    assert not (tmp_path / "judge.j.jsonl").exists() or not (tmp_path / "judge.j.jsonl").read_text().strip()


def test_failed_or_empty_answers_are_wrong_without_a_call():
    llm, backend = scripted_llm(lambda r: verdict("CORRECT"))
    answers = [AnswerRecord(question_id="a", group_id="g0", answer="Paris", error="length"), "", None]
    labels = judge_answers({"j": llm}, [make_question(i) for i in range(3)], answers)["j"]
    assert labels == [False, False, False] and backend.batches == []


def test_prompt_selection_by_category():
    adv = " ".join(m["content"] for m in judge_messages(make_question(0, category="adversarial",
                                                                     answer="self-care"), "Not mentioned."))
    assert "Gold answer" not in adv and "declines" in adv and "self-care" in adv
    normal = " ".join(m["content"] for m in judge_messages(make_question(0), "Paris"))
    assert "Gold answer: Paris" in normal and "date" in normal.lower()
    tr = " ".join(m["content"] for m in judge_messages(make_question(0, category="temporal-reasoning"), "x"))
    assert "off by one" in tr
    ku = " ".join(m["content"] for m in judge_messages(make_question(0, category="knowledge-update"), "x"))
    assert "updated" in ku
    pref = " ".join(m["content"] for m in judge_messages(make_question(0, category="single-session-preference"), "x"))
    assert "Rubric:" in pref
    abst = " ".join(m["content"] for m in judge_messages(
        make_question(0, category="multi-session", abstention=True), "x"))
    assert "cannot be answered" in abst
    assert judge_messages(make_question(0), "x", gold="Berlin")[-1]["content"].count("Gold answer: Berlin") == 1


def test_agreement_and_kappa_on_known_vectors():
    labels = {"a": [True, True, False, False, None], "b": [True, False, False, False, True]}
    ag = judge_agreement(labels)["a|b"]
    assert ag["n"] == 4 and ag["agreement"] == pytest.approx(0.75) and ag["kappa"] == pytest.approx(0.5)
    perfect = judge_agreement({"x": [True, False, True], "y": [True, False, True], "z": [False, True, False]})
    assert perfect["x|y"]["kappa"] == pytest.approx(1.0) and perfect["x|z"]["kappa"] == pytest.approx(-0.8)
    assert perfect["x|z"]["agreement"] == 0.0
    const = judge_agreement({"p": [True, True], "q": [True, True]})["p|q"]
    assert const["agreement"] == 1.0 and const["kappa"] is None
    assert judge_agreement({"p": [None], "q": [True]})["p|q"] == {"n": 0, "agreement": None, "kappa": None}
