"""The model layer: LLM client + backends, embedders, rerankers, response cache and cost ledger.

Importing this package is cheap: vllm, torch, transformers and friends load only when a backend,
embedder or reranker is constructed.
"""

from __future__ import annotations

from mnemis.models.cache import CacheMissError, ResponseCache
from mnemis.models.embed import HashingEmbedder, Qwen3Embedder, SentenceTransformerEmbedder
from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import Completion, LLMRequest, LLMResult, Sampling
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import SchemaFakeBackend, ScriptedBackend
from mnemis.models.protocols import Embedder, Reranker
from mnemis.models.rerank import CausalLMReranker, CosineReranker

__all__ = [
    "LLM", "CacheMissError", "CausalLMReranker", "Completion", "CosineReranker", "Embedder", "HashingEmbedder",
    "LLMRequest", "LLMResult", "Ledger", "Qwen3Embedder", "Reranker", "ResponseCache", "Sampling",
    "SchemaFakeBackend", "ScriptedBackend", "SentenceTransformerEmbedder",
]
