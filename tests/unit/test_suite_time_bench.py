"""experiments/bench/suite_time.py: it reads each pass's pytest summary, times ``make setup`` and ``make test``
apart and returns the make exit code (run here with a stand-in ``make`` on PATH, never the real suite)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.helpers.bench import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("suite_time")


def test_summaries_are_read_in_order_with_every_count(bench):
    out = ("....s. [100%]\n1068 passed, 19 skipped in 267.62s (0:04:27)\nnoise 3 passed in the text\n"
           "===== 1 failed, 17 passed, 1100 deselected in 420.23s (0:07:00) =====\n")
    assert bench.pytest_summaries(out) == [
        {"passed": 1068, "skipped": 19, "seconds": 267.62},
        {"failed": 1, "passed": 17, "deselected": 1100, "seconds": 420.23},
    ]
    assert bench.pytest_summaries("no summary here") == []


def _fake_make(folder: Path, test_exit: int) -> None:
    script = folder / "make"
    script.write_text("#!/bin/sh\n"
                      'if [ "$1" = setup ]; then echo "environment ready"; exit 0; fi\n'
                      'echo "10 passed, 2 skipped in 1.50s (0:00:01)"\n'
                      'echo "3 passed, 1 failed, 12 deselected in 2.25s (0:00:02)" >&2\n'
                      f"exit {test_exit}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("test_exit", [0, 2])
def test_a_run_writes_both_passes_and_returns_makes_exit_code(bench, tmp_path, monkeypatch, test_exit):
    _fake_make(tmp_path, test_exit)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    out, log = tmp_path / "t.json", tmp_path / "t.log"
    assert bench.main(["--out", str(out), "--log", str(log)]) == test_exit
    saved = json.loads(out.read_text())
    assert saved["exit_code"] == test_exit and saved["cpus"] == os.cpu_count()
    unit, real = bench.PASSES
    assert saved["passes"][unit] == {"passed": 10, "skipped": 2, "seconds": 1.5}
    assert saved["passes"][real] == {"passed": 3, "failed": 1, "deselected": 12, "seconds": 2.25}
    assert saved["make_test_s"] >= 0 and saved["make_setup_s"] >= 0 and "10 passed" in log.read_text()
    assert saved["log"] == str(log)  # outside the repo: as given


def test_a_log_inside_the_repo_is_recorded_relative_to_it(bench):
    assert bench.repo_relative(bench.REPO / "runs" / "suite_time.log") == "runs/suite_time.log"
