"""The CLI around the Hydra app: --version, help, --info, unknown commands, eval on a memory never built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.app.cli import _split, main

REPO = Path(__file__).resolve().parents[2]


def test_version_and_usage(capsys):
    from mnemis import __version__

    main(["--version"])
    assert capsys.readouterr().out.strip() == f"mnemis {__version__}"
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unknown command 'evaluate'" in err
    assert all(c in err for c in ("data", "models", "doctor", "examples:"))


def test_split_keeps_info_and_its_value_apart_from_overrides():
    assert _split(["--info", "experiment=quickstart"]) == (["--info"], ["experiment=quickstart"])
    assert _split(["--info", "defaults", "x=1"]) == (["--info", "defaults"], ["x=1"])
    assert _split(["-m", "--cfg", "job", "-p", "retrieval", "k=1"]) == (["-m", "--cfg", "job", "-p", "retrieval"], ["k=1"])


def _mnemis(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mnemis.app.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)


def test_help_lists_groups_options_and_examples(tmp_path):
    res = _mnemis(tmp_path, "run", "--help")
    assert res.returncode == 0 and "powered by Hydra" not in res.stdout
    assert "experiment: " in res.stdout and "paper_locomo_k10" in res.stdout and "Examples:" in res.stdout
    info = _mnemis(tmp_path, "run", "--info", "defaults")
    assert info.returncode == 0 and "Defaults List" in info.stdout, info.stderr


def test_eval_on_a_memory_never_built_names_the_build(tmp_path, locomo_path):
    res = _mnemis(tmp_path, "eval", "experiment=quickstart", "llm=schema_fake", "embedder=hashing",
                  "reranker=cosine", f"paths.artifacts_dir={tmp_path}/artifacts", f"paths.cache_dir={tmp_path}/c",
                  f"paths.shared_data_dir={locomo_path.parent}", f"hydra.run.dir={tmp_path}/run")
    assert res.returncode != 0
    assert "no memory at" in res.stderr and "build address" in res.stderr and "mnemis build" in res.stderr
    assert not (tmp_path / "artifacts").exists() or not any((tmp_path / "artifacts").rglob("*.sqlite*"))
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert {"git", "versions", "cpu", "cuda", "gpus"} <= set(prov) and "torch" in prov["versions"]


def test_jsonl_tracker_follows_the_build(tmp_path, locomo_path):
    res = _mnemis(tmp_path, "build", "experiment=quickstart", "llm=schema_fake", "embedder=hashing",
                  "reranker=cosine", "methods=[mnemis]", "tracker=jsonl", "tracker.run_name=b1", "tracker.group=g",
                  f"paths.artifacts_dir={tmp_path}/artifacts", f"paths.cache_dir={tmp_path}/c",
                  f"paths.shared_data_dir={locomo_path.parent}", f"hydra.run.dir={tmp_path}/run")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "tracker.jsonl").read_text().splitlines()]
    assert rows[0]["event"] == "config" and rows[-1]["event"] == "finish" and rows[0]["run_name"] == "b1"
    keys = {k for r in rows if r["event"] == "metrics" for k in r["metrics"]}
    assert any(k.startswith("progress/extract_entities/") for k in keys)  # stage progress during the build
    assert any(k.startswith("build/ledger/stages/extract_entities/") for k in keys)  # and the ledger after it
    assert "extract_entities 18/18 (100%)" in res.stdout + res.stderr  # the plain progress line (no TTY)
