"""The arithmetic of experiments/bench/beam_scale.py's estimate table (the measured inputs are its run's)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "beam_scale.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("beam_scale", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_per_episode_interpolates_between_the_measured_points(bench):
    pts = [{"tokens_per_message": 20, "build_prompt_tokens_per_episode": 1000, "hierarchy_prompt_tokens_per_episode": 100},
           {"tokens_per_message": 620, "build_prompt_tokens_per_episode": 4000, "hierarchy_prompt_tokens_per_episode": 100}]
    assert bench.per_episode(pts, 20) == 1100 and bench.per_episode(pts, 620) == 4100
    assert bench.per_episode(pts, 320) == pytest.approx(2600)


def test_row_hours_and_array_rounds(bench):
    a = {"h200_prefill_tokens_per_s": 1000.0, "h200_decode_tokens_per_s": 100.0, "array_gpus": 8.0}
    row = bench._row("X", 10, 1000, 10, 3600.0, 0.0, 0.1, a)
    # 3.6M prompt tokens at 1000/s = 1 h; 360k completion tokens at 100/s = 1 h
    assert row["prompt tokens (estimate)"] == 3_600_000 and row["one H200, hours (estimate)"] == 2.0
    assert row["array of 8 H200, hours (estimate)"] == pytest.approx(2.0 / 10 * 2, abs=0.05)  # 10 groups: 2 rounds
    assert bench.peak_rss_mb() > 0
