"""``mnemis compare``: jobs found under run / multirun dirs, swept keys as columns, table + JSON + plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnemis.app.cli import main
from mnemis.app.compare import compare, find_jobs, write_compare


def _job(d: Path, k: int, acc: float, overrides: list[str] | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"retrieval": {"k": k, "rrf_k": 60}, "paths": {"cache_dir": str(d)},
                                               "seed": 0}))
    (d / "metrics.json").write_text(json.dumps({"mnemis": {"headline_judge": "main", "judges": {"main": {"raw": {
        "overall": {"accuracy": acc, "total": 20, "ci": [acc - 0.1, acc + 0.1]}}}},
        "answer_scores": {"overall": {"f1": acc / 2}}}}))
    (d / "recall.json").write_text(json.dumps({"mnemis/fused": {"overall": {"direct": 0.5}}}))
    (d / "ledger.json").write_text(json.dumps({"stages": {}, "total": {"prompt_tokens": 1000 * k, "calls": k}}))
    if overrides is not None:
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return d


def test_run_dirs_compare_on_the_config_keys_that_differ(tmp_path):
    a, b = _job(tmp_path / "a", 5, 0.5), _job(tmp_path / "b", 10, 0.7)
    res = compare([a, b])
    assert res["swept_keys"] == ["retrieval.k"]  # paths differ too, but file locations never count
    assert [(r["retrieval.k"], r["accuracy"], r["prompt_tokens"]) for r in res["rows"]] == [(5, 0.5, 5000),
                                                                                             (10, 0.7, 10000)]
    md = write_compare([a, b], tmp_path / "out")
    table = md.read_text()
    assert "| a | 5 | mnemis | 50.0 | 40.0–60.0 | 20 | 0.250 | 50.0 | 5000 |" in table
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["jobs"] == [str(a), str(b)]


def test_a_multirun_dir_uses_the_sweep_overrides_in_job_order(tmp_path):
    sweep = tmp_path / "sweep"
    for n in (0, 1, 10, 2):  # numeric job order, not string order
        _job(sweep / str(n), 5 + n, 0.1 * n, overrides=["experiment=quickstart", f"retrieval.k={5 + n}"])
    (sweep / "multirun.yaml").write_text("{}")
    assert [p.name for p in find_jobs([sweep])] == ["0", "1", "2", "10"]
    md = write_compare([sweep])  # out defaults to the sweep dir
    assert md == sweep / "compare.md"
    assert "| job | retrieval.k | method |" in md.read_text() and "| 10 | 15 | mnemis |" in md.read_text()


def test_cli_and_its_errors(tmp_path, capsys):
    a = _job(tmp_path / "runs" / "a", 5, 0.5)
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(a), f"out={tmp_path / 'cmp'}"])
    assert exc.value.code == 0 and "| a | mnemis |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no job directory"):
        main(["compare", str(tmp_path / "cmp")])
    with pytest.raises(SystemExit, match="is not a directory"):
        main(["compare", str(tmp_path / "nope")])
