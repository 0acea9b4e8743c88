"""Shard specs and assignment: every group in exactly one shard, balanced, deterministic; clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemis.data.errors import DataError
from mnemis.data.longmemeval import load_longmemeval
from mnemis.data.shard import (
    ShardSpecError,
    parse_shard,
    restrict_dataset,
    shard_groups,
    shard_specs,
    shard_tag,
    sharded_address,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_mini.json"


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=60),
       n=st.integers(min_value=1, max_value=12), seed=st.randoms())
def test_every_group_in_exactly_one_shard(groups, n, seed):
    shards = [shard_groups(groups, i, n) for i in range(n)]
    flat = [g for s in shards for g in s]
    assert sorted(flat) == sorted(groups) and len(flat) == len(set(flat))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1  # balanced to within one group
    for s in shards:  # original order is kept inside a shard
        assert s == [g for g in groups if g in set(s)]
    shuffled = list(groups)
    seed.shuffle(shuffled)
    assert [sorted(shard_groups(shuffled, i, n)) for i in range(n)] == [sorted(s) for s in shards]


@pytest.mark.parametrize("spec,want", [("0/1", (0, 1)), ("3/8", (3, 8)), (" 7 / 8 ", (7, 8)), ([1, 2], (1, 2)),
                                       (None, None), ("", None)])
def test_parse_valid(spec, want):
    assert parse_shard(spec) == want


@pytest.mark.parametrize("spec,words", [("8/8", "out of range"), ("-1/4", "out of range"), ("1/0", ">= 1"),
                                        ("abc", "malformed"), ("1/2/3", "malformed"), ("1-of-2", "malformed"),
                                        (3, "malformed"), ([1, 2, 3], "malformed"), ("1.5/2", "malformed")])
def test_parse_errors_are_clear(spec, words):
    with pytest.raises(ShardSpecError) as err:
        parse_shard(spec)
    assert words in str(err.value) and "shard" in str(err.value)
    assert isinstance(err.value, DataError)  # the CLI turns DataError into a one-line exit message


def test_restrict_dataset_partitions_episodes_and_questions():
    data = load_longmemeval(FIXTURE)
    parts = [restrict_dataset(data, s) for s in shard_specs(2)]
    assert sorted(g for p in parts for g in p.groups) == sorted(data.groups)
    assert sum(len(p.episodes) for p in parts) == len(data.episodes)
    assert sum(len(p.questions) for p in parts) == len(data.questions)
    for p in parts:
        assert {e.group_id for e in p.episodes} <= set(p.groups) and {q.group_id for q in p.questions} <= set(p.groups)
    assert restrict_dataset(data, None) is data
    empty = restrict_dataset(data, "4/5")  # more shards than groups: an empty shard, not an error
    assert empty.groups == [] and empty.episodes == []


def test_tags_and_addresses():
    assert shard_tag("2/8") == "shard-2-of-8" and shard_tag(None) == ""
    assert sharded_address("abc", "1/4") == "abc-shard-1-of-4"
    assert sharded_address("abc", None) == "abc"
    assert shard_specs(3) == ["0/3", "1/3", "2/3"]
    with pytest.raises(ShardSpecError):
        shard_specs(0)


def test_sharded_experiment_composes_with_a_shard_override():
    from hydra import compose, initialize_config_dir

    from mnemis.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=lme_s_sharded", "shard=3/8"],
                      return_hydra_config=True)
        assert parse_shard(cfg.shard) == (3, 8) and cfg.dataset.name == "longmemeval"
        sweep = str(cfg.hydra.sweeper.params.shard).split(",")
        assert sweep == shard_specs(8)
        assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2
        slurm = compose(config_name="config", overrides=["experiment=lme_s_sharded", "hydra/launcher=slurm",
                                                         "hydra.launcher.gpus_per_node=4"], return_hydra_config=True)
        launcher = slurm.hydra.launcher
        assert launcher._target_.endswith("SlurmLauncher") and launcher.gpus_per_node == 4
        for key in ("partition", "timeout_min", "cpus_per_task", "mem_gb"):
            assert launcher[key] is not None


@pytest.mark.parametrize("llm,gpus", [("smollm2_vllm_cpu", 0), ("qwen3_8b_vllm", 1), ("qwen3_32b_vllm_tp4", 4)])
def test_ray_launcher_asks_each_job_for_the_engines_gpus(llm, gpus):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from mnemis.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["experiment=lme_s_sharded", "hydra/launcher=ray", f"llm={llm}",
                                 "++hydra.launcher.resources.h200=1"])
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"] == "hydra_plugins.mnemis_ray_launcher.ray_launcher.RayLauncher"
    assert launcher["num_gpus"] == gpus and launcher["resources"] == {"h200": 1} and launcher["max_retries"] >= 1
    from hydra_plugins.mnemis_ray_launcher.ray_launcher import RayLauncher

    RayLauncher(**{k: v for k, v in launcher.items() if k != "_target_"})  # every key is an argument


def test_ray_launcher_refuses_a_job_bigger_than_a_local_ray():
    from hydra_plugins.mnemis_ray_launcher.ray_launcher import check_resources

    check_resources({"CPU": 16.0, "GPU": 8.0}, {"CPU": 1, "GPU": 4, "h200": 0}, local=True)
    with pytest.raises(RuntimeError, match=r"GPU=4 \(the cluster has 0\)"):
        check_resources({"CPU": 2.0}, {"CPU": 1, "GPU": 4}, local=True)
    check_resources({"CPU": 2.0}, {"CPU": 1, "GPU": 4}, local=False)  # a cluster may scale up: only a warning
