"""Answer + judge 4 LoCoMo questions with SmolLM2-135M through vLLM on CPU, then metrics and report.

Contexts come from the full-context baseline truncated to a small budget. Asserts the structure of
every output (one batched call per stage, labels parsed or counted as failures, files written), not
the quality of a 135M model's answers.
"""

from __future__ import annotations

import json
import time

import pytest

from mnemis.baselines.full_context import full_context
from mnemis.eval.answer import answer_questions
from mnemis.eval.judge import Judge, judge_answers
from mnemis.eval.leniency import judge_leniency
from mnemis.eval.metrics import metrics_by_method
from mnemis.eval.records import build_records, dump_json, write_records
from mnemis.eval.report import write_report
from mnemis.models.llm.client import LLM

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def backend(vllm_backend):
    """The session's shared SmolLM2 engine (tests/integration/conftest.py)."""
    return vllm_backend


def test_answer_and_judge_locomo_with_smollm2(backend, locomo, tmp_path):
    t0 = time.perf_counter()
    group = locomo.groups[0]
    pool = locomo.questions_of(group)
    questions = [next(q for q in pool if q.category == c) for c in ("multi-hop", "temporal", "open-domain", "single-hop")]
    # the 135M model pads replies to max_tokens: keep the small budgets (shrunk schemas), as the
    # quickstart does
    llm = LLM(backend, max_retries=1, reply_budget="fit")
    fc = full_context(locomo.episodes_of(group), questions, max_model_len=2048, reserve=1400, llm=llm)
    assert fc.n_truncated == 4 and 0 < fc.context_tokens[group] <= 648
    assert fc.contexts[0].splitlines()[-1].endswith(locomo.episodes_of(group)[-1].content.split(": ", 1)[1][-20:])

    answers = answer_questions(llm, questions, fc.contexts, max_tokens=48)
    assert [a.question_id for a in answers] == [q.id for q in questions]
    assert sum(a.error is not None for a in answers) <= 1  # schema-constrained: at most one of 4 fails
    assert llm.ledger.stage("answer").calls == 4 and llm.ledger.stage("answer").batches == 1

    labels = judge_answers({"smol": llm}, questions, answers, max_tokens=120)
    judge = llm.ledger.stage("judge:smol")
    assert len(labels["smol"]) == 4 and judge.calls == 4 and judge.batches == 1
    # every failed verdict is a None label and a counted ledger failure; at most half may fail
    assert labels["smol"].count(None) == judge.failures <= 2

    leniency = judge_leniency({"smol": llm, "smol_generous": Judge(llm, "generous")}, n=2, seed=0, max_tokens=120)
    assert leniency["criteria"] == {"smol": "strict", "smol_generous": "generous"}
    assert llm.ledger.stage("leniency:smol_generous").batches == 1
    for judge_kinds in leniency["judges"].values():  # one wrong answer of each kind per question, 2 questions
        for kind in judge_kinds.values():
            assert kind["judged"] + kind["failures"] == 2 and kind["failures"] <= 1

    run = tmp_path / "run"
    write_records(run / "questions.jsonl", build_records(questions, answers, labels, method="full_context"))
    dump_json(run / "metrics.json", metrics_by_method([json.loads(x) for x in
                                                        (run / "questions.jsonl").read_text().splitlines()]))
    dump_json(run / "leniency.json", leniency)
    llm.ledger.save(run / "ledger.json")
    text = write_report(run).read_text()
    assert "| full_context | **smol** headline | raw |" in text and (run / "accuracy.png").stat().st_size > 0
    assert (run / "cost.png").stat().st_size > 0
    print(json.dumps({"wall_s": round(time.perf_counter() - t0, 1), "answers": [a.answer for a in answers],
                      "labels": labels["smol"], "leniency": leniency["judges"]["smol"],
                      "ledger": llm.ledger.to_dict()["total"]}, indent=1))
