"""Text embedders: sentence-transformers (MiniLM CPU default), Qwen3-Embedding, feature hashing.

All return float32 ``[N, dim]`` with L2-normalised rows in input order; empty input -> ``[0, dim]``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from mnemis import progress
from mnemis.models.tiny import MINILM, locate_minilm, model_identity, require_path, resolve_local

Kind = Literal["query", "document"]
_TOKEN = re.compile(r"\w+", re.UNICODE)


def _l2(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _check_kind(kind: str) -> None:
    if kind not in ("query", "document"):
        raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")


def matryoshka_dim(dim: int | None, full: int, model: str) -> int:
    """The output size: ``dim`` leading dimensions (Matryoshka truncation) or the model's ``full`` size."""
    if dim is not None and not 0 < dim <= full:
        raise ValueError(f"dim={dim} must be in [1, {full}] for {model}")
    return int(dim or full)


def pick_device(device: str = "auto") -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(dtype: str, device: str):
    """torch dtype for ``dtype`` ("auto" = bf16 on CUDA, fp32 on CPU)."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
            "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[dtype]


class HashingEmbedder:
    """Deterministic feature hashing of lower-cased word unigrams and bigrams (unit tests, dry runs)."""

    def __init__(self, dim: int = 256) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = int(dim)
        self.model_id = f"hashing-{self.dim}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def encode(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        _check_kind(kind)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            toks = _TOKEN.findall(text.lower())
            feats = toks + [f"{a} {b}" for a, b in zip(toks, toks[1:])]
            for f in feats:
                j, s = self._bucket(f)
                out[row, j] += s
            if not feats:  # empty text: a fixed unit vector rather than zeros
                out[row, self._bucket("<empty>")[0]] = 1.0
        return _l2(out)


class SentenceTransformerEmbedder:
    """A sentence-transformers model ("minilm" = the all-MiniLM-L6-v2 folder shipped on PyPI).

    Args:
        model: "minilm", an HF id or a local folder.
        device: "auto", "cpu", "cuda", ...
        dtype: "auto" (fp16 on CUDA), "float32", "float16", "bfloat16".
        batch_size: encode batch size.
        dim: Matryoshka truncation to the first ``dim`` dimensions (None = full size).
        query_instruction: text prepended to queries only.
        normalize: L2-normalise rows (always re-applied after truncation).
        query_precision: weights used for ``kind="query"`` only; documents always use ``dtype``.
            "same" = the document model; "int8" = dynamic int8 quantisation of every Linear layer
            (CPU only; queries go one per forward pass so a vector never depends on its batch); "bfloat16" = a bf16 copy (fast only on CPUs with AVX512-BF16/AMX);
            "auto" = "int8" on CPU, "same" on CUDA. A single short query on CPU is bound by reading the
            weights, so int8 reads a quarter of the bytes: see experiments/bench/system1_latency.py for
            the latency and experiments/bench/system1_recall.py for the recall it costs.
        revision: the hub commit (or branch) of ``model``; None = main. The GPU configs pin commits.
    """

    def __init__(self, model: str = MINILM, *, device: str = "auto", dtype: str = "auto", batch_size: int = 64,
                 dim: int | None = None, query_instruction: str | None = None, normalize: bool = True,
                 query_precision: QueryPrecision = "same", revision: str | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        if model == MINILM:
            path, name = str(locate_minilm()), "all-MiniLM-L6-v2"
        else:
            require_path(model, "embedder model")
            path, name = model, model
        self.device = pick_device(device)
        self._model = SentenceTransformer(path, device=self.device, revision=revision)
        if self.device.startswith("cuda"):
            self._model = self._model.to(pick_dtype("float16" if dtype == "auto" else dtype, self.device))
        elif dtype not in ("auto", "float32", "fp32"):
            self._model = self._model.to(pick_dtype(dtype, self.device))
        full = self._model.get_embedding_dimension() if hasattr(self._model, "get_embedding_dimension") \
            else self._model.get_sentence_embedding_dimension()
        self.dim = matryoshka_dim(dim, full, name)
        self.batch_size = batch_size
        self.query_instruction = query_instruction
        self.normalize = normalize
        local = Path(path) if Path(path).exists() else resolve_local(path, revision)
        self.model_id = f"{model_identity(name, local)}:{self.dim}"
        self.query_precision = resolve_query_precision(query_precision, self.device)
        self._query_model = query_model(self._model, self.query_precision)

    def encode(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        _check_kind(kind)
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if kind == "query" and self.query_instruction:
            texts = [self.query_instruction + t for t in texts]
        model = self._query_model if kind == "query" else self._model
        if kind == "query" and self.query_precision == "int8":
            # dynamic int8 scales activations per tensor, so a padded batch would change each row: one
            # query per forward pass keeps a query's vector independent of what it is batched with
            emb = np.concatenate([self._forward(model, [t]) for t in texts])
        elif len(texts) <= 8:  # a few queries: one direct forward pass (encode()'s batching has a fixed cost)
            emb = self._forward(model, texts)
        else:
            emb = model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                               show_progress_bar=False, normalize_embeddings=False)
        emb = np.asarray(emb, dtype=np.float32)[:, : self.dim]
        release_cached(str(self.device))
        return _l2(emb) if self.normalize else emb

    def _forward(self, model, texts: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            prep = model.preprocess if hasattr(model, "preprocess") else model.tokenize
            features = prep(texts)
            features = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in features.items()}
            return model(features)["sentence_embedding"].float().cpu().numpy()


QueryPrecision = Literal["auto", "same", "int8", "bfloat16"]


def resolve_query_precision(precision: str, device: str) -> str:
    """``"auto"`` -> "int8" on CPU, "same" elsewhere; int8 on a GPU device is refused (dynamic int8 is CPU-only)."""
    if precision not in ("auto", "same", "int8", "bfloat16"):
        raise ValueError(f"query_precision must be one of auto, same, int8, bfloat16; got {precision!r}")
    on_cpu = device == "cpu"
    if precision == "auto":
        return "int8" if on_cpu else "same"
    if precision == "int8" and not on_cpu:
        raise ValueError(f"query_precision=int8 needs device=cpu (dynamic int8 kernels are CPU-only), got {device!r}")
    return precision


def query_model(model, precision: str):
    """The module that embeds queries: ``model`` itself, or a quantised / bf16 copy (weights shared otherwise)."""
    if precision == "same":
        return model
    import copy
    import warnings

    import torch

    clone = copy.deepcopy(model).eval()
    if precision == "bfloat16":
        return clone.to(torch.bfloat16)
    with warnings.catch_warnings():  # torch.ao eager quantisation warns that it is moving to torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(clone, {torch.nn.Linear}, dtype=torch.qint8)


class Qwen3Embedder:
    """Qwen3-Embedding: last-token pooling, query instruction, Matryoshka truncation + renormalisation.

    Queries are formatted ``Instruct: {task}\\nQuery:{q}``; documents are embedded as is. ``revision``: the hub
    commit (or branch) of ``model``; None = main (the GPU configs pin commits).
    """

    def __init__(self, model: str = "Qwen/Qwen3-Embedding-0.6B", *, dim: int | None = 128, device: str = "auto",
                 dtype: str = "auto", batch_size: int = 32,
                 query_instruction: str = "Given a question, retrieve passages that answer it",
                 max_length: int = 8192, revision: str | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        require_path(model, "embedder model")
        self.device = pick_device(device)
        self._tok = AutoTokenizer.from_pretrained(model, padding_side="left", revision=revision)
        self._model = AutoModel.from_pretrained(model, dtype=pick_dtype(dtype, self.device),
                                                revision=revision).to(self.device).eval()
        full = int(self._model.config.hidden_size)
        self.dim = matryoshka_dim(dim, full, model)
        self.batch_size = batch_size
        self.query_instruction = query_instruction
        self.max_length = max_length
        self.model_id = f"{model_identity(model, revision=revision)}:{self.dim}"

    def format(self, text: str, kind: Kind) -> str:
        return f"Instruct: {self.query_instruction}\nQuery:{text}" if kind == "query" else text

    def encode(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        import torch

        _check_kind(kind)
        texts = [self.format(t, kind) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths per batch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        bar = progress.start(f"embed {kind}s", len(texts), min_items=progress.LONG_BATCH)
        with torch.inference_mode():
            for s in range(0, len(texts), self.batch_size):
                idx = order[s : s + self.batch_size]
                enc = self._tok([texts[i] for i in idx], padding=True, truncation=True,
                                max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self._model(**enc).last_hidden_state
                pooled = last_token_pool(hidden, enc["attention_mask"])[:, : self.dim]
                out[idx] = pooled.float().cpu().numpy()
                if bar is not None:
                    bar.update(len(idx))
        if bar is not None:
            bar.close()
        release_cached(self.device)
        return _l2(out)


def release_cached(device: str) -> None:
    """Hand the caching allocator's free blocks back to CUDA after a batch of batches: the longest batch's
    activations would otherwise stay reserved, and a vLLM engine started next (the build's LLM after the episodes
    are embedded) finds that much less free memory at its start-up check (:mod:`mnemis.gpu_plan`)."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def last_token_pool(hidden, attention_mask):
    """Hidden state of each row's last real token (handles left and right padding)."""
    import torch

    if bool((attention_mask[:, -1] == 1).all()):
        return hidden[:, -1]
    lengths = attention_mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths]
