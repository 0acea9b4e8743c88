"""experiments/bench/tuned_dev.py: every variant is paper mode's base graph, answers and judges with our hierarchy
and walk and one fusion option; dev slices never include conv-26; a small schema-fake run replays from its archive."""

from __future__ import annotations

import json

import pytest

from tests.helpers.bench import load_bench
from tests.helpers.compose import plain_config


@pytest.fixture(scope="module")
def td():
    return load_bench("tuned_dev")


def test_variants_change_only_the_hierarchy_the_walk_and_the_fusion(td):
    paper = plain_config(["experiment=cpu_heldout", "mode=paper"])
    for name, overrides in td.VARIANTS.items():
        cfg = plain_config(["experiment=cpu_heldout", "mode=paper", *overrides])
        assert cfg["fidelity"] == "paper" and cfg["dataset"]["slice"]["groups"] == ["conv-48"]
        for section in ("ingest", "answer", "judge", "dataset", "llm"):
            assert cfg[section] == paper[section], (name, section)
        tuned = name != "paper"
        assert (cfg["hierarchy"]["categorizer"] == "two_step") == tuned
        assert cfg["retrieval"]["system2"]["page_by_window"] is tuned
        assert (cfg["retrieval"]["system2"]["min_top_selections"] == 1) == tuned
        assert (cfg["retrieval"]["system2"]["min_lower_selections"] == 1) == tuned
    fusion = {n: plain_config(["experiment=cpu_heldout", "mode=paper", *o])["retrieval"]["fusion"]
              for n, o in td.VARIANTS.items()}
    assert fusion["tuned_rrf"]["scorer"] == "rrf_routes" and fusion["tuned_rerank"]["scorer"] == "reranker"
    assert fusion["tuned_yes"]["max_pairs"] == td.PAIRS and fusion["tuned_rerank"]["max_pairs"] is None
    assert fusion["embed_rrf"]["scorer"] == "rrf_routes" and fusion["embed_rerank"]["scorer"] == "reranker"
    placed = {n: plain_config(["experiment=cpu_heldout", "mode=paper", *o])["hierarchy"]["assign_by"]
              for n, o in td.VARIANTS.items()}
    assert {n for n, a in placed.items() if a == "embedding" and n != "paper"} == {"embed_rerank", "embed_rrf",
                                                                                   "embed_yes", "embed_rrf_sim",
                                                                                   "embed_rrf_sim_w"}
    assert fusion["embed_yes"]["max_pairs"] == td.PAIRS
    assert {n for n, f in fusion.items() if f["system2_order"] == "similarity"} == {"embed_rrf_sim", "embed_rrf_sim_w"}
    # paper mode pins the routes' equal weight; only the weighted variant departs from it
    assert {n for n, f in fusion.items() if f["system2_weight"] != 1.0} == {"embed_rrf_sim_w"}
    assert fusion["embed_rrf_sim_w"]["system2_weight"] == 0.925


def test_dev_slices_exclude_the_test_conversation(td):
    for experiment, overrides, _ in td.SLICES.values():
        groups = plain_config([f"experiment={experiment}", *overrides])["dataset"]["slice"]["groups"]
        assert "conv-26" not in groups
    assert td.TEST[0] == "cpu_conv26"
    # the conv-26 archive was made without the selection cap; the held-out one with it
    assert not any("system2.max_tokens" in o for o in td.base_overrides("cpu", select_cap=False))
    assert any("system2.max_tokens" in o for o in td.base_overrides("cpu", select_cap=True))
    for bad in ("paper", "embed_rrf,nope", ","):  # the test names tuned variants only
        with pytest.raises(SystemExit):
            td.main(["--conv26", bad])


def test_stage_cost_reads_the_ledger_and_the_timings(td, tmp_path):
    assert td.stage_cost(tmp_path) is None  # no run yet
    ledger = {"stages": {"select": {"calls": 40, "cache_hits": 4, "prompt_tokens": 9000, "completion_tokens": 700,
                                    "failures": 1, "wall_s": 12.345},
                         "extract_facts": {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "wall_s": 0.0}},
              "total": {}}
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    (tmp_path / "timings.json").write_text(json.dumps({"mnemis": 30.5, "rag": 0.1}))
    cost = td.stage_cost(tmp_path)
    assert cost == {"stages": {"select": {"calls": 40, "from_cache": 4, "prompt_tokens": 9000, "completion_tokens": 700,
                                          "failures": 1, "wall_s": 12.3}},
                    "method_wall_s": {"mnemis": 30.5, "rag": 0.1}}
    from mnemis.testing.bench_replay import figures

    assert figures({"cost": cost}) == {"cost": {}}  # times and token counts of a sitting are not replayed figures


def test_context_recall_reads_a_run_stopped_after_retrieval(td, tmp_path):
    assert td.context_recall(tmp_path, {"q1": ["a"]}) is None  # retrieval not done
    (tmp_path / "system1.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"question_id": "q1", "episodes": ["a", "x"]}, {"question_id": "q2", "episodes": ["y"]},
        {"question_id": "q3", "episodes": []}]))
    hit = lambda i, s2=False: {"id": i, "scores": {"rrf": 0.1, **({"s2": 0.5} if s2 else {})}}  # noqa: E731
    (tmp_path / "contexts.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"question_id": "q1", "episodes": [hit("a"), hit("b", True)]},
        {"question_id": "q2", "episodes": [hit("c", True), hit("y")]},
        {"question_id": "q3", "episodes": [hit("z", True)]}]))
    gold = {"q1": ["a", "b"], "q2": ["c", "d"], "q3": []}  # q3 has no evidence: skipped
    assert td.context_recall(tmp_path, gold) == {"questions": 2, "system1_direct": 0.25, "fused_direct": 0.75,
                                                "fused_turns_from_system2": 3, "fused_turns": 5}


@pytest.mark.slow  # two schema-fake runs and their replay through the CLI: about a minute on 2 cores
def test_a_small_run_of_two_variants_replays(td, tmp_path, locomo_path):
    out = tmp_path / "results" / "t.json"
    fake = ["llm=schema_fake", "embedder=hashing", "reranker=cosine", "dataset.slice.sessions=[1,1]",
            "dataset.slice.max_questions=2", "judge.longmemeval_format=reasoned",
            f"paths.artifacts_dir={tmp_path}/art", f"paths.shared_data_dir={locomo_path.parent}"]
    rc = td.main(["--variants", "paper,tuned_rrf", "--runs-dir", str(tmp_path / "runs"), "--out", str(out),
                  "--cache-dir", str(tmp_path / "cache"), "--", *fake])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert list(saved["variants"]) == ["paper", "tuned_rrf"] and saved["cache_archive"]["llm"] > 0
    tuned = saved["variants"]["tuned_rrf"]
    assert tuned["status"] == "complete" and tuned["hierarchy_shape"]
    assert list(saved["against_paper"]) == ["tuned_rrf_vs_paper"]
    assert td.main(["--replay", "--out", str(out)]) == 0
    # a later sitting that reuses both finished runs keeps the wall times their sitting measured
    assert td.main(["--variants", "paper,tuned_rrf", "--runs-dir", str(tmp_path / "runs"), "--out", str(out),
                    "--cache-dir", str(tmp_path / "cache"), "--reuse-finished", "--", *fake]) == 0
    again = json.loads(out.read_text())
    assert again["wall_s"] == saved["wall_s"] and all(w is not None for w in again["wall_s"].values())
    from mnemis.testing.bench_replay import figures

    assert figures(again) == figures(saved)
