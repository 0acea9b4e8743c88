from __future__ import annotations

import json

from mnemis.eval.harness import evaluate_method, finalize_run
from mnemis.eval.records import read_records
from mnemis.eval.tracking import NoTracker
from mnemis.types import Hit, RetrievedContext
from tests.helpers.eval import make_question, scripted_llm, verdict


def test_evaluate_then_finalize(tmp_path):
    qs = [make_question(i, group="conv-26", evidence=[f"conv-26:D1:{i + 10}"]) for i in range(3)]
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps([{"question_id": "locomo_0_qa1", "question": qs[1].question, "category": 4,
                                  "error_type": "ATTRIBUTION_ERROR", "correct_answer": "Rome",
                                  "correct_evidence": ["D1:3"]}]))
    stress = tmp_path / "stress.json"
    stress.write_text(json.dumps([{"question_id": "locomo_0_qa0", "question": "q?", "golden_answer": "a",
                                   "category": 4, "wrong_specific": "b", "wrong_vague": "c"}]))
    answerer, ab = scripted_llm(lambda r: "Rome")
    judge, jb = scripted_llm(lambda r: verdict("CORRECT" if "Gold answer: Rome" in r.messages[-1]["content"]
                                               else "WRONG"))
    retrieved = [RetrievedContext(question_id=q.id, group_id=q.group_id,
                                  episodes=[Hit(id="conv-26:D1:3", kind="episode", score=1.0)]) for q in qs]
    run = tmp_path / "run"
    kw = dict(questions=qs, contexts=["ctx"] * 3, answer_llm=answerer, judges={"j": judge}, run_dir=run,
              retrieved=retrieved, audit=audit)
    recs = evaluate_method(method="mnemis", **kw)
    assert len(ab.batches) == 1 and len(jb.batches) == 2 and len(jb.batches[1]) == 1  # raw + audited re-judge
    assert [r.labels["j"] for r in recs] == [False, False, False]
    assert [r.audited_labels["j"] for r in recs] == [False, True, False]
    # recall uses the audited evidence for qa1 (D1:3 retrieved), the original for the others
    assert [r.recall["episodes_recall"] for r in recs] == [0.0, 1.0, 0.0]
    evaluate_method(method="mnemis", **kw)  # same method and seed: replaced, not duplicated
    evaluate_method(method="rag", **kw)
    assert len(read_records(run / "questions.jsonl")) == 6
    metrics = finalize_run(run, ledger=judge.ledger, leniency_judges={"j": judge}, leniency_path=stress,
                           n_boot=100, tracker=NoTracker())
    assert set(metrics) == {"mnemis", "rag"}
    assert metrics["mnemis"]["judges"]["j"]["audited"]["overall"]["accuracy"] == 1 / 3
    for name in ("metrics.json", "leniency.json", "ledger.json", "report.md", "accuracy.png", "cost.png"):
        assert (run / name).stat().st_size > 0
    assert json.loads((run / "leniency.json").read_text())["judges"]["j"]["wrong_vague"]["rate"] == 0.0
