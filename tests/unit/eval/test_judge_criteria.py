"""LoCoMo judge criteria: generous (the literature's "same topic" grader) beside strict (ours), chosen
per judge, used for answers, audit and leniency alike."""

from __future__ import annotations

import pytest

from mnemis.eval.judge import Judge, judge_answers, judge_messages
from mnemis.eval.leniency import judge_leniency
from mnemis.prompts.judge_locomo import JUDGE_LOCOMO, JUDGE_LOCOMO_GENEROUS, LOCOMO_CRITERIA
from tests.helpers.eval import make_question, scripted_llm, verdict


def _user(msgs):
    return msgs[-1]["content"]


def test_generous_and_strict_wording():
    q = make_question(0, category="single-hop")
    gen, strict = _user(judge_messages(q, "x", criterion="generous")), _user(judge_messages(q, "x"))
    assert "touches on the same topic or fact" in gen and "same date or period" in gen
    assert "misses the point" not in gen
    assert "misses the point" in strict and "touches on the same topic" not in strict
    assert LOCOMO_CRITERIA == {"generous": JUDGE_LOCOMO_GENEROUS, "strict": JUDGE_LOCOMO}
    assert JUDGE_LOCOMO.key == "judge_locomo@v1"  # strict text unchanged: cached verdicts stay valid
    adv = make_question(1, category="adversarial")
    for crit in LOCOMO_CRITERIA:  # category 5 keeps its declining rule under both criteria
        assert "CORRECT only if it declines" in _user(judge_messages(adv, "x", criterion=crit))
    lme = make_question(2, category="multi-session")
    assert judge_messages(lme, "x", criterion="generous") == judge_messages(lme, "x", criterion="strict")


def test_each_judge_grades_with_its_criterion():
    def lenient_on_topic(req):  # a judge model that follows whichever rule it is shown
        return verdict("CORRECT" if "touches on the same topic" in _user(req.messages) else "WRONG")

    llm, backend = scripted_llm(lenient_on_topic)
    qs = [make_question(i) for i in range(3)]
    labels = judge_answers({"gen": Judge(llm, "generous"), "strict": Judge(llm, "strict"), "bare": llm},
                           qs, ["Paris"] * 3)
    assert labels == {"gen": [True] * 3, "strict": [False] * 3, "bare": [False] * 3}
    assert [b[0].stage for b in backend.batches] == ["judge:gen", "judge:strict", "judge:bare"]
    with pytest.raises(ValueError, match="criterion 'kind'"):
        Judge(llm, "kind")


def test_leniency_per_criterion():
    items = [{"question_id": f"locomo_0_qa{i}", "question": "When did it happen?", "golden_answer": "7 May 2023",
              "category": 2, "wrong_specific": "12 April 2023", "wrong_vague": "Sometime in spring"}
             for i in range(4)]

    def model(req):  # accepts vague answers only under the generous rule
        text = _user(req.messages)
        return verdict("CORRECT" if "spring" in text and "touches on the same topic" in text else "WRONG")

    llm, _ = scripted_llm(model)
    out = judge_leniency({"generous": Judge(llm, "generous"), "strict": Judge(llm, "strict")}, items=items)
    assert out["criteria"] == {"generous": "generous", "strict": "strict"}
    assert out["judges"]["generous"]["wrong_vague"]["rate"] == 1.0
    assert out["judges"]["strict"]["wrong_vague"]["rate"] == 0.0
    assert out["judges"]["generous"]["wrong_specific"]["reference_rate"] == 0.106


def test_long_reasoning_is_cut_not_a_failure():
    long = verdict("CORRECT").replace("compared with the gold answer", "because " * 120)
    llm, _ = scripted_llm(lambda r: long)
    assert judge_answers({"j": llm}, [make_question(0)], ["Paris"]) == {"j": [True]}
    from mnemis.prompts.judge_locomo import JudgeVerdict

    assert JudgeVerdict.model_json_schema()["properties"]["reasoning"]["maxLength"] == 400  # still steers decoding
    assert len(JudgeVerdict.model_validate_json(long).reasoning) == 400
