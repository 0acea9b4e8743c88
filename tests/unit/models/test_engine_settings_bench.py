"""experiments/bench/engine_settings.py without an engine: the fixed request set and the summary."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("engine_settings", REPO / "experiments" / "bench" / "engine_settings.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_every_setting_changes_only_keys_the_vllm_backend_takes():
    from mnemis.models.llm.vllm_backend import VLLMBackend

    params = set(inspect.signature(VLLMBackend).parameters)
    known = params | {"max_num_seqs", "kv_cache_memory_bytes"}  # engine keywords passed through to vllm.LLM
    assert next(iter(bench.SETTINGS)) == "auto"  # the reference: vLLM's own binding
    for name, changes in bench.SETTINGS.items():
        assert set(changes) <= known, name
        assert changes.get("cpu_threads_bind") in ("auto", "all"), name


@pytest.fixture(scope="module")
def requests():
    from mnemis.data.sources import DataDirs

    if DataDirs.from_config().find("locomo10.json") is None:
        pytest.skip("LoCoMo (locomo10.json) is not in the data dirs")
    plain = bench.profile_config()
    return plain, bench.request_set(plain, tokenizer=None)  # None: full_context's ~4 chars/token estimate


def test_request_set_is_the_profiles_stages_fixed_and_gold_free(requests):
    plain, reqs = requests
    assert {s: len(reqs[s]) for s in bench.STAGES} == {
        "extract_entities": 24, "extract_facts": 8, "select": 7, "answer_full_context": 7, "answer_rag_like": 7}
    assert bench.set_hash(reqs) == bench.set_hash(bench.request_set(plain, tokenizer=None))
    small = bench.request_set(plain, tokenizer=None, size="small")
    assert {s: len(small[s]) for s in bench.STAGES} == {
        "extract_entities": 12, "extract_facts": 4, "select": 3, "answer_full_context": 3, "answer_rag_like": 3}
    assert all(a.messages == b.messages for s in bench.STAGES for a, b in zip(small[s], reqs[s][:1]))  # a prefix
    ingest = plain["ingest"]["max_tokens"]
    # the profile's budgets, raised to each schema's worst case as its LLM config does (reply_budget=raise)
    assert all(r.sampling.max_tokens >= ingest["extract_entities"] for r in reqs["extract_entities"])
    assert all(r.sampling.max_tokens >= ingest["extract_facts"] for r in reqs["extract_facts"])
    assert all(r.json_schema() is not None for s in ("extract_entities", "extract_facts", "select") for r in reqs[s])
    assert {r.sampling.max_tokens for r in reqs["answer_rag_like"]} == {plain["answer"]["max_tokens"]}
    # each fact prompt lists the speaker and the scripted names; each answer prompt holds its own question
    assert all("CURRENT message" in r.messages[-1]["content"] for r in reqs["extract_facts"])
    full = [r.messages[-1]["content"] for r in reqs["answer_full_context"]]
    rag = [r.messages[-1]["content"] for r in reqs["answer_rag_like"]]
    assert len(set(full)) == len(full) and all(len(f) > len(g) for f, g in zip(full, rag))
    from mnemis.app.jobs import load_configured_dataset
    from mnemis.settings import load_settings

    data = load_configured_dataset(load_settings(plain))
    for q, text in zip(data.questions[::bench.SIZES["full"]["question_stride"]], rag):
        assert q.question.strip() in text
        assert q.category not in text.split("# Question", 1)[1]  # no gold label in the prompt


def test_names_stand_in_is_capitalised_words_without_the_speaker():
    assert bench._names("Hey Mel! I went to Paris with Caroline and Caroline's dog.", "Mel") == [
        "Hey", "Paris", "Caroline", "Caroline's"]


def _row(setting: str, walls: dict[str, float], ok: int | None = None, size: str = "full", rs: str = "a") -> dict:
    n = len(walls)
    return {"setting": setting, "size": size, "request_set": rs, "requests": n, "ok": n if ok is None else ok,
            "wall_s": sum(walls.values()), "stages": {st: {"wall_s": w} for st, w in walls.items()}}


def test_summary_per_size_names_the_fastest_over_the_common_stages_and_flags_a_changed_request_set():
    ent, fac = "extract_entities", "extract_facts"
    rows = [_row("auto", {ent: 150.0, fac: 50.0}), _row("all", {ent: 100.0}),  # all: entities only (--stages)
            _row("all_fp32_seqs_16", {ent: 10.0, fac: 40.0}, ok=0),           # engine died: not valid
            {"setting": "all_fp32_kv_2g", "error": "exit 1"},
            _row("all_fp32_seqs_16", {ent: 30.0}, size="small", rs="s"), _row("all", {ent: 40.0}, size="small", rs="s")]
    rep = bench.summarize(rows, ["cmd"], 400.0)
    full, small = rep["groups"]["full"], rep["groups"]["small"]
    assert full["stages_compared"] == [ent] and full["wall_s"] == {"auto": 150.0, "all": 100.0}
    assert full["reference"] == "auto" and full["fastest"] == "all" and full["fastest_speedup_vs_reference"] == 1.5
    assert [r["valid"] for r in rep["settings"]] == [True, True, False, False, True, True]
    assert small["reference"] == "all" and small["fastest"] == "all_fp32_seqs_16"  # the reference: first in SETTINGS
    assert small["fastest_speedup_vs_reference"] == 1.33
    assert full["same_request_set_everywhere"] and rep["machine"]["shared"]
    assert full["per_stage"] == {ent: {"wall_s": {"auto": 150.0, "all": 100.0}, "fastest": "all",
                                       "speedup_vs_reference": {"auto": 1.0, "all": 1.5}}}
    rows[1]["request_set"] = "b"
    assert not bench.summarize(rows, ["cmd"], 1.0)["groups"]["full"]["same_request_set_everywhere"]


def test_wait_for_load_returns_at_once_when_asked_not_to_wait_or_the_machine_is_calm():
    assert bench.wait_for_load(None, 60) < 1
    assert bench.wait_for_load(1e9, 60) < 1


def test_a_stopped_setting_keeps_the_stages_its_log_shows():
    log = ("noise\n[engine_settings] all extract_entities: " + '{"requests": 2, "wall_s": 50.0, "prompt_tokens": 100, '
           '"completion_tokens": 10, "ok": 2, "cut_at_max_tokens": 0, "errors": []}\n'
           "[engine_settings] other extract_facts: {\"requests\": 1}\n")
    row = bench.stopped_row("all", "small", log, "stopped for time")
    assert row["stages_run"] == ["extract_entities"] and row["wall_s"] == 50.0 and row["ok"] == row["requests"] == 2
    assert row["stopped"] == "stopped for time" and "error" not in row
    assert "error" in bench.stopped_row("all", "small", "no stage finished", "exit -9")


def test_a_settings_report_keeps_the_make_run_timing(tmp_path, monkeypatch):
    out = tmp_path / "es.json"
    monkeypatch.setattr(bench, "quickstart_wall", lambda binds, work: [
        {"cpu_threads_bind": b, "wall_s": w, "exit": 0} for b, w in zip(binds, (300.0, 200.0))])
    monkeypatch.setattr(sys, "argv", ["engine_settings.py", "--quickstart", "auto,all", "--out", str(out)])
    bench.main()
    made = json.loads(out.read_text())["make_run"]
    assert made["wall_s"] == {"auto": 300.0, "all": 200.0} and made["all_vs_auto"] == 1.5
    bench.write_report(out, {"settings": []}, json.loads(out.read_text()))
    assert json.loads(out.read_text())["make_run"] == made


def test_a_setting_that_ran_no_stage_is_not_valid():
    rep = bench.summarize([_row("auto", {"extract_entities": 10.0}), _row("auto_fp32", {})], ["cmd"], 1.0)
    assert [r["valid"] for r in rep["settings"]] == [True, False] and rep["groups"]["full"]["fastest"] == "auto"
