"""OpenAI-compatible embedding backend (``/v1/embeddings``): hosted OpenAI models such as
``text-embedding-3-small`` (the Mem0 paper's embedder) or any server speaking the same API.

``encode`` sends the texts in batches of ``batch_size`` (in order), retries timeouts, connection
errors, 408/409/429 and 5xx with exponential backoff, and raises :class:`EmbeddingError` naming the
model, the endpoint and the batch when a batch still fails, when the server refuses the request (any
other 4xx) or when its reply is malformed (wrong count, missing index, ragged dimensions). Rows are
returned float32, L2-normalised, in input order, like every other embedder. ``dim`` asks the server for
shortened vectors (the API's ``dimensions`` field); None keeps the model's size.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemis.models.embed import Kind, _check_kind, _l2
from mnemis.models.failures import EngineFailure

log = logging.getLogger(__name__)
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
RETRY_STATUS = (408, 409, 429)


class EmbeddingError(EngineFailure):
    """An embedding request failed for good (after retries, or a refused / malformed reply); it stops the stage
    as any engine failure does (:mod:`mnemis.models.failures`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, stage="embed")


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint.

    Args:
        model: model name as the server knows it (e.g. ``text-embedding-3-small``).
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        api_key_env: environment variable holding the key (missing -> "EMPTY", fine for local servers).
        dim: requested output size (``dimensions``); None = the model's size.
        batch_size: texts per request.
        timeout_s: per-request timeout.
        max_attempts: attempts per batch for retryable errors.
        backoff_s: first backoff; doubles each attempt (with jitter).
        query_instruction: text prepended to queries only.
        model_id: identity in build hashes; defaults to ``openai:{model}:{dim}``.
    """

    def __init__(self, model: str, base_url: str, *, api_key_env: str = "OPENAI_API_KEY", dim: int | None = None,
                 batch_size: int = 256, timeout_s: float = 60.0, max_attempts: int = 5, backoff_s: float = 1.0,
                 query_instruction: str | None = None, model_id: str | None = None) -> None:
        if batch_size < 1 or max_attempts < 1:
            raise ValueError("batch_size and max_attempts must be >= 1")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be positive, got {dim}")
        self.model, self.base_url = model, base_url
        self.api_key = os.environ.get(api_key_env) or "EMPTY"
        self.requested_dim = dim
        self.dim: int | None = dim or KNOWN_DIMS.get(model)
        self.batch_size, self.timeout_s = batch_size, timeout_s
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
        self.query_instruction = query_instruction
        self.model_id = model_id or f"openai:{model}:{dim or 'full'}"
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s,
                                         max_retries=0)
        return self._client

    def _where(self, start: int, n: int) -> str:
        return f"embedding model {self.model!r} at {self.base_url}, texts {start}..{start + n - 1}"

    def _batch(self, texts: list[str], start: int) -> np.ndarray:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.requested_dim is not None:
            kwargs["dimensions"] = self.requested_dim
        last = "no attempt"
        for attempt in range(1, self.max_attempts + 1):
            try:
                resp = self._get_client().embeddings.create(**kwargs)
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            except openai.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code not in RETRY_STATUS:
                    raise EmbeddingError(f"{self._where(start, len(texts))}: HTTP {exc.status_code}: {exc}") from exc
                last = f"HTTP {exc.status_code}: {exc}"
            except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
                last = f"malformed response: {type(exc).__name__}: {exc}"
            else:
                return self._parse(resp, len(texts), start)
            if attempt < self.max_attempts:
                log.warning("%s: attempt %d failed (%s); retrying", self._where(start, len(texts)), attempt, last)
                time.sleep(self.backoff_s * (2 ** (attempt - 1)) * (1 + 0.1 * random.random()))
        raise EmbeddingError(f"{self._where(start, len(texts))}: gave up after {self.max_attempts} attempts: {last}")

    def _parse(self, resp: Any, n: int, start: int) -> np.ndarray:
        data = list(getattr(resp, "data", None) or [])
        where = self._where(start, n)
        if len(data) != n:
            raise EmbeddingError(f"{where}: the reply has {len(data)} embeddings for {n} texts")
        rows: list[Any] = [None] * n
        for item in data:
            idx = getattr(item, "index", None)
            if not isinstance(idx, int) or not 0 <= idx < n or rows[idx] is not None:
                raise EmbeddingError(f"{where}: bad or repeated index {idx!r} in the reply")
            rows[idx] = getattr(item, "embedding", None)
        dims = {len(r) if isinstance(r, list) else -1 for r in rows}
        if len(dims) != 1 or -1 in dims or 0 in dims:
            raise EmbeddingError(f"{where}: embeddings missing or of different sizes {sorted(dims)}")
        d = dims.pop()
        if self.dim is not None and d != self.dim:
            raise EmbeddingError(f"{where}: got {d}-dimensional embeddings, expected {self.dim}")
        self.dim = d
        return np.asarray(rows, dtype=np.float32)

    def encode(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        _check_kind(kind)
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        if kind == "query" and self.query_instruction:
            texts = [self.query_instruction + t for t in texts]
        texts = [t if t.strip() else " " for t in texts]  # the API refuses empty strings
        out = [self._batch(texts[i:i + self.batch_size], i) for i in range(0, len(texts), self.batch_size)]
        return _l2(np.concatenate(out))
