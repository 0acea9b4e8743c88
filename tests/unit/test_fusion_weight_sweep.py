"""experiments/bench/fusion_weight_sweep.py: the rule that picks System-2's fusion weight (highest fused recall, ties
to the larger weight), the figures it reads from a run directory, its refusals of bad input, and the committed dev
sweep: the chosen weight is the one the CPU defaults carry, and the sweep ran on a dev slice, never conv-26."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.bench import load_bench
from tests.helpers.compose import plain_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fws():
    return load_bench("fusion_weight_sweep")


def _point(fused: float) -> dict:
    return {"direct_recall": {"mnemis/fused": fused}}


def test_the_rule_takes_the_best_recall_and_breaks_ties_toward_the_larger_weight(fws):
    assert fws.choose({0.5: _point(0.7), 0.9: _point(0.8), 1.0: _point(0.75)}) == 0.9
    assert fws.choose({0.0: _point(0.7), 0.925: _point(0.8), 0.95: _point(0.8), 2.0: _point(0.6)}) == 0.95


def test_a_point_reads_each_routes_recall_and_the_turns_system2_held(fws, tmp_path):
    recall = {r: {"overall": {"direct": v, "n": 2}, "temporal": {"direct": v, "n": 2}}
              for r, v in (("mnemis/system1", 0.5), ("mnemis/system2", 0.25), ("mnemis/fused", 0.75))}
    (tmp_path / "recall.json").write_text(json.dumps(recall))
    rows = [{"question_id": "q1", "episodes": [{"id": "e1", "scores": {"s2": 0.5}}, {"id": "e2", "scores": {}}]},
            {"question_id": "q2", "episodes": [{"id": "e3", "scores": {"cosine": 0.1, "s2": 1.0}}]}]
    (tmp_path / "contexts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = fws.sweep_point(tmp_path)
    assert p["direct_recall"] == {"mnemis/system1": 0.5, "mnemis/system2": 0.25, "mnemis/fused": 0.75}
    assert p["fused_by_category"] == {"temporal": 0.75} and p["questions"] == 2
    assert (p["fused_turns"], p["fused_turns_from_system2"]) == (3, 2)


def test_bad_weights_a_missing_variant_and_a_missing_archive_are_named(fws, tmp_path, capsys):
    for bad in ("-0.5", "a,b", ","):
        with pytest.raises(SystemExit):
            fws.main(["--weights", bad, "--work", str(tmp_path)])
        assert "--weights" in capsys.readouterr().err
    src = tmp_path / "bench.json"
    src.write_text(json.dumps({"experiment": "cpu_heldout", "variants": {"v": {"overrides": []}}}))
    with pytest.raises(SystemExit, match="no variant 'w'"):
        fws.sweep(src, "w", [1.0], tmp_path / "out.json", tmp_path / "work")
    with pytest.raises(SystemExit, match="archive bench.cache.jsonl.gz is missing"):
        fws.sweep(src, "v", [1.0], tmp_path / "out.json", tmp_path / "work")


def test_the_committed_dev_sweep_chose_the_default_weight_on_a_dev_slice(fws):
    dev = json.loads((REPO / "experiments" / "results" / "fusion_weight_dev.json").read_text())
    assert dev["source"] == "experiments/results/tuned_dev.json"  # conv-48 sessions 1-2, never the test conversation
    points = {float(w): p for w, p in dev["weights"].items()}
    assert dev["chosen"] == fws.choose(points)  # the rule, applied to the figures the file holds
    tuned = plain_config([])["retrieval"]["fusion"]
    assert tuned["system2_weight"] == dev["chosen"] and tuned["scorer"] == "rrf_routes"
    assert plain_config(["mode=paper"])["retrieval"]["fusion"]["system2_weight"] == 1.0
