"""Typed settings read once at the edge: every shipped config validates, every bad key is reported at once with
its path, a plain dict works in a notebook, and System-1 and the fuser share one graph factor."""

from __future__ import annotations

import pytest

from mnemis.config import CONF_DIR, compose, to_plain
from mnemis.memory import Memory, memory_settings
from mnemis.settings import MemorySettings, RunSettings, SettingsError, check_target, instantiate, load_settings

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def _settings(*overrides: str) -> RunSettings:
    return load_settings(to_plain(compose(list(overrides))))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_shipped_experiment_validates(experiment):
    s = _settings(f"experiment={experiment}")
    assert s.retrieval.k >= 1 and s.answer.max_tokens >= 1


def test_the_many_hour_cpu_run_commits_its_replies_in_small_chunks():
    # conv-26 on 2 cores: a stage of 419 paper-mode extraction prompts sent as one chunk would keep nothing
    # from hours of prefill if the run stopped before the chunk ended
    assert _settings("experiment=cpu_conv26").llm_chunk_size <= 32
    assert _settings("experiment=cpu_small").llm_chunk_size > 32   # a short slice keeps one chunk per stage


def test_every_problem_is_reported_at_once_with_its_path():
    with pytest.raises(SettingsError) as err:
        _settings("+retrievel.k=3", "retrieval.system2.max_rounds=many", "answer.max_tokens=0",
                  "+llm.temperture=0.2", "+ingest.context_windw=4", "+hierarchy.max_layer=3",
                  "judge.longmemeval_format=short")
    problems = "\n".join(err.value.problems)
    for expected in ("retrievel: unknown key", "retrieval.system2.max_rounds: Input should be a valid integer",
                     "answer.max_tokens: Input should be greater than or equal to 1",
                     "llm.temperture: unknown key for mnemis.models.llm.client.LLM",
                     "ingest.context_windw: unknown key for mnemis.ingest.builders.make_builder",
                     "hierarchy.max_layer: unknown key for mnemis.hierarchy.HierarchyConfig",
                     "judge.longmemeval_format: Input should be 'reasoned' or 'yes_no'"):
        assert expected in problems, expected
    assert len(err.value.problems) == 7


def test_a_target_that_cannot_be_imported_is_named():
    assert check_target({"_target_": "mnemis.models.nothing.Here", "x": 1}, "embedder") == \
        ["embedder._target_: cannot import 'mnemis.models.nothing.Here' (No module named 'mnemis.models.nothing')"]
    assert check_target({"_target_": "mnemis.models.embed.HashingEmbedder", "dim": 8}, "embedder") == []
    assert instantiate({"_target_": "mnemis.models.embed.HashingEmbedder", "dim": 8}).dim == 8


def test_the_cli_stops_on_bad_keys_before_any_model_loads(tmp_path):
    from mnemis.app.jobs import run_command

    cfg = compose(["experiment=quickstart", "+retrieval.system2.entity_rond=true", "answer.temperature=-1",
                   f"paths.artifacts_dir={tmp_path}/a", f"paths.cache_dir={tmp_path}/c"])
    with pytest.raises(SystemExit, match=r"2 configuration problem") as err:
        run_command(cfg, tmp_path / "run")
    assert "retrieval.system2.entity_rond: unknown key" in str(err.value)
    assert "answer.temperature: Input should be greater than or equal to 0" in str(err.value)
    assert not (tmp_path / "a").exists()


def test_memory_from_a_plain_dict(tmp_path):
    mem = Memory.from_config({"experiment": "quickstart", "retrieval": {"k": 3}, "embedder": {
        "_target_": "mnemis.models.embed.HashingEmbedder", "dim": 16}}, path=tmp_path / "m.db")
    with mem:
        assert isinstance(mem.settings, MemorySettings) and mem.settings.retrieval.k == 3
        assert mem.settings.retrieval.system1.k == 10  # interpolations were resolved before the merge
    with pytest.raises(SettingsError, match="retreival: unknown key"):
        Memory.from_config({"retreival": {"k": 3}})
    with pytest.raises(TypeError, match="list of overrides or a dict"):
        Memory.from_config("experiment=quickstart")


def test_memory_settings_from_every_form():
    run = _settings("experiment=quickstart")
    cfg = compose(["experiment=quickstart"])
    assert memory_settings(run) == memory_settings(cfg) == memory_settings(to_plain(cfg)) == run.memory()


def test_system1_and_the_fuser_share_one_graph_factor(tmp_path):
    from mnemis.models.embed import HashingEmbedder
    from mnemis.retrieve.system1 import System1
    from mnemis.store.sqlite import GraphStore

    s = _settings("retrieval.fusion.graph_factor=3")
    assert s.retrieval.system1.graph_factor == 3 == s.retrieval.fusion.graph_factor
    with GraphStore(tmp_path / "m.db") as store:
        s1 = System1(store, HashingEmbedder(16), **s.retrieval.system1.kwargs())
        assert (s1.budget("episode"), s1.budget("fact"), s1.budget("entity")) == (10, 30, 30)


def test_rag_uses_the_runs_system1_settings(tmp_path, monkeypatch):
    import mnemis.retrieve.system1 as system1_module
    from mnemis.baselines.rag import rag_contexts

    seen = {}

    class Recorder:
        def __init__(self, store, embedder, **kw):
            seen.update(kw)

        def search(self, questions):
            return []

    monkeypatch.setattr(system1_module, "System1", Recorder)
    s = _settings("retrieval.k=7", "retrieval.system1.rrf_k=3")
    rag_contexts(None, None, [], s.retrieval.system1)
    assert seen["routes"] == "rag" and seen["k"] == 7 and seen["rrf_k"] == 3.0 and seen["graph_factor"] == 2


def test_the_dataset_and_tracker_sections_are_records_of_their_name():
    """One record per dataset and tracker (their keys only): a key of another dataset, a bad value or an unknown
    name is reported with its path, not the union's tag."""
    s = _settings("dataset=beam", "tracker=wandb")
    assert (s.dataset.name, s.dataset.scale, s.tracker.name, s.tracker.mode) == ("beam", "100K", "wandb", "offline")
    assert _settings("dataset=locomo_plus").dataset.include_locomo is True
    with pytest.raises(SettingsError) as err:
        _settings("dataset=beam", "+dataset.slice.bad=1", "dataset.unknown_types=zz", "tracker=wandb",
                  "tracker.mode=sometimes", "+dataset.include_locomo=false")
    assert sorted(err.value.problems) == [
        "dataset.include_locomo: unknown key", "dataset.slice.bad: unknown key",
        "dataset.unknown_types: Input should be 'error' or 'keep'",
        "tracker.mode: Input should be 'offline', 'online' or 'disabled'"]
    with pytest.raises(SettingsError, match=r"dataset: Input tag 'lme' found using 'name' does not match any of the "
                                            r"expected tags: 'locomo', 'longmemeval'"):
        _settings("dataset.name=lme")
    with pytest.raises(SettingsError, match=r"mem0g\.graph_kind: Input should be 'triples' or 'graphiti'"):
        _settings("mem0g.graph_kind=neo4j")
