from __future__ import annotations

import pytest

from mnemis.eval.answer import AnswerRecord, answer_questions
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.scripted import Refused
from mnemis.prompts.answer import ANSWER, NOT_MENTIONED
from tests.helpers.eval import make_question, scripted_llm


def test_one_generate_for_all_questions():
    llm, backend = scripted_llm(lambda req: "In Paris.")
    qs = [make_question(i) for i in range(5)]
    out = answer_questions(llm, qs, [f"ctx {i}" for i in range(5)], max_tokens=64)
    assert len(backend.batches) == 1 and len(backend.batches[0]) == 5
    assert [a.question_id for a in out] == [q.id for q in qs]
    assert all(a.ok and a.answer == "In Paris." for a in out)
    req = backend.batches[0][2]
    assert req.stage == "answer" and req.sampling.max_tokens == 64 and req.schema_ is None
    body = req.messages[-1]["content"]
    assert "ctx 2" in body and "2023/05/08 (Mon) 13:56" in body and qs[2].question in body


def test_item_failures_are_recorded_not_raised():
    def responder(req):
        body = req.messages[-1]["content"]
        if "ctx 1" in body:
            return Refused("prompt longer than the context")
        if "ctx 2" in body:
            return "   "
        return "Paris"

    llm, _ = scripted_llm(responder)
    out = answer_questions(llm, [make_question(i) for i in range(3)], ["ctx 0", "ctx 1", "ctx 2"])
    assert out[0].ok and not out[1].ok and "request refused: prompt longer" in out[1].error
    assert out[2].error == "empty answer"


def test_crashing_generate_fails_every_item():
    class Broken:
        def generate(self, requests):
            raise RuntimeError("boom")

    out = answer_questions(Broken(), [make_question(0), make_question(1)], ["a", "b"])
    assert all(isinstance(a, AnswerRecord) and not a.ok and "boom" in a.error for a in out)


def test_an_engine_failure_stops_the_stage_and_records_nothing(tmp_path):
    class Dead:
        chunk_size = 1

        def __init__(self):
            self.calls = 0

        def generate(self, requests):
            self.calls += 1
            if self.calls > 1:
                raise EngineFailure("stage 'answer': the engine gave no reply", stage="answer", items=1)
            return scripted_llm(lambda r: "Paris")[0].generate(requests)

    qs, log = [make_question(i) for i in range(3)], tmp_path / "answers.jsonl"
    with pytest.raises(EngineFailure):
        answer_questions(Dead(), qs, ["a", "b", "c"], progress=log)
    assert len(log.read_text().splitlines()) == 1  # the first chunk only; the rerun asks the other two
    llm, backend = scripted_llm(lambda r: "Rome")
    out = answer_questions(llm, qs, ["a", "b", "c"], progress=log)
    assert [a.answer for a in out] == ["Paris", "Rome", "Rome"] and len(backend.requests) == 2


def test_prompt_rules_and_mismatch():
    msgs = ANSWER.render("[2023/05/08 (Mon) 13:56] Ann: hi", "Who said hi?", None)
    text = " ".join(m["content"] for m in msgs)
    assert "only" in text and "timestamp" in text and NOT_MENTIONED in text and "asked on unknown" in text
    llm, _ = scripted_llm(lambda r: "x")
    try:
        answer_questions(llm, [make_question(0)], [])
    except ValueError:
        pass
    else:
        raise AssertionError("length mismatch must raise")
    assert answer_questions(llm, [], []) == []
