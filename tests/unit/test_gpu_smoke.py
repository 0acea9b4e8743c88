"""experiments/bench/gpu_smoke.sh fits a lent GPU: its own timeouts end it within 8 minutes, engine starts
included; without CUDA it measures nothing and says what needs a GPU; the docs say "needs GPU" until its JSON
exists."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "experiments" / "bench" / "gpu_smoke.sh"
LIMIT_S = 480


def _commands() -> list[str]:
    return [ln for ln in SMOKE.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_timeouts_sum_to_at_most_eight_minutes():
    timeouts = [int(t) for ln in _commands() for t in re.findall(r"\btimeout (\d+)\b", ln)]
    assert len(timeouts) >= 5, timeouts  # tests, kernel timing, LLM, reranker, merge
    assert sum(timeouts) <= LIMIT_S, f"gpu_smoke.sh timeouts add up to {sum(timeouts)} s > {LIMIT_S} s"
    # every command that runs Python on the GPU is under a timeout
    unbounded = [ln for ln in _commands() if re.search(r'"\$PY" (-m pytest|experiments/)', ln)
                 and "timeout" not in ln and "--collect-only" not in ln]
    assert not unbounded, unbounded
    # a part's own budget ends its measuring before the shell's timeout kills it
    for ln in _commands():
        if m := re.search(r"timeout (\d+) .*--budget (\d+)", ln):
            assert int(m.group(2)) < int(m.group(1)), ln


def test_shell_syntax():
    subprocess.run(["bash", "-n", str(SMOKE)], check=True)


def test_without_cuda_it_measures_nothing_and_exits_0(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run(["bash", str(SMOKE), str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "No CUDA device" in res.stdout and "gpu_smoke.py llm" in res.stdout
    assert not (tmp_path / "gpu_smoke.json").exists()


def test_merge_records_a_part_that_did_not_finish(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "llm.json").write_text(json.dumps({"extraction": {"prompt_tokens_per_s": 1.0}}))
    res = subprocess.run([sys.executable, str(REPO / "experiments/bench/gpu_smoke.py"), "merge", "--parts", str(parts),
                          "--out", str(tmp_path / "gpu_smoke.json")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert doc["llm"]["extraction"]["prompt_tokens_per_s"] == 1.0
    assert "did not finish" in doc["rerank"]["missing"] and "did not finish" in doc["kernel_and_faiss"]["missing"]


def test_the_docs_say_needs_gpu_until_the_smoke_has_run():
    section = (REPO / "docs" / "gpu_plans.md").read_text().split("## Measured rates", 1)[1]
    measured = REPO / "experiments" / "results" / "gpu_smoke.json"
    if not measured.is_file():
        assert "needs GPU" in section
    else:
        doc = json.loads(measured.read_text())
        assert f"{doc['llm']['extraction']['prompt_tokens_per_s']:,.0f}" in section
