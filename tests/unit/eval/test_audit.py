from __future__ import annotations

import pytest

from mnemis.eval.audit import (
    ANSWER_ERRORS,
    AuditResult,
    apply_audit,
    audit_id,
    audited_labels,
    default_audit_path,
    load_audit,
)
from tests.helpers.eval import make_question, scripted_llm, verdict


@pytest.fixture(scope="module")
def audit(require_data):
    return load_audit(require_data(default_audit_path(), "LoCoMo answer audit"))


def test_audit_replaces_exactly_the_audited_questions(locomo, audit):
    res = apply_audit(locomo.questions, audit)
    assert res.skipped == []  # every audit entry matches its question text
    expected_answers = {e["question_id"] for e in audit if e["error_type"] in ANSWER_ERRORS}
    assert len(expected_answers) == 99 and len(res.answer_changed) == 99
    ids = {q.id: audit_id(q) for q in locomo.questions}
    assert {ids[q] for q in res.answer_changed} == expected_answers
    assert {ids[q] for q in res.evidence_changed} == {e["question_id"] for e in audit if e["correct_evidence"]}
    by_id = {e["question_id"]: e for e in audit}
    for old, new in zip(locomo.questions, res.questions):
        aid = ids[old.id]
        if aid not in by_id:
            assert new is old
            continue
        e = by_id[aid]
        if e["error_type"] in ANSWER_ERRORS:
            assert new.answer == str(e["correct_answer"])
        else:
            assert new.answer == old.answer  # WRONG_CITATION keeps the gold answer
        assert new.question == old.question and new.category == old.category
    first = next(q for q in res.questions if ids[q.id] == "locomo_0_qa1")
    assert first.evidence == ["conv-26:D1:14"] and first.answer == "2022"


def test_audit_id_and_text_mismatch_is_skipped():
    q = make_question(1, group="conv-26")
    assert audit_id(q) == "locomo_0_qa1" and audit_id(make_question(1, group="other")) is None
    entry = {"question_id": "locomo_0_qa1", "question": "Something else?", "error_type": "HALLUCINATION",
             "correct_answer": "x", "correct_evidence": ["D1:2"]}
    res = apply_audit([q], [entry])
    assert res.skipped == ["locomo_0_qa1"] and res.questions[0] is q and not res.answer_changed
    ok = dict(entry, question=q.question, correct_evidence=["D1:2; D3:4", "D:9:9"])
    res = apply_audit([q], [ok], known_episodes={"conv-26:D1:2", "conv-26:D3:4"})
    assert res.questions[0].answer == "x" and res.questions[0].evidence == ["conv-26:D1:2", "conv-26:D3:4"]


def test_audited_labels_rejudge_only_changed_questions():
    qs = [make_question(i, group="conv-26") for i in range(4)]
    corrected = [qs[0], qs[1].model_copy(update={"answer": "Berlin"}), qs[2], qs[3].model_copy(update={"answer": "Oslo"})]
    res = AuditResult(questions=corrected, answer_changed={qs[1].id, qs[3].id})
    llm, backend = scripted_llm(lambda r: verdict("CORRECT"))
    raw = {"j": [False, False, None, True]}
    out = audited_labels({"j": llm}, qs, ["a", "b", "c", "d"], raw, res)
    assert out == {"j": [False, True, None, True]}
    assert len(backend.batches) == 1 and len(backend.batches[0]) == 2
    assert "Gold answer: Berlin" in backend.batches[0][0].messages[-1]["content"]
