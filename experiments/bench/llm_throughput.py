"""Batched vs sequential schema-constrained generation on the CPU vLLM backend (SmolLM2-135M).

One ``LLM.generate`` of N requests (one ``vllm.LLM.chat`` call) against N single-request calls,
cache off. Prints and writes ``experiments/results/llm_throughput.json``.

    HF_HUB_OFFLINE=1 python experiments/bench/llm_throughput.py [--n 64] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from pydantic import BaseModel, Field

from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.client import LLM

TOPICS = ["hiking", "painting", "chess", "cooking", "jazz", "sailing", "pottery", "astronomy"]


class Extraction(BaseModel):
    person: str = Field(max_length=30)
    activity: str = Field(max_length=30)
    when: str = Field(max_length=20)


def requests(n: int, max_tokens: int) -> list[LLMRequest]:
    out = []
    for i in range(n):
        msg = (f"Episode {i}: Caroline told Melanie that she started {TOPICS[i % len(TOPICS)]} last "
               f"{['week', 'month', 'year'][i % 3]} with her friend number {i}. Reply with JSON: person, activity, when.")
        out.append(LLMRequest(messages=[{"role": "system", "content": "You extract facts from conversations."},
                                        {"role": "user", "content": msg}],
                              schema=Extraction, sampling=Sampling(max_tokens=max_tokens), stage="bench"))
    return out


def run(llm: LLM, reqs: list[LLMRequest], batched: bool) -> dict:
    t0 = time.perf_counter()
    results = llm.generate(reqs) if batched else [llm.generate([r])[0] for r in reqs]
    wall = time.perf_counter() - t0
    gen = sum(r.completion_tokens for r in results)
    return {"requests": len(reqs), "wall_s": round(wall, 3), "completion_tokens": gen,
            "prompt_tokens": sum(r.prompt_tokens for r in results), "valid": sum(r.ok for r in results),
            "tokens_per_s": round(gen / wall, 2), "requests_per_s": round(len(reqs) / wall, 3),
            "errors": sorted({r.error[:120] for r in results if r.error})[:3]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "llm_throughput.json"))
    args = ap.parse_args()
    from mnemis.models.llm.vllm_backend import VLLMBackend

    t0 = time.perf_counter()
    backend = VLLMBackend("smollm2-135m", gpu_memory_utilization=0.15, max_model_len=2048, enforce_eager=True)
    startup = time.perf_counter() - t0
    llm = LLM(backend, cache_mode="off", max_retries=0)
    reqs = requests(args.n, args.max_tokens)
    llm.generate(reqs[:2])  # warm-up
    batched = run(llm, reqs, batched=True)
    sequential = run(llm, reqs, batched=False)
    report = {
        "model": backend.model_id, "backend": "vllm-cpu", "n": args.n, "max_tokens": args.max_tokens,
        "engine_startup_s": round(startup, 1), "batched": batched, "sequential": sequential,
        "speedup_tokens_per_s": round(batched["tokens_per_s"] / max(sequential["tokens_per_s"], 1e-9), 2),
        "speedup_wall": round(sequential["wall_s"] / max(batched["wall_s"], 1e-9), 2),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_1m_at_end": round(os.getloadavg()[0], 1)},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    backend.close()


if __name__ == "__main__":
    main()
