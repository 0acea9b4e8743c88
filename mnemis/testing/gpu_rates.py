"""The GPU rates behind the GPU-hour estimates: measured by the GPU smoke once its JSON exists, assumed until then.

``experiments/bench/gpu_smoke.sh`` writes ``experiments/results/gpu_smoke.json`` on a lent GPU. The estimators
(``experiments/bench/beam_scale.py``, ``rerank_estimate.py``) read their rates here, so a rerun after the smoke uses the measured
ones and records which it used (``source``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "experiments" / "results" / "gpu_smoke.json"
# 2 x 8.2e9 FLOP per token at 40 % of the H200's 790 TFLOP/s bf16 peak; batched decode across groups
ASSUMED_PREFILL, ASSUMED_DECODE = 19268.0, 2500.0
NEEDS_GPU = "assumed (needs GPU: experiments/bench/gpu_smoke.sh has not run)"


def _smoke(path: Path = SMOKE) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def llm_rates(path: Path = SMOKE) -> dict[str, Any]:
    """Qwen3-8B prompt (prefill) and generation tokens/s on our extraction prompts, and where they come from."""
    doc = _smoke(path)
    ex = ((doc or {}).get("llm") or {}).get("extraction") or {}
    if "prompt_tokens_per_s" in ex and "generation_tokens_per_s" in ex:
        return {"prefill_tokens_per_s": float(ex["prompt_tokens_per_s"]),
                "decode_tokens_per_s": float(ex["generation_tokens_per_s"]),
                "source": f"measured on {doc.get('gpu')} ({path.relative_to(REPO)})"}
    return {"prefill_tokens_per_s": ASSUMED_PREFILL, "decode_tokens_per_s": ASSUMED_DECODE, "source": NEEDS_GPU}


def rerank_pairs_per_s(path: Path = SMOKE) -> tuple[float | None, str]:
    """The Qwen3-Reranker-8B pooling runner's pairs/s, or None (and why) until the smoke has measured it."""
    rate = (((_smoke(path) or {}).get("rerank")) or {}).get("pairs_per_s")
    return (float(rate), f"measured ({path.relative_to(REPO)})") if rate else (None, NEEDS_GPU)
