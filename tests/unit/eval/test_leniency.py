from __future__ import annotations

from mnemis.eval.leniency import (
    acceptance_rates,
    default_stress_path,
    judge_leniency,
    sample_items,
    stress_question,
)
from tests.helpers.eval import scripted_llm, verdict

ITEMS = [{"question_id": f"locomo_{i % 3}_qa{i}", "question": f"When did {i} happen?", "golden_answer": "7 May 2023",
          "category": 2, "wrong_specific": "12 April 2023", "wrong_vague": "Sometime in spring"} for i in range(10)]


def test_accept_all_judge_is_fully_lenient():
    llm, backend = scripted_llm(lambda r: verdict("CORRECT"))
    out = judge_leniency({"yes": llm}, items=ITEMS, n=4, seed=0)
    assert out["n_questions"] == 4
    for kind in ("wrong_specific", "wrong_vague"):
        assert out["judges"]["yes"][kind]["rate"] == 1.0 and out["judges"]["yes"][kind]["judged"] == 4
    assert len(backend.batches) == 1 and len(backend.batches[0]) == 8


def test_strict_and_broken_judges():
    strict, _ = scripted_llm(lambda r: verdict("WRONG" if "12 April" in r.messages[-1]["content"] else "CORRECT"))
    broken, _ = scripted_llm(lambda r: "no idea")
    out = judge_leniency({"strict": strict, "broken": broken}, items=ITEMS)["judges"]
    assert out["strict"]["wrong_specific"]["rate"] == 0.0 and out["strict"]["wrong_vague"]["rate"] == 1.0
    assert out["broken"]["wrong_vague"] == {"accepted": 0, "judged": 0, "failures": 10, "rate": None,
                                           "reference_rate": 0.628}


def test_sampling_and_question_mapping():
    a, b = sample_items(ITEMS, 3, seed=1), sample_items(ITEMS, 3, seed=1)
    assert a == b and len(a) == 3 and sample_items(ITEMS, None) == ITEMS
    q = stress_question(ITEMS[4])
    assert q.group_id == "locomo_1" and q.index == 4 and q.category == "temporal" and q.answer == "7 May 2023"
    rates = acceptance_rates([True, None, False, True], ["wrong_specific", "wrong_specific", "wrong_vague", "wrong_vague"])
    assert rates["wrong_specific"]["rate"] == 1.0 and rates["wrong_specific"]["failures"] == 1
    assert rates["wrong_vague"]["rate"] == 0.5


def test_real_stress_file_sample(require_data):
    require_data(default_stress_path(), "judge stress answers")
    llm, backend = scripted_llm(lambda r: verdict("CORRECT"))
    out = judge_leniency({"yes": llm}, n=3, seed=0)
    assert out["judges"]["yes"]["wrong_specific"]["judged"] == 3 and len(backend.batches[0]) == 6
