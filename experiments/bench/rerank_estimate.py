"""Arithmetic, not a measurement: wall time of paper-mode reranking for all of LoCoMo on one H200.

Inputs, each labelled in the output:

- **measured** (on CPU, scripted build of all of LoCoMo): reranker pairs and reranker document tokens per
  question, per selection policy, from ``experiments/results/paper_mode_pairs.json``;
- **assumed**: the per-pair prefix (system turn, instruction, query; about 80 tokens), Qwen3-Reranker-8B's
  forward cost (2 FLOP per parameter per token), the H200's dense bf16 peak (about 790 TFLOP/s) and the share
  of it a prefill-only pooling run reaches (MFU). No GPU throughput has been measured for this project:
  ``experiments/bench/gpu_smoke.sh`` measures the pooling runner's pairs/s on a GPU when one is lent.

Two bounds per policy: every token of every pair computed, and only the document tokens computed (the shared
prefix of one question's pairs served from vLLM's prefix cache).

    python experiments/bench/rerank_estimate.py [--mfu 0.4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnemis.testing import gpu_rates  # measured GPU rates once the GPU smoke has run, else the assumed ones

REPO = Path(__file__).resolve().parents[2]
PAIRS = REPO / "experiments" / "results" / "paper_mode_pairs.json"
DEFAULT_OUT = REPO / "experiments" / "results" / "rerank_estimate_h200.json"
ASSUMED = {
    "prefix_tokens_per_pair": 80,
    "reranker_parameters": 8.2e9,
    "flop_per_parameter_per_token": 2,
    "h200_bf16_peak_flops": 790e12,
}


def estimate(pairs_json: dict, mfu: float) -> dict:
    build = pairs_json["builds"]["locomo"]
    n_questions = build["graph"]["questions"]
    flops_per_token = ASSUMED["reranker_parameters"] * ASSUMED["flop_per_parameter_per_token"]
    rate = ASSUMED["h200_bf16_peak_flops"] * mfu / flops_per_token  # tokens per second
    out = {}
    for policy, run in build["runs"].items():
        row = {}
        for mode in ("paper", "default"):
            stats = run[mode]
            pairs = stats["pairs_per_query"]["mean"] * n_questions
            doc_tokens = stats["reranker_doc_tokens_per_query"]["mean"] * n_questions
            all_tokens = doc_tokens + pairs * ASSUMED["prefix_tokens_per_pair"]
            row[mode] = {
                "pairs": round(pairs),
                "document_tokens": round(doc_tokens),
                "minutes_every_token": round(all_tokens / rate / 60, 1),
                "minutes_documents_only": round(doc_tokens / rate / 60, 1),
            }
        out[policy] = row
    measured, source = gpu_rates.rerank_pairs_per_s()
    if measured:  # the GPU smoke's pairs/s replaces the FLOP arithmetic
        for row in out.values():
            for mode in row.values():
                mode["minutes_measured_rate"] = round(mode["pairs"] / measured / 60, 1)
    return {"questions": n_questions, "mfu_assumed": mfu, "tokens_per_second_assumed": round(rate),
            "pairs_per_s_measured": measured, "rate_source": source,
            "assumed": ASSUMED, "measured_from": str(PAIRS.relative_to(REPO)), "policies": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mfu", type=float, default=0.4)
    ap.add_argument("--pairs", type=Path, default=PAIRS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    result = estimate(json.loads(args.pairs.read_text()), args.mfu)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
