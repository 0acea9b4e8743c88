"""``mnemis retrieve``: the main job stopped after retrieval, the cheap way to tune retrieval settings. A sweep over
System-2's fusion weight with a schema-fake LLM and the hashing embedder (plumbing, not quality): each job writes
its contexts and each route's evidence recall, sends no answer or judge request, and returns the recall the
``optimized_metric`` names."""

from __future__ import annotations

import json
import subprocess
import sys

ANSWERING = ("answer", "judge", "leniency")


def test_retrieve_stops_after_retrieval_and_reports_each_routes_recall(tmp_path, locomo_path):
    cmd = [sys.executable, "-m", "mnemis.app.cli", "retrieve", "-m", "experiment=quickstart", "llm=schema_fake",
           "embedder=hashing", "reranker=cosine", "methods=[mnemis,rag]", "retrieval.fusion.scorer=rrf_routes",
           "retrieval.fusion.system2_weight=0.0,1.0", "optimized_metric='recall.json#mnemis/fused.overall.direct'",
           f"paths.artifacts_dir={tmp_path}/artifacts", f"paths.cache_dir={tmp_path}/cache",
           f"paths.shared_data_dir={locomo_path.parent}", f"hydra.sweep.dir={tmp_path}/sweep"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "mnemis/fused: evidence recall" in res.stdout and "rag: evidence recall" in res.stdout
    fused = {}
    for job in (tmp_path / "sweep" / "0", tmp_path / "sweep" / "1"):
        recall = json.loads((job / "recall.json").read_text())
        assert {"rag", "mnemis/system1", "mnemis/system2", "mnemis/fused"} <= set(recall)
        rows = [json.loads(line) for line in (job / "contexts.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and all(r["text"] for r in rows)  # quickstart's 4 questions, rendered
        assert (job / "traversal.jsonl").is_file() and (job / "system1.jsonl").is_file()
        assert not (job / "questions.jsonl").exists() and not (job / "metrics.json").exists()  # nothing answered
        stages = json.loads((job / "ledger.json").read_text())["stages"]
        assert any(s.startswith("select") for s in stages), stages  # System-2's selection calls are counted
        assert not [s for s, v in stages.items() if s.startswith(ANSWERING) and v["calls"]], stages
        weight = json.loads((job / "config.json").read_text())["retrieval"]["fusion"]["system2_weight"]
        fused[weight] = recall["mnemis/fused"]["overall"]["direct"]
    assert set(fused) == {0.0, 1.0}
    # weight 0 keeps System-1's order ahead of the walk's own finds: its fused list starts as System-1's
    job0 = tmp_path / "sweep" / "0"
    s1 = {json.loads(r)["question_id"]: json.loads(r)["episodes"] for r in (job0 / "system1.jsonl").read_text().splitlines()}
    for row in map(json.loads, (job0 / "contexts.jsonl").read_text().splitlines()):
        got = [h["id"] for h in row["episodes"]]
        assert got[: len(s1[row["question_id"]])] == s1[row["question_id"]][: len(got)]
