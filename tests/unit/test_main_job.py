"""The main job end to end with a schema-fake LLM and the hashing embedder (plumbing, not quality)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRACTION = {"extract_entities", "reflect_entities", "extract_facts", "reflect_facts", "resolve_entities",
              "dedup_facts", "entity_attributes", "hierarchy.categorize", "hierarchy.reask", "hierarchy.describe"}


def test_sweep_over_retrieval_reuses_the_memory(tmp_path, locomo_path):
    cmd = [
        sys.executable, "-m", "mnemis.app.cli", "run", "-m", "experiment=quickstart", "llm=schema_fake",
        "embedder=hashing", "reranker=cosine", "retrieval.k=5,10", "judge.leniency.enabled=false",
        "methods=[mnemis,rag,full_context,mem0]",
        "retrieval.fusion.scorer=reranker",  # the paper's fusion, so the reranker's disk cache is exercised below
        f"paths.artifacts_dir={tmp_path}/artifacts", f"paths.cache_dir={tmp_path}/cache",
        f"paths.shared_data_dir={locomo_path.parent}", f"hydra.sweep.dir={tmp_path}/sweep",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    first, second = tmp_path / "sweep" / "0", tmp_path / "sweep" / "1"
    ledger1 = json.loads((first / "ledger.json").read_text())["stages"]
    ledger2 = json.loads((second / "ledger.json").read_text())["stages"]
    assert EXTRACTION & {s for s, v in ledger1.items() if v["calls"]}, "the first job must build the memory"
    assert not EXTRACTION & {s for s, v in ledger2.items() if v["calls"]}, ledger2  # zero extraction calls
    assert json.loads((second / "build_summary.json").read_text())["stages"]["base_graph"] == "reused"
    for job in (first, second):
        metrics = json.loads((job / "metrics.json").read_text())
        assert set(metrics) == {"mnemis", "rag", "full_context", "mem0"}  # one report, every method
        report = (job / "report.md").read_text()
        assert all(f"| {m} |" in report for m in metrics)  # a table row for every method
        rows = [json.loads(line) for line in (job / "questions.jsonl").read_text().splitlines()]
        assert len(rows) == 4 * 4  # 4 methods x the 4 quickstart questions
        recall = json.loads((job / "recall.json").read_text())
        assert {"rag", "mnemis/system1", "mnemis/system2", "mnemis/fused"} <= set(recall)
        assert {"direct", "reachable", "recall@5", "recall@10", "mrr"} <= set(recall["rag"]["overall"])
        assert (job / "recall.png").stat().st_size > 0 and "recall.png" in (job / "report.md").read_text()
        page = (job / "report.html").read_text()  # the explorer, with the store's names and evidence turns
        assert all(r["question"] in page for r in rows) and "Caroline" in page
    assert json.loads((first / "config.json").read_text())["retrieval"]["k"] == 5
    assert json.loads((second / "config.json").read_text())["retrieval"]["k"] == 10
    assert len(list((tmp_path / "artifacts").iterdir())) == 1
    # the sweep ends with `mnemis compare` over its jobs: retrieval.k is the swept column
    table = (tmp_path / "sweep" / "compare.md").read_text()
    assert "| job | retrieval.k | method |" in table and table.count("| mnemis |") == 2
    assert (tmp_path / "sweep" / "compare.png").stat().st_size > 0
    # reranker scores are cached on disk: the k=10 job finds the pairs the k=5 job scored
    cache1 = json.loads((first / "rerank_cache.json").read_text())
    cache2 = json.loads((second / "rerank_cache.json").read_text())
    assert cache1["scored"] > 0 and cache1["cache_hits"] == 0
    assert cache2["cache_hits"] > 0 and cache2["unique"] == cache2["cache_hits"] + cache2["scored"]
