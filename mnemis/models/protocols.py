"""Interfaces of the embedding and reranking models (implementations in embed.py / rerank.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np


class Embedder(Protocol):
    model_id: str
    dim: int

    def encode(self, texts: Sequence[str], *, kind: Literal["query", "document"] = "document") -> np.ndarray:
        """float32 ``[len(texts), dim]``, rows L2-normalised, in input order."""
        ...


class Reranker(Protocol):
    model_id: str

    def score(self, query: str | Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """float32 ``[len(documents)]`` relevance in [0, 1], input order. ``query`` may be one string for
        all documents or one per document."""
        ...
