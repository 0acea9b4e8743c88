"""A sharded run through the Ray launcher on a real local Ray (2 CPUs, a custom resource standing in for GPUs),
with one worker killed mid-run: Ray reruns its task, the shard resumes, and the merged figures equal the
one-process run's (experiments/bench/scale_launchers.py, at a tiny size)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")]


def test_ray_sweep_with_a_killed_worker_equals_one_process(tmp_path):
    sys.path.insert(0, str(REPO / "experiments" / "bench"))
    try:
        from scale_launchers import run_all
    finally:
        sys.path.remove(str(REPO / "experiments" / "bench"))
    from mnemis.testing.synth import SynthSpec

    spec = SynthSpec(groups=4, sessions_per_haystack=2, pool_size=3, turns_per_session=4, words_per_turn=10)
    result = run_all(spec, tmp_path, kill_after=6, only=("ray_2_killed",), replay=False)
    run = result["runs"]["ray_2_killed"]
    assert run["kill"]["killed"] and run["kill"]["batches_before_kill"] >= 6
    assert run["kill"]["worker_pids_seen"] >= 3  # the two workers and the one Ray started for the rerun
    assert run["differs_in"] == [] and run["identical_to_one_process"]
    assert run["shards"] == {"n_shards": 2, "groups": 4, "manifests": 2}
    assert (tmp_path / "ray_2_killed" / "sweep" / "merged" / "cache_archive.jsonl.gz").is_file()
