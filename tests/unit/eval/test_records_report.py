from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.leniency import judge_leniency
from mnemis.eval.metrics import metrics_by_method
from mnemis.eval.records import build_records, dump_json, read_records, write_records
from mnemis.eval.report import write_report
from mnemis.eval.tracking import NoTracker, WandbTracker, flatten, make_tracker
from mnemis.models.ledger import Ledger
from mnemis.settings import NoTrackerSettings, TrackerSettings, WandbTrackerSettings
from mnemis.types import Hit, RetrievedContext
from tests.helpers.eval import make_question

CATS = ["multi-hop", "temporal", "single-hop", "adversarial"]


def _records(method, seed=0, flip=0):
    qs = [make_question(i, group=f"conv-{i % 3}", category=CATS[i % 4]) for i in range(12)]
    answers = [AnswerRecord(question_id=q.id, group_id=q.group_id, answer="Paris" if (i + flip) % 3 else "",
                            error=None if (i + flip) % 3 else "empty answer") for i, q in enumerate(qs)]
    labels = {"j1": [bool((i + flip) % 3) for i in range(12)], "j2": [i % 2 == 0 for i in range(12)]}
    audited_q = [q.model_copy(update={"answer": "Rome"}) if i == 1 else q for i, q in enumerate(qs)]
    ctxs = [RetrievedContext(question_id=q.id, group_id=q.group_id, flags=["x"] if i == 0 else [],
                             episodes=[Hit(id=f"{q.group_id}:D1:1", kind="episode", score=1.0)])
            for i, q in enumerate(qs)]
    return build_records(qs, answers, labels, method=method, seed=seed, audited_labels={"j1": [True] * 12},
                         audited_questions=audited_q, contexts=ctxs, recall=[{"episodes@10": 1.0}] * 12)


def test_records_roundtrip_and_checks(tmp_path):
    recs = _records("mnemis")
    assert recs[0].flags == ["x", "answer_failed"] and recs[1].audited_gold == "Rome" and recs[2].audited_gold is None
    assert recs[0].context_ids == ["conv-0:D1:1"] and recs[4].labels == {"j1": True, "j2": True} and recs[3].labels["j1"] is False
    path = write_records(tmp_path / "questions.jsonl", recs)
    write_records(path, _records("rag"), append=True)
    back = read_records(path)
    assert back[:12] == recs and len(back) == 24
    with pytest.raises(ValueError):
        build_records([make_question(0)], [], {})


def _run_dir(tmp_path, with_metrics=True):
    run = tmp_path / "run"
    recs = _records("mnemis") + _records("mnemis", seed=1, flip=1) + _records("full_context", flip=2)
    write_records(run / "questions.jsonl", recs)
    if with_metrics:
        dump_json(run / "metrics.json", metrics_by_method(recs, n_boot=200))
    led = Ledger()
    led.record("answer", calls=12, prompt_tokens=5000, completion_tokens=300, wall_s=2.5, batches=1)
    led.record("judge:j1", calls=12, prompt_tokens=2000, completion_tokens=100, wall_s=1.0, batches=1)
    led.save(run / "ledger.json")
    dump_json(run / "recall.json", {"rag": {"recall@5": 0.4, "recall@10": 0.6, "mrr": 0.3},
                                    "graph": {"recall@5": 0.5, "recall@10": 0.7}})
    dump_json(run / "hierarchy_metrics.json", [{"group_id": "conv-0", "layers": 3, "coverage": 1.0,
                                                "nodes_per_layer": [10, 5, 2]}])
    return run, recs


def test_report_regenerates_from_files(tmp_path):
    run, _ = _run_dir(tmp_path)
    from tests.helpers.eval import scripted_llm, verdict

    llm, _ = scripted_llm(lambda r: verdict("CORRECT"))
    items = [{"question_id": "locomo_0_qa0", "question": "q?", "golden_answer": "a", "category": 4,
              "wrong_specific": "b", "wrong_vague": "c"}]
    dump_json(run / "leniency.json", judge_leniency({"j1": llm}, items=items))
    report = write_report(run)
    text = report.read_text()
    for png in ("accuracy.png", "recall.png", "cost.png"):
        assert (run / png).stat().st_size > 1000
    assert "| mnemis | **j1** headline | raw |" in text and "| full_context | j2 | raw |" in text
    assert "audited (1 changed)" in text and "100.0 / 100.0" in text  # j1 leniency next to its scores
    assert "Repeated runs" in text and "Judge agreement" in text and "recall@10" in text
    assert "| run | answer | 12 | 5000 |" in text and "conv-0" in text and "adversarial" in text
    before = text
    (run / "report.md").unlink()
    assert write_report(run).read_text() == before  # deterministic, only from files


def test_report_without_metrics_json(tmp_path):
    run, _ = _run_dir(tmp_path, with_metrics=False)
    (run / "recall.json").unlink()
    text = write_report(run).read_text()
    assert "| mnemis | **j1** headline | raw |" in text and not (run / "recall.png").exists()
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "empty")


def test_trackers(tmp_path):
    assert flatten({"a": {"b": 1, "ci": [0.1, 0.2], "l": [1, 2, 3]}, "s": "x"}) == {
        "a/b": 1, "a/ci_lo": 0.1, "a/ci_hi": 0.2, "s": "x"}
    nt = make_tracker(NoTrackerSettings(name="none"))
    assert isinstance(nt, NoTracker)
    nt.log_run_dir(tmp_path)
    with pytest.raises(ValueError, match="mlflow"):
        TypeAdapter(TrackerSettings).validate_python({"name": "mlflow"})
    run, _ = _run_dir(tmp_path)
    write_report(run)
    tr = make_tracker(WandbTrackerSettings(name="wandb", project="mnemis-test", mode="offline", entity=None,
                                           run_name=None, group=None, tags=[]), dir=str(tmp_path / "wb"))
    assert isinstance(tr, WandbTracker)
    tr.log_config({"k": 10})
    tr.log_metrics({"x": {"y": 0.5}})
    tr.log_run_dir(run)
    tr.finish()
    files = list((tmp_path / "wb").rglob("*.wandb"))
    assert files and files[0].stat().st_size > 0
    assert json.loads((run / "metrics.json").read_text())["mnemis"]["seeds"] == [0, 1]
