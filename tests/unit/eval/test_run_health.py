"""Run health: a run directory says by itself whether System-2 contributed, how rich the base graph is, what
the hierarchy looks like and whether the judge grades like the reference judge."""

from __future__ import annotations

import json

from mnemis.eval.report import write_report
from mnemis.eval.run_health import run_health
from mnemis.eval.run_dir import HEALTH_FILE


def _walk(flagged=(), selected=(), fallback=None, entities=0):
    return {"question_id": "q", "group_id": "g", "fallback": fallback, "counts": {"entities": entities},
            "rounds": [{"round": 0, "layer": 2, "candidates": ["a", "b"], "prompts": 1,
                        "selected": list(selected), "flagged": list(flagged), "invented": 1}]}


def _write_run(run, *, healthy: bool):
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"fidelity": "paper", "retrieval": {"system2": {"entity_round": False}}}))
    walks = ([_walk(flagged=["a"], entities=5)] * 4 if healthy else
             [_walk(flagged=["a"], entities=5)] + [_walk(fallback="empty_top_selection")] * 2 + [_walk(selected=["b"])])
    (run / "traversal.jsonl").write_text("".join(json.dumps(w) + "\n" for w in walks))
    s2 = 0.7 if healthy else 0.1
    (run / "recall.json").write_text(json.dumps({"mnemis/system1": {"overall": {"direct": 0.8}},
                                                 "mnemis/system2": {"overall": {"direct": s2}},
                                                 "mnemis/fused": {"overall": {"direct": 0.85}}}))
    totals = {"extracted.names": 30, "extracted.facts": 20 if healthy else 2, "calls.extract_facts": 10,
              "truncated.extract_facts": 0 if healthy else 3, "tokens.prompt.extract_entities": 40000,
              "tokens.completion.extract_entities": 1500}
    (run / "build_summary.json").write_text(json.dumps({"store_counts": {"g": {"episodes": 10}},
                                                        "ingest_totals": totals, "stages": {}}))
    layers = [30, 12, 4] if healthy else [30, 150]
    (run / "hierarchy_metrics.json").write_text(json.dumps({"g": {"group_id": "g", "nodes_per_layer": layers,
                                                                  "layers": len(layers) - 1,
                                                                  "promoted": 2 if healthy else 120,
                                                                  "repairs": {"empty_replies": 0 if healthy else 3},
                                                                  "stop_reason": "max_layers"}}))
    rates = {"wrong_specific": {"rate": 0.1}, "wrong_vague": {"rate": 0.6}} if healthy else \
        {"wrong_specific": {"rate": 0.95}, "wrong_vague": {"rate": 1.0}}
    (run / "leniency.json").write_text(json.dumps({"judges": {"generous": rates}, "criteria": {"generous": "generous"}}))
    rows = [{"method": "mnemis", "question_id": f"q{i}", "group_id": "g", "category": "single-hop",
             "question": "q?", "gold": "a", "answer": "a", "labels": {"generous": True}} for i in range(2)]
    (run / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_run_that_did_not_run_the_paper_method_says_so(tmp_path):
    _write_run(tmp_path / "bad", healthy=False)
    h = run_health(tmp_path / "bad")
    s2 = h["system2"]
    assert (s2["picked_nothing"], s2["no_shortcut"], s2["fell_back"]) == (0.5, 0.75, 0.5)
    assert s2["fallback_reasons"] == {"empty_top_selection": 2} and s2["invented_selections"] == 4
    assert h["base_graph"]["facts_per_episode"] == 0.2 and h["base_graph"]["prompt_tokens_per_episode"] == 4000
    text = "\n".join(h["warnings"])
    for sign in ("took no shortcut", "fell back to System-1 for 50%", "System-2's direct evidence recall is 0.100",
                 "0.20 facts per episode", "extract_facts replies were cut", "1 category layer",
                 "accuracy is not meaningful",
                 "120 of the 150 category nodes are lower nodes promoted unchanged (3 categorisation replies"):
        assert sign in text, sign
    assert "picked nothing" not in text  # 50% is not more than half
    report = write_report(tmp_path / "bad").read_text()
    assert "## Run health" in report and "**warning**: System-2 fell back" in report
    assert report.index("## Run health") < report.index("## Retrieval")  # read before the numbers
    assert json.loads((tmp_path / "bad" / HEALTH_FILE).read_text())["warnings"] == h["warnings"]


def test_a_healthy_run_has_no_warning(tmp_path):
    _write_run(tmp_path / "ok", healthy=True)
    h = run_health(tmp_path / "ok")
    assert h["warnings"] == [] and h["system2"]["no_shortcut"] == 0.0
    assert h["hierarchy"]["g"]["nodes_per_layer"] == [30, 12, 4] and h["hierarchy"]["g"]["empty_replies"] == 0
    assert "no warning" in write_report(tmp_path / "ok").read_text()


def test_a_run_without_system2_or_a_build_has_an_empty_health(tmp_path):
    (tmp_path / "r").mkdir()
    assert run_health(tmp_path / "r") == {"fidelity": None, "warnings": []}


def test_model_limits_are_named_clamps_as_a_figure_refusals_and_schema_loss_as_warnings(tmp_path):
    from mnemis.eval.run_health import health_lines

    def stage(calls, **kw):
        return {"calls": calls, "clamped": 0, "clamped_cut": 0, "over_limit": 0, "unconstrained": 0, **kw}

    clean = {"stages": {"extract_facts": stage(40, clamped=12), "select": stage(8)}, "total": {}}
    (tmp_path / "ledger.json").write_text(json.dumps(clean))
    health = run_health(tmp_path)
    assert health["limits"] == {"extract_facts": stage(40, clamped=12)} and health["warnings"] == []
    assert any("clamped to the model's limits" in line and "extract_facts 12 of 40" in line
               for line in health_lines(health))
    bad = {"mnemis": {"stages": {"extract_facts": stage(40, clamped=12, clamped_cut=2, over_limit=3),
                                 "select": stage(8, unconstrained=8)}},
           "rag": {"stages": {"select": stage(1, unconstrained=1)}}}  # the {method: ledger} layout, summed
    (tmp_path / "ledger.json").write_text(json.dumps(bad))
    warns = run_health(tmp_path)["warnings"]
    assert any(w.startswith("3 extract_facts requests asked for more than") for w in warns)
    assert any(w.startswith("9 select requests were decoded without their JSON schema") for w in warns)
    assert any(w.startswith("2 of the 12 extract_facts replies") for w in warns)
