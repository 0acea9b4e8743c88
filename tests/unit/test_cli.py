from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mnemis.config import compose
from mnemis.types import entity_id, fact_id

REPO = Path(__file__).resolve().parents[2]


def _mnemis(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    shared = REPO.parent / "shared" / "data"
    cmd = [sys.executable, "-m", "mnemis.app.cli", *args, f"paths.artifacts_dir={tmp_path}/artifacts",
           f"paths.shared_data_dir={shared}", f"hydra.run.dir={tmp_path}/run"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_ids_are_deterministic():
    assert entity_id("g", "Melanie") == entity_id("g", "  melanie ") != entity_id("h", "Melanie")
    assert fact_id("g", "g:D1:1", 0) != fact_id("g", "g:D1:1", 1)


def test_compose_defaults_and_quickstart():
    cfg = compose(["experiment=quickstart"])
    assert cfg.dataset.name == "locomo" and list(cfg.dataset.slice.groups) == ["conv-26"]
    assert cfg.cache_mode == "readwrite" and cfg.run_name == "quickstart"
    assert list(cfg.methods) == ["mnemis", "rag", "full_context"]


def test_build_twice_is_idempotent(tmp_path, locomo_path):
    first = _mnemis(tmp_path, "build", "experiment=quickstart", "methods=[full_context]")
    assert first.returncode == 0, first.stderr
    assert "18 episodes" in first.stdout
    second = _mnemis(tmp_path, "build", "experiment=quickstart", "methods=[full_context]")
    assert second.returncode == 0, second.stderr
    summary = json.loads((tmp_path / "run" / "build_summary.json").read_text())
    assert summary["store_counts"]["conv-26"]["episodes"] == 18
    assert len(list((tmp_path / "artifacts").iterdir())) == 1  # same config hash, same memory


def test_unknown_command_and_bad_slice(tmp_path, locomo_path):
    bad = subprocess.run([sys.executable, "-m", "mnemis.app.cli", "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: mnemis" in bad.stderr
    res = _mnemis(tmp_path, "build", "dataset.slice.groups=[conv-999]")
    assert res.returncode != 0 and "conv-999" in res.stderr


def test_report_needs_a_run_dir(tmp_path):
    res = _mnemis(tmp_path, "report", f"run_dir={tmp_path}/nope")
    assert res.returncode != 0 and "is not a run directory" in res.stderr


def test_unknown_method_is_refused(tmp_path, locomo_path):
    res = _mnemis(tmp_path, "eval", "experiment=quickstart", "methods=[telepathy]")
    assert res.returncode != 0 and "telepathy" in res.stderr


def test_a_role_that_cannot_work_is_a_one_line_exit(tmp_path):
    """The library raises RoleError (mnemis.roles); the CLI turns it into one line naming the command and the key,
    before any model loads."""
    res = _mnemis(tmp_path, "eval", "experiment=quickstart", "judge.judges=[main,main]")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "mnemis eval: judge.judges[1] (main): duplicate judge name" in res.stderr
