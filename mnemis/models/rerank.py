"""Rerankers: a causal LM scored as P(yes) (Qwen3-Reranker recipe, any causal LM), a cross-encoder
(BGE-Reranker and other sequence-pair classifiers), and a cosine fallback.

``CausalLMReranker`` formats each (query, document) pair the way the Qwen3-Reranker model card does
and scores it as ``softmax([logit_no, logit_yes])[1]`` at the last position. Only the two vocabulary
rows of the LM head are multiplied (last hidden state @ W[[no, yes]].T), not the whole vocabulary.
With ``smollm2-135m`` the tiny CPU model exercises the same code path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mnemis import progress
from mnemis.models.packaged import packaged_model
from mnemis.models.tiny import model_identity, require_path, resolve_local

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
          'Note that the answer can only be "yes" or "no".')
PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def format_pair(instruction: str, query: str, document: str) -> str:
    """The user turn of one Qwen3-Reranker pair (model-card layout)."""
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


def pair_token_ids(tokenizer: Any, instruction: str, pairs: Sequence[tuple[str, str]], max_length: int) -> list[list[int]]:
    """Token ids of each pair in the Qwen3-Reranker chat layout, the user turn cut to fit ``max_length``.

    Shared by the transformers path (:class:`CausalLMReranker`) and the vLLM pooling runner
    (:class:`mnemis.models.rerank_vllm.VLLMReranker`), so both score exactly the same tokens.
    """
    prefix = tokenizer.encode(PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(SUFFIX, add_special_tokens=False)
    budget = max(max_length - len(prefix) - len(suffix), 8)
    return [prefix + tokenizer.encode(format_pair(instruction, q, d), add_special_tokens=False, truncation=True,
                                      max_length=budget) + suffix for q, d in pairs]


def _queries(query: str | Sequence[str], n: int) -> list[str]:
    if isinstance(query, str):
        return [query] * n
    query = list(query)
    if len(query) != n:
        raise ValueError(f"got {len(query)} queries for {n} documents (pass one query or one per document)")
    return query


def _score_in_batches(query: str | Sequence[str], documents: Sequence[str], batch_size: int,
                      score_pairs: Callable[[list[str], list[str]], Any]) -> np.ndarray:
    """Scores in input order; pairs of similar length share a batch (``score_pairs`` -> a [B] tensor)."""
    import torch

    documents = list(documents)
    queries = _queries(query, len(documents))
    out = np.zeros(len(documents), dtype=np.float32)
    if not documents:
        return out
    order = np.argsort([-(len(q) + len(d)) for q, d in zip(queries, documents)], kind="stable")
    bar = progress.start("rerank pairs", len(order), min_items=progress.LONG_BATCH)
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            out[idx] = score_pairs([queries[i] for i in idx], [documents[i] for i in idx]).float().cpu().numpy()
            if bar is not None:
                bar.update(len(idx))
    if bar is not None:
        bar.close()
    return out


class CausalLMReranker:
    """P(yes) reranker over any causal LM (Qwen3-Reranker format).

    Args:
        model: HF id, local folder, or a model shipped on PyPI (``smollm2-135m``, ``qwen2.5-coder-0.5b``, ...).
        instruction: the ``<Instruct>`` task line.
        device, dtype: as for the embedders ("auto" = CUDA+bf16 when available).
        batch_size: pairs per forward pass.
        max_length: token budget per pair (the document part is truncated).
        revision: the hub commit (or branch) of ``model``; None = main. The GPU configs pin commits.
    """

    def __init__(self, model: str = "Qwen/Qwen3-Reranker-0.6B", *,
                 instruction: str = "Given a question, judge whether the passage helps answer it",
                 device: str = "auto", dtype: str = "auto", batch_size: int = 16, max_length: int = 2048,
                 revision: str | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from mnemis.models.embed import pick_device, pick_dtype

        packaged = packaged_model(model)
        if packaged is not None:
            path = str(packaged[0])
            self.model_id = "rerank:" + packaged[1]
        else:
            require_path(model, "reranker model")
            path = model
            self.model_id = ""
        self.device = pick_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", revision=revision)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, self.device),
                                                  revision=revision).to(self.device).eval()
        self._base = getattr(lm, lm.base_model_prefix)
        if not self.model_id:  # after loading, so a freshly downloaded HF id resolves to its files
            local = resolve_local(model, revision)
            self.model_id = "rerank:" + (model_identity(model, local) if local is not None else f"{model}@unresolved")
        self.yes_id, self.no_id = self._token_id("yes"), self._token_id("no")
        head = lm.get_output_embeddings()
        rows = head.weight[[self.no_id, self.yes_id]].detach().clone()  # [2, hidden]
        bias = getattr(head, "bias", None)
        self._w = rows
        self._b = bias[[self.no_id, self.yes_id]].detach().clone() if bias is not None else None
        self.instruction = instruction
        self.batch_size = batch_size
        self.max_length = max_length

    def _token_id(self, word: str) -> int:
        tid = self.tokenizer.convert_tokens_to_ids(word)
        if tid is None or tid == self.tokenizer.unk_token_id:
            ids = self.tokenizer.encode(word, add_special_tokens=False)
            if not ids:
                raise ValueError(f"tokenizer cannot encode {word!r}")
            tid = ids[0]
        return int(tid)

    def format(self, query: str, document: str) -> str:
        return format_pair(self.instruction, query, document)

    def _encode_pairs(self, pairs: list[tuple[str, str]]):
        ids = pair_token_ids(self.tokenizer, self.instruction, pairs, self.max_length)
        return self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(self.device)

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """P(yes) per document, float32 ``[len(documents)]`` in input order."""
        return _score_in_batches(query, documents, self.batch_size, self._score_pairs)

    def _score_pairs(self, queries: list[str], documents: list[str]):
        import torch

        enc = self._encode_pairs(list(zip(queries, documents)))
        hidden = self._base(**enc).last_hidden_state[:, -1]  # left padding: last = real token
        logits = hidden.to(self._w.dtype) @ self._w.T
        if self._b is not None:
            logits = logits + self._b
        return torch.softmax(logits.float(), dim=-1)[:, 1]


class CrossEncoderReranker:
    """A sequence-pair classifier scored as a relevance probability (BGE-Reranker-v2-M3, ms-marco MiniLM, ...).

    One logit -> sigmoid; two logits -> softmax, the second class = relevant. The pair is encoded as the
    tokenizer's (query, document) pair, truncated to ``max_length`` (the longer side first: the document).

    Args:
        model: HF id or local folder of an ``AutoModelForSequenceClassification`` checkpoint.
        device, dtype: as for the embedders ("auto" = CUDA + bf16 when available).
        batch_size: pairs per forward pass.
        max_length: token budget per pair.
        revision: the hub commit (or branch) of ``model``; None = main. The GPU configs pin commits.
    """

    def __init__(self, model: str = "BAAI/bge-reranker-v2-m3", *, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 32, max_length: int = 1024, revision: str | None = None) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from mnemis.models.embed import pick_device, pick_dtype

        require_path(model, "reranker model")
        self.device = pick_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model, revision=revision)
        self._model = AutoModelForSequenceClassification.from_pretrained(
            model, dtype=pick_dtype(dtype, self.device), revision=revision).to(self.device).eval()
        labels = int(self._model.config.num_labels)
        if labels not in (1, 2):
            raise ValueError(f"reranker {model}: a cross-encoder needs 1 or 2 output labels, this one has {labels}")
        self.labels = labels
        self.batch_size = batch_size
        self.max_length = max_length
        local = resolve_local(model, revision)
        self.model_id = "rerank:" + (model_identity(model, local) if local is not None else f"{model}@unresolved")

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """Relevance probability per document, float32 ``[len(documents)]`` in input order."""
        return _score_in_batches(query, documents, self.batch_size, self._score_pairs)

    def _score_pairs(self, queries: list[str], documents: list[str]):
        import torch

        enc = self.tokenizer(queries, documents, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt").to(self.device)
        logits = self._model(**enc).logits.float()
        return torch.sigmoid(logits[:, 0]) if self.labels == 1 else torch.softmax(logits, dim=-1)[:, 1]


class CosineReranker:
    """Fallback reranker: cosine similarity of embeddings mapped to [0, 1]."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.model_id = f"cosine:{embedder.model_id}"

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        documents = list(documents)
        if not documents:
            return np.zeros(0, dtype=np.float32)
        if isinstance(query, str):
            q = self.embedder.encode([query], kind="query")
            qv = np.repeat(q, len(documents), axis=0)
        else:
            qv = self.embedder.encode(_queries(query, len(documents)), kind="query")
        d = self.embedder.encode(documents, kind="document")
        cos = np.sum(qv * d, axis=1)
        return np.clip((cos + 1.0) / 2.0, 0.0, 1.0).astype(np.float32)
