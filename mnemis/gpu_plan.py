"""The GPU memory plan of a run: every model role on a named card, judged by vLLM 0.32's own start-up rule.

vLLM 0.32 (``vllm/v1/worker/utils.py: request_memory``) starts an engine only when the device's **free** memory
is at least ``ceil(gpu_memory_utilization x total)``; the engine then takes that budget and fills it with its
weights, its peak activations, CUDA-graph memory, non-torch buffers and, in what is left, the KV cache, which
must hold at least one ``max_model_len`` sequence (``kv_cache_utils.check_enough_kv_cache_memory``). Every
engine also runs in a process whose CUDA context is outside that budget. Components loaded with transformers
(embedder, reranker) take their weights plus the activations of one batch, with no start-up check at all: they
run out of memory mid-run instead.

The plan walks the run as it happens (:mod:`mnemis.app.jobs`): the build (embed episodes, then the build's LLM
engines), then the evaluation (engines the evaluation does not use are released, then the evaluation's
engines start one after another, the reranker and the peers' server last). At every engine start it applies
vLLM's rule to what is resident on each GPU; at the end it sums what is resident. Sizes come from the model's
architecture (:data:`ARCHS`, the parameters of the shipped models' ``config.json``) x the dtype's bytes; an
engine with ``tensor_parallel_size`` n puts 1/n of its weights and KV cache on each of GPUs 0..n-1, and
transformers components sit on GPU 0 (``device: auto``).

Allowances that vLLM measures at start and we cannot (no GPU here): ``NON_TORCH_GIB`` per engine rank (NCCL,
cuBLAS workspaces and attention buffers: vLLM's own profiling logs report 0.2 to 1.8 GiB), ``CUDA_GRAPH_GIB`` per
engine rank that captures CUDA graphs (not ``enforce_eager``), ``CUDA_CONTEXT_GIB`` per process. The peak
activation of vLLM's profile run is estimated from its batch (``max_num_batched_tokens`` tokens through one
layer's projections, plus the sampler's ``max_num_seqs x vocab`` float32 logits). ``experiments/bench/gpu_smoke.sh``
measures the real figures on a lent GPU.

Ground floor: reads the run's model roles (:class:`mnemis.model_roles.ModelRoles`) only (no Hydra, no torch,
no vLLM).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemis.model_roles import BUILD, EVAL, ModelRoles, Role, node_key

GIB = 1024**3
MIB = 1024**2
CUDA_CONTEXT_GIB = 1.0
NON_TORCH_GIB = 1.0
CUDA_GRAPH_GIB = 1.0
QUERY_TOKENS = 512   # an evaluation batch embeds questions, not episodes: LoCoMo's and LongMemEval's are far shorter
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
               "auto": 2, "int8": 1}


@dataclass(frozen=True)
class Card:
    key: str
    name: str
    total: int          # bytes the CUDA driver reports as total (what vLLM multiplies by the utilization)
    source: str


CARDS = {
    "h100-80gb": Card("h100-80gb", "NVIDIA H100 80GB HBM3", int(79.22 * GIB),
                      "total_gpu_memory 79.22 GiB in vLLM's own start-up log"),
    "h200": Card("h200", "NVIDIA H200", int(139.72 * GIB),
                 "vLLM's start-up log: 69.86 GiB requested at gpu_memory_utilization 0.5"),
    "a100-80gb": Card("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920 * MIB,
                      "nvidia-smi memory.total 81,920 MiB (the CUDA total is a little lower)"),
    "l40s": Card("l40s", "NVIDIA L40S", 46068 * MIB,
                 "nvidia-smi memory.total 46,068 MiB (the CUDA total is a little lower)"),
}


def parse_gpu(spec: str) -> tuple[Card, int]:
    """``h200`` -> (H200, 1); ``h200x4`` -> (H200, 4). An unknown card is an error naming the known ones."""
    m = re.fullmatch(r"([a-z0-9-]+?)(?:x(\d+))?", str(spec).strip().lower())
    if not m or m.group(1) not in CARDS or (m.group(2) is not None and int(m.group(2)) < 1):
        raise ValueError(f"gpu={spec!r}: choose one of {sorted(CARDS)}, optionally with a count (e.g. h200x4)")
    return CARDS[m.group(1)], int(m.group(2) or 1)


def card_of(name: str, total_bytes: float) -> Card:
    """A present card (nvidia-smi's name and total) as a :class:`Card`."""
    return Card("present", name, int(total_bytes), "nvidia-smi memory.total of the card in this machine")


# ------------------------------------------------------------------------------------------ architectures
@dataclass(frozen=True)
class Arch:
    """The sizes of a model's ``config.json`` that decide its memory."""

    family: str          # qwen3 | xlm-roberta | gemma3
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    lm_head: bool        # an untied output head (a causal LM that does not tie its embeddings)
    positions: int = 0   # learned position embeddings (XLM-RoBERTa)
    extra: int = 0       # parameters outside the transformer (a sentence-transformers projection)

    def params(self) -> int:
        h, i = self.hidden, self.intermediate
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.family == "xlm-roberta":  # biases, LayerNorms, learned positions, token types, pooler
            layer = (h * q + q) + 2 * (h * kv + kv) + (q * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
            emb = (self.vocab + self.positions + 1) * h + 2 * h
            return emb + self.layers * layer + (h * h + h) + self.extra
        norms = 2 * h + (2 * self.head_dim if self.family == "qwen3" else 2 * h + 2 * self.head_dim)
        layer = h * q + 2 * h * kv + q * h + 3 * h * i + norms
        return self.vocab * h * (2 if self.lm_head else 1) + self.layers * layer + h + self.extra

    def kv_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """Key and value of one token in every layer, on one of ``tp`` ranks (KV heads split, or replicated
        when fewer than the ranks)."""
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * dtype_bytes


# From the published config.json of each model (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings); params() reproduces the
# model cards' counts: Qwen3-8B 8.19B, Qwen3-32B 32.8B, Qwen3-0.6B-based 0.60B, BGE-M3 0.57B, EmbeddingGemma 0.31B.
_QWEN3_8B = dict(family="qwen3", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288)
_QWEN3_06B = dict(family="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072)
_XLMR_LARGE = dict(family="xlm-roberta", hidden=1024, layers=24, heads=16, kv_heads=16, head_dim=64,
                   intermediate=4096, vocab=250002, positions=8194, lm_head=False)
ARCHS: dict[str, Arch] = {
    "Qwen/Qwen3-8B": Arch(**_QWEN3_8B, vocab=151936, lm_head=True),
    "Qwen/Qwen3-32B": Arch("qwen3", 5120, 64, 64, 8, 128, 25600, 151936, True),
    "Qwen/Qwen3-Reranker-8B": Arch(**_QWEN3_8B, vocab=151669, lm_head=True),
    "Qwen/Qwen3-Embedding-8B": Arch(**_QWEN3_8B, vocab=151665, lm_head=False),
    "Qwen/Qwen3-Embedding-0.6B": Arch(**_QWEN3_06B, vocab=151669, lm_head=False),
    "Qwen/Qwen3-Reranker-0.6B": Arch(**_QWEN3_06B, vocab=151669, lm_head=False),  # ties its output head
    "BAAI/bge-m3": Arch(**_XLMR_LARGE),
    "BAAI/bge-reranker-v2-m3": Arch(**_XLMR_LARGE, extra=1024 * 1024 + 1024 + 1024 + 1),  # classification head
    # Gemma3 text backbone + the sentence-transformers 768 -> 3072 -> 768 projection
    "google/embeddinggemma-300m": Arch("gemma3", 768, 24, 3, 1, 256, 1152, 262144, False,
                                       extra=2 * 768 * 3072),
}


# ------------------------------------------------------------------------------------------ engines
@dataclass(frozen=True)
class Engine:
    """One model as the plan sees it (built from a role's config node by :func:`engines_of`)."""

    roles: tuple[str, ...]
    model: str
    runtime: str                # vllm (an engine with vLLM's start-up check) | transformers | remote
    stages: tuple[str, ...]
    dtype_bytes: int
    params: int | None
    arch: Arch | None
    util_key: str | None = None       # the config key of its gpu_memory_utilization
    util: float | None = None
    tp: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    eager: bool = False
    kv_cache_bytes: int | None = None  # kv_cache_memory_bytes: a fixed KV cache instead of the utilization's
    pooling: bool = False              # vLLM's pooling runner (no sampler)
    batch_size: int | None = None      # transformers: the batch of one forward pass ...
    max_length: int | None = None      # ... and its longest sequence
    on_gpu: bool = True

    @property
    def name(self) -> str:
        return "+".join(self.roles)


def _dtype_bytes(dtype: Any, arch_default: int = 2) -> int:
    return DTYPE_BYTES.get(str(dtype or "auto").lower(), arch_default)


def engine_of(names: Sequence[str], role: Role, params_of: Callable[[str], int | None]) -> Engine:
    """The plan's view of a role's config node."""
    node = role.node
    be = node.get("backend") if role.kind in ("llm", "server") else node
    be = be or {}
    target = str(be.get("_target_", node.get("_target_", "")))
    model = str(be.get("model") or "")
    arch = ARCHS.get(model)
    params = params_of(model) if model else None
    if params is None and arch is not None:
        params = arch.params()
    common = dict(roles=tuple(names), model=model, stages=role.stages, arch=arch, params=params,
                  dtype_bytes=_dtype_bytes(be.get("dtype")))
    vllm = role.kind == "server" or "vllm_backend" in target or "rerank_vllm" in target
    if role.kind in ("llm", "server") and not vllm:
        remote = "openai" in target.lower() or "serve" in target.lower() or not model
        return Engine(**common, runtime="remote" if remote else "transformers", on_gpu=False)
    if vllm:
        key = (f"{role.key}.backend" if role.kind == "llm" else role.key) + ".gpu_memory_utilization"
        return Engine(**common, runtime="vllm", util_key=key, util=float(be.get("gpu_memory_utilization", 0.9)),
                      tp=int(be.get("tensor_parallel_size") or 1),
                      max_model_len=be.get("max_model_len") or be.get("max_length"),
                      max_num_seqs=be.get("max_num_seqs"), max_num_batched_tokens=be.get("max_num_batched_tokens"),
                      eager=bool(be.get("enforce_eager")), kv_cache_bytes=be.get("kv_cache_memory_bytes"),
                      pooling="rerank_vllm" in target)
    device = str(be.get("device", "auto"))
    on_gpu = bool(target) and device != "cpu" and ("Hashing" not in target and "Cosine" not in target
                                                    and "openai" not in target.lower())
    # transformers on CUDA: dtype auto = bf16 (mnemis.models.embed.pick_dtype)
    return Engine(**common, runtime="transformers", batch_size=be.get("batch_size"), max_length=be.get("max_length"),
                  on_gpu=on_gpu and bool(model))


def engines_of(roles: ModelRoles, params_of: Callable[[str], int | None] | None = None) -> list[Engine]:
    """One :class:`Engine` per distinct model of a run's roles (:meth:`ModelRoles.of` its settings)."""
    params_of = params_of or (lambda model: None)
    return [engine_of(names, role, params_of) for names, role in roles.engines()]


# ------------------------------------------------------------------------------------------ sizes
def batch_defaults(card: Card) -> tuple[int, int]:
    """vLLM 0.32's ``LLM`` defaults (``EngineArgs.get_batch_defaults``): (max_num_batched_tokens, max_num_seqs)."""
    if card.total >= 160 * GIB or (card.total >= 70 * GIB and "a100" not in card.name.lower()):
        return 16384, 1024
    return 8192, 256


@dataclass(frozen=True)
class EngineBudget:
    """What one vLLM engine rank needs inside its ``gpu_memory_utilization`` budget."""

    weights: float
    activations: float
    graphs: float
    non_torch: float
    kv_min: float | None        # one max_model_len sequence (vLLM refuses to start below it)
    budget: float               # what the engine holds: util x total (or, with a fixed KV cache, the sum)
    kv: float | None            # what is left for the KV cache
    requested: float = 0.0      # ceil(util x total): what must be free when it starts (vLLM's request_memory)

    @property
    def fixed(self) -> float:
        return self.weights + self.activations + self.graphs + self.non_torch

    def ok(self) -> bool:
        return self.kv is not None and self.kv_min is not None and self.kv >= self.kv_min


def vllm_budget(e: Engine, card: Card) -> EngineBudget:
    tokens, seqs = batch_defaults(card)
    tokens, seqs = int(e.max_num_batched_tokens or tokens), int(e.max_num_seqs or seqs)
    b = e.dtype_bytes
    weights = (e.params or 0) * b / e.tp
    act = 0.0
    kv_min = None
    if e.arch is not None:
        a = e.arch
        width = 3 * a.hidden + (a.heads + 2 * a.kv_heads + a.heads) * a.head_dim / e.tp + 3 * a.intermediate / e.tp
        act = tokens * width * b + (0 if e.pooling else seqs * a.vocab * 4 * 2)  # logits gathered whole per rank
        kv_min = (e.max_model_len or 0) * a.kv_bytes_per_token(b, e.tp)
    graphs = 0.0 if e.eager else CUDA_GRAPH_GIB * GIB
    non_torch = NON_TORCH_GIB * GIB
    requested = math.ceil(card.total * (e.util or 0))  # checked at start even with a fixed KV cache
    if e.kv_cache_bytes:
        kv = float(e.kv_cache_bytes)
        budget = weights + act + graphs + non_torch + kv
    else:
        budget = requested
        kv = budget - weights - act - graphs - non_torch
    return EngineBudget(weights, act, graphs, non_torch, kv_min, budget, kv if e.arch is not None else None,
                        requested)


def transformers_bytes(e: Engine, *, query: bool = False) -> tuple[float, float]:
    """(weights, activations of one batch) of a transformers component on CUDA (bf16 when ``auto``): the
    hidden states, attention projections and MLP of one layer for ``batch_size x max_length`` tokens, plus the
    padded attention mask (``batch x length^2``); ``query``: an evaluation batch of questions."""
    b = e.dtype_bytes
    weights = (e.params or 0) * b
    if e.arch is None:
        return weights, 0.0
    a = e.arch
    length = min(int(e.max_length or 512), QUERY_TOKENS) if query else int(e.max_length or 512)
    batch = int(e.batch_size or 1)
    width = 4 * a.hidden + (a.heads + 2 * a.kv_heads) * a.head_dim + 3 * a.intermediate
    return weights, batch * length * width * b + batch * length * length * b


# ------------------------------------------------------------------------------------------ the plan
@dataclass
class Step:
    """One moment of the run on every GPU: an engine start (vLLM's check) or a component's peak."""

    stage: str
    what: str
    gpus: dict[int, dict[str, float]]      # GPU -> resident name -> bytes, after the step
    check: str = ""                         # vLLM's start check, in words, when it is an engine start
    ok: bool = True


@dataclass
class Plan:
    card: Card
    count: int
    engines: list[Engine]
    steps: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    budgets: dict[str, EngineBudget] = field(default_factory=dict)
    suggestion: str = ""

    @property
    def fits(self) -> bool:
        return not self.problems

    def peak(self, gpu: int = 0) -> float:
        return max((sum(s.gpus.get(gpu, {}).values()) for s in self.steps), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "card": self.card.key, "card_name": self.card.name, "gpus": self.count,
            "total_gib": round(self.card.total / GIB, 2), "fits": self.fits,
            "engines": [{"roles": list(e.roles), "model": e.model, "runtime": e.runtime, "stages": list(e.stages),
                         "gpu_memory_utilization": e.util, "tensor_parallel_size": e.tp,
                         "gib_per_gpu": round(self._resident(e) / GIB, 2),
                         **({} if e.runtime == "vllm" else
                            {"batch_activation_gib": round(transformers_bytes(e)[1] / GIB, 2)}),
                         **({"budget": {k: round(v / GIB, 2) if v is not None else None
                                        for k, v in vars(self.budgets[e.name]).items()}}
                            if e.name in self.budgets else {})}
                        for e in self.engines if e.on_gpu and e.runtime != "remote"],
            "peak_gib_gpu0": round(self.peak(0) / GIB, 2), "problems": self.problems, "warnings": self.warnings,
            "suggestion": self.suggestion,
        }

    def _resident(self, e: Engine) -> float:
        """GiB an engine holds on each of its GPUs: a vLLM engine's budget and process context, a transformers
        component's weights (its batch's activations come and go: :meth:`summary` shows their peak)."""
        if e.runtime == "vllm":
            return self.budgets[e.name].budget + CUDA_CONTEXT_GIB * GIB
        return transformers_bytes(e)[0]

    def summary(self) -> str:
        """One line: each engine's GiB on GPU 0 and the verdict with its numbers."""
        parts = []
        for e in self.engines:
            if not e.on_gpu or e.runtime == "remote":
                continue
            peak = "" if e.runtime == "vllm" else f" + {transformers_bytes(e)[1] / GIB:.1f} GiB per batch"
            parts.append(f"{e.name} {self._resident(e) / GIB:.1f} GiB{peak}")
        head = f"{self.count} x {self.card.name} ({self.card.total / GIB:.1f} GiB): " + ("; ".join(parts)
                                                                                       or "no model on the GPU")
        if self.fits:
            return head + f"; peak {self.peak(0) / GIB:.1f} GiB on GPU 0: fits"
        return head + ": " + " | ".join(self.problems) + (f"; {self.suggestion}" if self.suggestion else "")


def plan(engines: Sequence[Engine], card: Card, count: int = 1) -> Plan:
    """Walk the run on ``count`` cards: build, then evaluation; vLLM's start check at every engine start."""
    p = Plan(card, count, list(engines))
    gpu_engines = [e for e in engines if e.on_gpu and e.runtime != "remote"]
    if not gpu_engines:
        return p
    res: dict[int, dict[str, float]] = {g: {} for g in range(count)}
    total = float(card.total)

    def free(g: int) -> float:
        return total - sum(res[g].values())

    def snapshot(stage: str, what: str, check: str = "", ok: bool = True) -> None:
        p.steps.append(Step(stage, what, {g: dict(v) for g, v in res.items()}, check, ok))

    res[0]["main process CUDA context"] = CUDA_CONTEXT_GIB * GIB
    for e in gpu_engines:
        if e.runtime == "vllm":
            p.budgets[e.name] = b = vllm_budget(e, card)
            if e.tp > count:
                p.problems.append(f"{e.name}: tensor_parallel_size {e.tp} needs {e.tp} GPUs, the plan has {count} "
                                  f"(gpu={card.key}x{e.tp})")
            if b.kv is None:
                p.warnings.append(f"{e.name}: {e.model} is not in the architecture table: its KV cache and "
                                  "activations are not planned")
            elif not b.ok():
                p.problems.append(
                    f"{e.name}: its budget {b.budget / GIB:.1f} GiB (gpu_memory_utilization {e.util}) leaves "
                    f"{b.kv / GIB:.1f} GiB for the KV cache after {b.weights / GIB:.1f} GiB weights, "
                    f"{b.activations / GIB:.1f} GiB activations, {(b.graphs + b.non_torch) / GIB:.1f} GiB CUDA graphs and "
                    f"buffers; one {e.max_model_len}-token sequence needs {(b.kv_min or 0) / GIB:.2f} GiB (vLLM refuses)")

    def start(e: Engine, stage: str) -> None:
        if e.runtime == "vllm":
            b = p.budgets[e.name]
            for g in range(min(e.tp, count)):
                have = free(g) - CUDA_CONTEXT_GIB * GIB  # the engine's own process context comes first
                ok = have >= b.requested
                check = (f"GPU {g}: free {have / GIB:.1f} GiB {'>=' if ok else '<'} "
                         f"{e.util} x {total / GIB:.1f} = {b.requested / GIB:.1f} GiB")
                if not ok:
                    p.problems.append(f"{stage}: {e.name} cannot start on GPU {g}: free {have / GIB:.1f} GiB < "
                                      f"gpu_memory_utilization {e.util} x {total / GIB:.1f} GiB = "
                                      f"{b.requested / GIB:.1f} GiB (vLLM's start-up check)")
                res[g][f"{e.name} (vLLM)"] = b.budget + CUDA_CONTEXT_GIB * GIB
                snapshot(stage, f"start {e.name}", check, ok)
        else:
            weights, act = transformers_bytes(e, query=stage == EVAL and e.roles[0] == "embedder")
            res[0][f"{e.name} weights"] = weights
            res[0][f"{e.name} activations"] = act
            ok = free(0) >= 0
            snapshot(stage, f"{e.name} forward pass", "", ok)
            if not ok:
                p.problems.append(f"{stage}: {e.name} runs out of memory on GPU 0: {weights / GIB:.1f} GiB weights + "
                                  f"{act / GIB:.1f} GiB activations (batch {e.batch_size} x {e.max_length} tokens) "
                                  f"with {(free(0) + weights + act) / GIB:.1f} GiB free (lower {e.roles[0]}.batch_size or "
                                  f"{e.roles[0]}.max_length)")
            res[0].pop(f"{e.name} activations")  # released after each batch (the embedder empties its cache)

    def order(stage: str) -> list[Engine]:
        rank = {"embedder": 0, "llm": 1, "categoriser": 1, "selector_llm": 2, "answer_llm": 3, "reranker": 5,
                "peers_server": 6}
        return sorted((e for e in gpu_engines if stage in e.stages),
                      key=lambda e: rank.get(e.roles[0], 4))

    alive: set[str] = set()
    for stage in (BUILD, EVAL):
        if stage == EVAL:  # engines the evaluation does not use are shut down (mnemis.components.Models.release)
            for e in gpu_engines:
                if e.name in alive and EVAL not in e.stages:
                    for g in res:
                        res[g].pop(f"{e.name} (vLLM)", None)
                        res[g].pop(f"{e.name} weights", None)
                    alive.discard(e.name)
        for e in order(stage):
            if e.name in alive and e.runtime == "vllm":
                continue
            start(e, stage)
            alive.add(e.name)
    if p.problems:
        p.suggestion = suggest(p)
    return p


def suggest(p: Plan) -> str:
    """gpu_memory_utilization values that fit GPU 0, in proportion to each engine's minimum, or why none does."""
    vllm = [e for e in p.engines if e.runtime == "vllm" and e.on_gpu and e.name in p.budgets]
    if not vllm:
        return ""
    total = float(p.card.total)
    mins = {}
    for e in vllm:
        b = p.budgets[e.name]
        mins[e.name] = (b.fixed + (b.kv_min or 0)) / total
    concurrent = [e for e in vllm if EVAL in e.stages] or vllm
    stage = EVAL if any(EVAL in e.stages for e in vllm) else BUILD
    # what the other models hold beside the engines alive together (their batches' peaks included)
    other = max((sum(v for k, v in s.gpus.get(0, {}).items() if "(vLLM)" not in k) for s in p.steps
                 if s.stage == stage), default=0.0)
    room = (total - other - CUDA_CONTEXT_GIB * GIB * len(concurrent)) / total
    need = sum(mins[e.name] for e in concurrent)
    if need > room:
        return (f"no utilizations fit {p.card.name}: the engines alive together need at least "
                f"{need * total / GIB:.1f} GiB and {room * total / GIB:.1f} GiB is left beside the other models; "
                "use more GPUs (tensor_parallel_size), a larger card, or smaller models")
    spare = room - need
    sets = [f"{e.util_key}={math.floor((mins[e.name] + spare * mins[e.name] / need) * 100 - 1) / 100:.2f}"
            for e in concurrent if e.util_key]
    return "fits with " + " ".join(sets)


def plan_config(roles: ModelRoles, card: Card, count: int = 1,
                params_of: Callable[[str], int | None] | None = None) -> Plan:
    """The plan of a run's model roles on ``count`` x ``card``."""
    return plan(engines_of(roles, params_of), card, count)
