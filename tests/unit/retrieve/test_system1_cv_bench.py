"""experiments/bench/system1_cv.py: the grid holds the paper's and the previous settings, and its fusion
is System-1's RRF (same ranks, same ties)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "experiments" / "bench"))
spec = importlib.util.spec_from_file_location("system1_cv", REPO / "experiments" / "bench" / "system1_cv.py")
cv = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = cv
spec.loader.exec_module(cv)


def test_grid_starts_with_the_paper_and_holds_the_previous_default():
    points = cv.grid()
    assert cv.PAPER in points and cv.PREVIOUS_DEFAULT in points
    assert len(points) == len(cv.recipes()) * len(cv.ANALYZERS) * 2 * len(cv.RRF_KS) * len(cv.BM25_WEIGHTS)


def test_fuse_is_weighted_reciprocal_rank():
    cos, bm = ["a", "b", "c"], ["c", "d"]
    assert cv.fuse(cos, bm, 0, 1.0) == ["c", "a", "b", "d"]  # c: 1/3 + 1, a: 1, b: 1/2, d: 1/2 (later list)
    assert cv.fuse(cos, bm, 10, 3.0)[0] == "c"  # 1/13 + 3/11 beats 1/11
    assert cv.fuse(cos, bm, 0, 1.0, limit=2) == ["c", "a"]
