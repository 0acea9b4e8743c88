"""experiments/bench/cpu_quality.py and what it shares with the other benchmarks (mnemis.testing.bench_runs,
bench_replay): token F1, the ledger rates and the summary of a synthetic run dir;
the cpu_small profile composes (real model, sliced so every question's evidence is inside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnemis.config import compose, to_plain
from mnemis.testing import bench_replay, bench_runs
from tests.helpers.bench import load_bench

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cq():
    return load_bench("cpu_quality")


def test_f1_table_uses_audited_gold(cq):
    rows = [{"method": "rag", "category": "temporal", "answer": "May 2023", "gold": "June", "audited_gold": "May 2023"},
            {"method": "rag", "category": "single-hop", "answer": "x", "gold": "y"}]
    t = bench_runs.f1_table(rows)["rag"]
    assert t["overall"] == {"f1": 0.5, "bleu1": 0.5, "locomo_f1": 0.5, "n": 2}
    assert t["by_category"]["temporal"]["f1"] == 1.0 and t["by_category"]["single-hop"]["locomo_f1"] == 0.0


def test_stage_rates_and_prompt_cost(cq):
    ledger = {"stages": {
        "extract_facts": {"calls": 10, "cache_hits": 2, "failures": 1, "retries": 2, "truncated": 5,
                          "prompt_tokens": 12000, "completion_tokens": 900, "wall_s": 30.0, "batches": 3},
        "answer": {"calls": 4, "cache_hits": 0, "failures": 0, "retries": 0, "prompt_tokens": 800,
                   "completion_tokens": 40, "wall_s": 2.0, "batches": 1}}}
    rates = bench_runs.stage_rates(ledger)
    assert rates["extract_facts"]["failure_rate"] == 0.1 and rates["extract_facts"]["retry_rate"] == 0.25
    assert rates["extract_facts"]["truncation_rate"] == 0.5  # 5 of 8 sent + 2 retries
    assert rates["answer"]["truncation_rate"] is None  # a ledger written before truncation was counted
    cost = bench_runs.prompt_cost(ledger, n_episodes=4)
    assert cost["base_graph_prompt_tokens_per_episode"] == 3000 and cost["within_target"] is False
    build = {"stages": {"base_graph": {"counters": {"tokens.prompt.extract_entities": 400,
                                                    "tokens.prompt.extract_facts": 800, "calls.extract_facts": 4}}}}
    cost = bench_runs.prompt_cost(ledger, n_episodes=4, build=build)  # the build's counters count cached replies too
    assert cost["base_graph_prompt_tokens_per_episode"] == 300 and cost["per_stage"]["extract_facts"] == 200
    assert cost["source"].startswith("build counters")


def test_build_cost_counts_every_job_of_a_resumed_build(cq):
    """A build resumed across jobs: ``counters`` hold the last job's calls only, ``totals`` the whole build's."""
    build = {"stages": {"base_graph": {
        "counters": {"tokens.prompt.entity_attributes": 50, "tokens.completion.entity_attributes": 5},
        "totals": {"tokens.prompt.entity_attributes": 4000, "tokens.prompt.extract_facts": 2000,
                   "tokens.completion.entity_attributes": 400, "tokens.completion.extract_facts": 200}}}}
    cost = bench_runs.prompt_cost({"stages": {}}, n_episodes=4, build=build)
    assert cost["base_graph_prompt_tokens_per_episode"] == 1500 and cost["per_stage"]["entity_attributes"] == 1000
    assert bench_runs.completion_per_episode(build, 4)["completion_tokens_per_episode"] == 150
    top = {**build, "ingest_totals": {"tokens.prompt.extract_facts": 800}}  # the run's own cumulative copy first
    assert bench_runs.prompt_cost({"stages": {}}, n_episodes=4, build=top)["base_graph_prompt_tokens_per_episode"] == 200


def test_summarize_a_run_dir(cq, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "fidelity": "tuned", "methods": ["rag"], "llm": {"backend": {"model": "qwen2.5-coder-1.5b"}},
        "dataset": {"slice": {"groups": ["conv-26"], "sessions": [1, 1]}}}))
    (tmp_path / "build_summary.json").write_text(json.dumps({
        "dataset": {"episodes": 18, "questions": 4, "warnings": {}},
        "store_counts": {"conv-26": {"episodes": 18, "entities": 27, "facts": 36, "categories": 5}}}))
    (tmp_path / "questions.jsonl").write_text(json.dumps(
        {"method": "rag", "category": "temporal", "answer": "7 May 2023", "gold": "7 May 2023"}) + "\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"rag": {"answer_failures": 0, "judges": {"main": {"raw": {
        "overall": {"correct": 1, "total": 1, "accuracy": 1.0, "ci": [1.0, 1.0]},
        "by_category": {"temporal": {"correct": 1, "total": 1, "accuracy": 1.0}}, "separate": {},
        "judge_failures": 0}}}}}))
    (tmp_path / "recall.json").write_text(json.dumps(
        {"rag": {"overall": {"direct": 0.5, "reachable": 0.5, "n": 1}, "temporal": {"direct": 0.5, "n": 1}}}))
    (tmp_path / "ledger.json").write_text(json.dumps({"stages": {}, "total": {}}))
    s = bench_runs.summarize(tmp_path)
    assert s["mode"] == "tuned" and s["model"] == "qwen2.5-coder-1.5b" and s["slice"]["sessions"] == [1, 1]
    assert s["memory"]["entities_per_episode"] == 1.5 and s["memory"]["facts_per_episode"] == 2.0
    assert s["accuracy"]["rag"]["temporal"]["accuracy"] == 1.0 and s["token_f1"]["rag"]["overall"]["f1"] == 1.0
    assert s["evidence_recall"]["rag"]["direct"] == 0.5 and s["judge_leniency"] is None
    assert s["full_context_window"] is None  # no full-context method in this run
    (tmp_path / "full_context.json").write_text(json.dumps({"budget_tokens": 7168, "truncated_questions": 1}))
    assert bench_runs.summarize(tmp_path)["full_context_window"]["truncated_questions"] == 1
    both = {"tuned": s, "paper": {**s, "accuracy": {"rag": {"overall": {"accuracy": 0.0}}}}}
    assert cq.compare(both)["rag"]["accuracy_delta"] == -1.0


def test_cpu_small_profile_composes():
    plain = to_plain(compose(["experiment=cpu_small"]))
    assert plain["llm"]["backend"]["model"] == "qwen2.5-coder-1.5b"
    assert plain["methods"] == ["mnemis", "rag", "full_context", "mem0"]
    assert plain["dataset"]["slice"] == {**plain["dataset"]["slice"], "groups": ["conv-26"], "sessions": [18, 18]}
    assert to_plain(compose(["experiment=cpu_small", "mode=paper"]))["fidelity"] == "paper"
    small = to_plain(compose(["experiment=cpu_small", "llm=qwen25_coder_0_5b_vllm_cpu"]))
    assert small["llm"]["backend"]["model"] == "qwen2.5-coder-0.5b"


def test_cpu_small_slice_keeps_only_questions_with_evidence_inside():
    data_path = REPO.parent / "shared" / "data" / "locomo10.json"
    if not data_path.exists():
        pytest.skip("LoCoMo not available next to the checkout")
    from mnemis.data.load import load_dataset
    from tests.helpers.compose import dataset_settings

    d = load_dataset(dataset_settings("locomo", path=str(data_path), slice={"groups": ["conv-26"], "sessions": [18, 18]}))
    ids = {e.id for e in d.episodes}
    assert len(d.episodes) == 24 and len(d.questions) == 21
    assert all(q.evidence and set(q.evidence) <= ids for q in d.questions)
    assert len({q.category for q in d.questions}) == 5


def test_prompt_cost_of_a_reused_build_reads_the_store(cq, tmp_path):
    from mnemis.store import GraphStore

    with GraphStore(tmp_path / "m.sqlite") as store:
        store.set_meta("built:base_graph", {"stats": {"counters": {"tokens.prompt.extract_facts": 900}}})
    build = {"store": str(tmp_path / "m.sqlite"), "stages": {"base_graph": "reused"}}
    cost = bench_runs.prompt_cost({"stages": {}}, n_episodes=3, build=build)
    assert cost["base_graph_prompt_tokens_per_episode"] == 300 and cost["source"].startswith("build counters")


def test_paper_mode_runs_its_own_method_list(cq, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cq, "run_mode", lambda mode, exp, run_dir, overrides: calls.append((mode, list(overrides))) or 1.0)
    monkeypatch.setattr(cq, "summarize", lambda run_dir: {"accuracy": {}, "token_f1": {}})
    out = tmp_path / "q.json"
    assert cq.main(["--modes", "tuned,paper", "--out", str(out), "--", "dataset.slice.sessions=[1,1]"]) == 0
    caps = bench_replay.paper_cap_overrides("cpu")
    assert calls == [("tuned", ["dataset.slice.sessions=[1,1]"]),
                     ("paper", ["dataset.slice.sessions=[1,1]", *caps, "methods=[mnemis,rag,full_context]"])]
    assert "ingest.max_tokens.extract_entities=320" in caps and caps[0] == "reply_budget=off"  # held as given
    report = json.loads(out.read_text())
    assert "--paper-methods mnemis,rag,full_context" in report["command"] and set(report["modes"]) == {"tuned", "paper"}
    assert "--paper-reply-caps cpu" in report["command"] and report["modes"]["paper"]["mode_overrides"] == caps
    calls.clear()
    cq.main(["--modes", "paper", "--paper-methods", "all", "--paper-reply-caps", "none", "--out", str(out)])
    assert calls == [("paper", [])]


def test_paired_compares_mnemis_with_each_baseline_and_rag_with_full_context(cq):
    def row(method, q, ok):
        return {"method": method, "question_id": q, "category": "single-hop", "labels": {"strict": ok},
                "answer_scores": {"f1": float(ok)}}
    metrics = {"rag": {"judges": {"strict": {}}}}
    baselines = [row(m, q, ok) for m, q, ok in (("rag", "a", True), ("rag", "b", True),
                                                ("full_context", "a", False), ("full_context", "b", True))]
    only = bench_runs.paired(baselines, metrics)
    assert list(only) == ["rag_vs_full_context"]  # a run of the baselines alone still compares them
    assert only["rag_vs_full_context"]["strict"]["overall"]["difference"] == 0.5
    assert only["rag_vs_full_context"]["strict"]["overall"]["a_only_correct"] == 1
    both = bench_runs.paired([*baselines, row("mnemis", "a", True), row("mnemis", "b", False)], metrics)
    assert list(both) == ["mnemis_vs_rag", "mnemis_vs_full_context", "rag_vs_full_context"]
    why = bench_runs.why_disagree([*baselines, row("mnemis", "a", True), row("mnemis", "b", False)], metrics)
    assert list(why) == ["mnemis_vs_rag", "mnemis_vs_full_context"]  # why Mnemis lost what a baseline won
    assert why["mnemis_vs_rag"]["strict"]["b_only"] == 1
    assert why["mnemis_vs_rag"]["strict"]["why_a_lost"] == {"no_evidence_recall": {"n": 1, "question_ids": ["b"]}}


def test_overall_by_judge_keeps_every_criterion(cq):
    metrics = {"mnemis": {"judges": {"generous": {"raw": {"overall": {"accuracy": 0.7, "correct": 7, "total": 10, "ci": [0.4, 0.9]}}},
                                     "strict": {"raw": {"overall": {"accuracy": 0.5, "correct": 5, "total": 10}}}}}}
    out = bench_runs.overall_by_judge(metrics)
    assert out["mnemis"]["generous"]["correct"] == 7 and out["mnemis"]["strict"] == {"accuracy": 0.5, "correct": 5,
                                                                                       "total": 10, "ci": None}


def test_a_small_cached_run_replays_every_figure(cq, tmp_path, locomo_path):
    """A real (schema-fake) run archived with --archive, then --replay reruns it from the archive alone with
    cache_mode=replay_only and finds the same figures."""
    out = tmp_path / "results" / "cq.json"
    common = ["--runs-dir", str(tmp_path / "runs"), "--out", str(out)]
    rc = cq.main(["--modes", "tuned", "--experiment", "quickstart", "--archive", *common, "--",
                  "llm=schema_fake", "embedder=hashing", "reranker=cosine", "judge.leniency.enabled=false",
                  "methods=[mnemis,rag]", "dataset.slice.max_questions=2", f"paths.cache_dir={tmp_path}/cache",
                  f"paths.artifacts_dir={tmp_path}/art", f"paths.shared_data_dir={locomo_path.parent}"])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert saved["cache_archive"]["llm"] > 0 and (tmp_path / "results" / "cq.cache.jsonl.gz").is_file()
    tuned = saved["modes"]["tuned"]
    assert tuned["status"] == "complete" and "mnemis_vs_rag" in tuned["paired"]
    assert tuned["health"]["warnings"] is not None and tuned["completion_tokens"]["completion_tokens_per_episode"] >= 0
    assert tuned["reply_budgets"]["extract_entities"] == 96  # the quickstart's; replayed with the run's own reply budgets
    assert cq.main(["--replay", *common]) == 0
    changed = json.loads(json.dumps(tuned))
    changed["memory"]["facts"] += 1  # a figure a replay must reproduce; wall times and paths it need not
    assert bench_replay.figures(changed) != bench_replay.figures(tuned)
    changed = json.loads(json.dumps(tuned))
    changed["method_wall_s"], changed["run_dir"] = {"mnemis": 1.0}, "elsewhere"
    assert bench_replay.figures(changed) == bench_replay.figures(tuned)


def test_summarize_keeps_the_modes_it_does_not_reread(cq, tmp_path, monkeypatch):
    out = tmp_path / "q.json"
    out.write_text(json.dumps({"command": "python experiments/bench/cpu_quality.py --modes tuned", "modes": {
        "tuned": {"accuracy": {"mnemis": {"overall": {"accuracy": 0.25}}}, "token_f1": {}}}}))
    monkeypatch.setattr(cq, "summarize", lambda d: {"mode": "paper", "token_f1": {},
                                                    "accuracy": {"mnemis": {"overall": {"accuracy": 0.5}}}})
    assert cq.main(["--summarize", str(tmp_path / "paper"), "--keep-modes", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["modes"]) == {"tuned", "paper"}
    assert report["modes"]["tuned"]["kept_from"] == "python experiments/bench/cpu_quality.py --modes tuned"
    assert report["paper_minus_tuned"]["mnemis"]["accuracy_delta"] == 0.25
    assert "tuned kept from an earlier run" in report["paper_minus_tuned"]["note"]
    assert bench_replay.figures({"kept_from": "x", "a": 1}) == {"a": 1}
    cq.main(["--summarize", str(tmp_path / "paper"), "--out", str(out)])  # without --keep-modes: only what was read
    assert set(json.loads(out.read_text())["modes"]) == {"paper"}


def test_seed_cache_continues_a_run_from_its_archive(cq, tmp_path, monkeypatch):
    import gzip
    import sqlite3

    out = tmp_path / "q.json"
    row = {"kind": "llm", "key": "k1", "model": "m", "stage": "extract_entities", "text": '{"names":[]}',
           "prompt_tokens": 10, "completion_tokens": 3, "error": None, "finish_reason": "stop", "retries": 0}
    with gzip.open(bench_replay.archive_path(out), "wt") as fh:
        fh.write(json.dumps(row) + "\n")
    seen = []
    monkeypatch.setattr(cq, "run_mode", lambda mode, exp, run_dir, overrides: seen.append(overrides) or 1.0)
    monkeypatch.setattr(cq, "summarize", lambda run_dir: {"accuracy": {}, "token_f1": {}})
    cache = tmp_path / "cache"
    assert bench_replay.run_cache_dir([f"paths.cache_dir={cache}"]) == cache and bench_replay.run_cache_dir([]) == bench_replay.REPO / ".cache/mnemis"
    assert cq.main(["--modes", "tuned", "--seed-cache", "--out", str(out), "--", f"paths.cache_dir={cache}"]) == 0
    with sqlite3.connect(cache / "llm" / "responses.sqlite") as conn:
        assert conn.execute("SELECT key, stage FROM responses").fetchall() == [("k1", "extract_entities")]
    assert seen == [[f"paths.cache_dir={cache}"]]


def test_a_stopped_run_is_summarised_as_partial_with_what_its_cache_holds(cq, tmp_path):
    from mnemis.models.llm.base import LLMRequest, Sampling
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend

    cache = tmp_path / "cache"
    LLM(ScriptedBackend(lambda r: "ok"), cache_dir=cache / "llm").generate(
        [LLMRequest(messages=[{"role": "user", "content": f"m{i}"}], sampling=Sampling(max_tokens=8),
                    stage="extract_entities") for i in range(2)])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"fidelity": "paper", "paths": {"cache_dir": str(cache)},
                                                 "dataset": {"slice": {}}}))
    s = bench_runs.summarize(run)  # no metrics.json: the run stopped before its end
    assert s["status"] == "partial" and s["health"] is None
    assert s["cached_replies"]["extract_entities"]["replies"] == 2


def test_logged_stage_wall_charges_each_chunk_the_time_since_the_previous_line(cq, tmp_path):
    log = tmp_path / "mnemis.log"
    log.write_text(
        "[2026-12-03 10:00:00,000][mnemis.components][INFO] - built llm in 40.0 s\n"
        "[2026-12-03 10:00:30,000][mnemis.progress][INFO] - answer 24/24 (100%) 0.8/s ETA 0:00:00\n"
        "[2026-12-03 10:01:00,500][mnemis.progress][INFO] - answer 8/8 (100%) 0.3/s ETA 0:00:00\n"
        "a traceback line without a timestamp\n"
        # a later sitting: its start-up falls on the line that opens it, not on a stage
        "[2026-12-03 12:00:00,000][mnemis.components][INFO] - built llm in 45.0 s\n"
        "[2026-12-03 12:00:10,000][mnemis.progress][INFO] - rerank pairs 1,056/7,356 (14%) 2.9/s ETA 0:36:34\n"
        "[2026-12-03 12:00:12,000][mnemis.progress][INFO] - answer 2/2 (100%) 0.1/s ETA 0:00:00\n")
    got = bench_runs.logged_stage_wall(log)
    assert got["log_from"] == "2026-12-03 10:00:00" and got["log_to"] == "2026-12-03 12:00:12"
    assert got["stages"] == {"answer": {"wall_s": 62.5, "lines": 3}, "rerank pairs": {"wall_s": 10.0, "lines": 1}}
    assert bench_runs.logged_stage_wall(tmp_path / "absent.log") is None
    # a replay need not match the log's times, nor an earlier sitting's
    assert bench_replay.figures({"logged_stage_wall_s": got, "baselines_model_run": {"before": {}}, "a": 1}) == {"a": 1}


def test_a_replay_that_stops_says_what_differs_from_the_machine_that_made_the_archive(cq, tmp_path, monkeypatch,
                                                                                        capsys):
    import gzip
    import subprocess

    from mnemis.app.provenance import cpu_features

    flags = "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni foo\n"
    assert cpu_features("processor\t: 0\n" + flags) == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                                                         "avx512vl", "avx512_vnni"]
    assert cpu_features("Features\t: fp asimd\n") == [] and cpu_features("no flags here") == []
    here = bench_replay.host()
    assert {"cpus", "cpu", "cpu_features", "versions"} <= set(here) and "numpy" in here["versions"]

    out = tmp_path / "q.json"
    made_on = {**here, "cpu_features": ["avx2", "fma"], "versions": {**here["versions"], "numpy": "0.0.1"}}
    out.write_text(json.dumps({"experiment": "quickstart", "overrides": [], "host": made_on,
                               "modes": {"paper": {"memory": {"facts": 3}}}}))
    with gzip.open(bench_replay.archive_path(out), "wt") as fh:
        fh.write(json.dumps({"kind": "llm", "key": "k", "model": "m", "stage": "answer", "text": "x",
                             "prompt_tokens": 1, "completion_tokens": 1, "error": None, "finish_reason": "stop",
                             "retries": 0}) + "\n")

    def stops(mode, experiment, run_dir, overrides, stderr_path=None):
        assert "cache_mode=replay_only" in overrides
        stderr_path.write_text("mnemis.models.cache.CacheMissError: replay_only cache miss in stage 'dedup_facts': "
                               "1 request(s) have no stored response (first key 496c6ff2cfea7629...).\n")
        raise subprocess.CalledProcessError(1, ["mnemis", "run"])

    monkeypatch.setattr(cq, "run_mode", stops)
    assert cq.replay(out, tmp_path / "runs" / "cq") == 1  # no traceback: a reason and exit 1
    said = capsys.readouterr().out
    assert "paper: the replay stopped (exit 1)" in said and "CPU vector features: archive avx2, fma; here" in said
    assert "cache miss in stage 'dedup_facts'" in said  # the run's own words, from its standard error
    # with --archive the failed replay is kept in the JSON, naming the request the archive lacks
    assert cq.replay(out, tmp_path / "runs" / "cq", rearchive_to=True) == 1
    attempt = json.loads(out.read_text())["replay_attempts"][-1]
    assert not attempt["every_figure_reproduced"] and attempt["host"]["cpu_features"] == here["cpu_features"]
    assert attempt["misses"] == {"paper": [{"stage": "dedup_facts", "requests": 1, "first_key": "496c6ff2cfea7629"}]}
    assert f"numpy 0.0.1 -> {here['versions']['numpy']}" in said
    # an archive that does not record its machine (made before hosts were recorded) says so
    assert "does not record the machine" in bench_replay.replay_stopped("paper", 1, {"cpus": 2}, here)
    same = bench_replay.replay_stopped("paper", 1, here, here)
    assert "match the archive's" in same and "CPU vector features" not in same


def test_refill_asks_the_model_only_what_the_archive_lacks_and_then_replays(cq, tmp_path, locomo_path):
    """--refill reruns the JSON's modes with the archive as the response cache: a reply the archive lacks (here one
    answer, dropped from it) is asked of the model, the rest replay; the figures, the added replies per stage and
    the new archive are written, and a replay of that archive reproduces every figure."""
    import gzip

    out = tmp_path / "results" / "cq.json"
    common = ["--runs-dir", str(tmp_path / "runs"), "--out", str(out)]
    assert cq.main(["--modes", "tuned", "--experiment", "quickstart", "--archive", *common, "--",
                    "llm=schema_fake", "embedder=hashing", "reranker=cosine", "judge.leniency.enabled=false",
                    "methods=[rag]", "dataset.slice.max_questions=2", f"paths.cache_dir={tmp_path}/cache",
                    f"paths.artifacts_dir={tmp_path}/art", f"paths.shared_data_dir={locomo_path.parent}"]) == 0
    archive = tmp_path / "results" / "cq.cache.jsonl.gz"
    rows = gzip.decompress(archive.read_bytes()).decode().splitlines()
    answer = next(i for i, r in enumerate(rows) if json.loads(r).get("stage") == "answer")
    archive.write_bytes(gzip.compress(("\n".join(rows[:answer] + rows[answer + 1:]) + "\n").encode()))
    before = json.loads(out.read_text())["modes"]["tuned"]
    assert cq.main(["--refill", str(tmp_path / "refill"), "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["refill"]["replies_added_by_model"] == {"answer": 1}
    assert saved["modes"]["tuned"]["figures_before_refill"]["accuracy"] == before["accuracy"]
    assert bench_replay.figures(saved["modes"]["tuned"]) == bench_replay.figures(before)  # the fake model is exact
    assert saved["cache_archive"]["llm"] == before_llm(rows) and cq.main(["--replay", *common]) == 0


def before_llm(rows: list[str]) -> int:
    """LLM replies in an archive's rows (the one dropped came back)."""
    return sum(1 for r in rows if json.loads(r).get("kind", "llm") == "llm")
