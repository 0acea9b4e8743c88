"""Chunked stages: a long stage sends its requests ``chunk_size`` at a time and commits each chunk's results
before the next, so a kill loses at most one chunk of work even without the response cache.

The chunk size is the LLM client's ``chunk_size`` (config ``llm_chunk_size``); one chunk is still one
batched ``generate`` per step, so batching is unchanged up to that size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from mnemis.models.llm.base import LLMRequest

T = TypeVar("T")
DEFAULT_CHUNK_SIZE = 1024


def chunk_size(llm: Any) -> int:
    """The client's chunk size (``DEFAULT_CHUNK_SIZE`` for an object without one)."""
    size = getattr(llm, "chunk_size", None)
    return int(size) if isinstance(size, int) and size >= 1 else DEFAULT_CHUNK_SIZE


def request_fingerprint(request: LLMRequest) -> str:
    """What identifies one item of a stage's progress record: its messages and sampling (32 hex chars)."""
    blob = json.dumps({"messages": request.messages, "sampling": request.sampling.model_dump(mode="json")},
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def chunked(items: Sequence[T], size: int) -> Iterator[list[T]]:
    """Consecutive slices of ``items`` of at most ``size`` (none for an empty sequence)."""
    if size < 1:
        raise ValueError("chunk size must be >= 1")
    for i in range(0, len(items), size):
        yield list(items[i:i + size])
