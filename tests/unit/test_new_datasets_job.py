"""``mnemis run`` on BEAM and LoCoMo-Plus fixture slices: every in-process method, both modes, graded scoring in
the report (schema-fake LLM and hashing embedder: plumbing, not quality)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"


def _run(tmp_path: Path, *overrides: str) -> Path:
    cmd = [sys.executable, "-m", "mnemis.app.cli", "run", "llm=schema_fake", "embedder=hashing", "reranker=cosine",
           "preflight=false", f"paths.artifacts_dir={tmp_path}/artifacts", f"paths.cache_dir={tmp_path}/cache",
           f"hydra.run.dir={tmp_path}/run", *overrides]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp_path / "run"


def test_beam_every_method(tmp_path):
    run = _run(tmp_path, "dataset=beam", "dataset.scale=100K", f"dataset.path={FIX}/beam/100K",
               "methods=[mnemis,rag,full_context,mem0,mem0g]")
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics) == {"mnemis", "rag", "full_context", "mem0", "mem0g"}
    rows = [json.loads(line) for line in (run / "questions.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * 20 and all(r["scores"] for r in rows)  # graded: every BEAM question has a score
    eo = next(r for r in rows if r["category"] == "event_ordering")
    assert {"tau_norm", "f1", "rubric_mean"} <= set(eo["score_details"]["main"])
    table = metrics["mnemis"]["judges"]["main"]["raw"]
    assert len(table["by_category"]) == 10 and table["overall"]["ci_unit"] == "group"
    report = (run / "report.md").read_text()
    assert "## Graded scores: parts per category" in report and "Graded judges' controls" in report
    assert json.loads((run / "graded_leniency.json").read_text())["judges"]["main"]["vague"]["n"] > 0
    assert json.loads((run / "config.json").read_text())["dataset"]["scale"] == "100K"
    # the CPU-quality summariser (what experiments/bench/cpu_quality.py --experiment beam_cpu_small writes) reads a BEAM run
    from mnemis.testing.bench_runs import summarize

    summary = summarize(run)
    assert set(summary["accuracy"]) == set(metrics) and "summarization" in summary["accuracy"]["mnemis"]


def test_beam_experiments_compose():
    from mnemis.config import compose, to_plain

    quick = to_plain(compose(["experiment=beam_quickstart"]))
    assert quick["dataset"]["name"] == "beam" and quick["dataset"]["slice"]["episodes"] == [1, 2]
    assert quick["dataset"]["slice"]["groups"] == ["beam-100K-12"] and quick["dataset"]["slice"]["sessions"] is None
    assert "graded" in quick["judge"] and quick["llm"]["backend"]["model"].startswith("smollm2")
    small = to_plain(compose(["experiment=beam_cpu_small"]))
    assert small["dataset"]["slice"]["groups"] == ["beam-100K-14"] and small["dataset"]["slice"]["episodes"] == [1, 14]
    assert small["methods"] == ["mnemis", "rag", "full_context"] and "1.5b" in small["llm"]["backend"]["model"]


def test_locomo_plus_paper_mode(tmp_path):
    lp = FIX / "locomo_plus"
    run = _run(tmp_path, "dataset=locomo_plus", f"dataset.path={lp}/locomo_plus_mini.json",
               f"dataset.locomo_path={lp}/locomo_mini.json", "mode=paper", "judge_llms.paper=${llm}",
               "judge.longmemeval_format=reasoned", "judge.leniency.enabled=false",
               "judge.audit=false", "methods=[mnemis,full_context]",
               "ingest.builder=mnemis")  # the scripted model behind our builder (graphiti-core needs a server)
    rows = [json.loads(line) for line in (run / "questions.jsonl").read_text().splitlines()]
    cats = {r["category"] for r in rows}
    assert cats == {"single-hop", "adversarial", "cognitive"} and len(rows) == 2 * 6
    cog = [r for r in rows if r["category"] == "cognitive"]
    assert all(r["scores"] for r in cog) and not any(r["scores"] for r in rows if r["category"] != "cognitive")
    assert json.loads((run / "config.json").read_text())["dataset"]["seed"] == 0
