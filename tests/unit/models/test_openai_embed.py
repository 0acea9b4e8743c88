"""OpenAIEmbedder against the scripted OpenAI-compatible server on 127.0.0.1 (batching, retries, errors)."""

from __future__ import annotations

import numpy as np
import pytest

from mnemis.models.openai_embed import EmbeddingError, OpenAIEmbedder
from tests.helpers.models import FakeServer, fake_embedding


def _embedder(url: str, **kw) -> OpenAIEmbedder:
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_attempts", 4)
    return OpenAIEmbedder("fake-embed", url, **kw)


def _expected(texts: list[str], dim: int) -> np.ndarray:
    m = np.asarray([fake_embedding(t, dim) for t in texts], dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_batches_in_order_normalised_and_dimensions_passed():
    texts = [f"ok text {'x' * i}" for i in range(7)] + [""]
    with FakeServer() as srv:
        emb = _embedder(srv.url, batch_size=3, dim=6)
        out = emb.encode(texts)
        q = emb.encode(["ok what"], kind="query")
    assert out.shape == (8, 6) and out.dtype == np.float32
    sent = [b["input"] for b in srv.bodies]
    assert [len(s) for s in sent] == [3, 3, 2, 1]
    assert sent[2][-1] == " "  # an empty text is sent as one space (the API refuses "")
    np.testing.assert_allclose(out, _expected([*texts[:7], " "], 6), rtol=1e-6)
    assert all(b["dimensions"] == 6 and b["model"] == "fake-embed" for b in srv.bodies)
    assert q.shape == (1, 6) and emb.dim == 6 and emb.model_id == "openai:fake-embed:6"
    with pytest.raises(ValueError):
        emb.encode(["x"], kind="passage")


def test_model_size_learned_and_instruction_only_on_queries():
    with FakeServer() as srv:
        emb = _embedder(srv.url, query_instruction="ok Q: ")
        assert emb.dim is None and emb.encode([]).shape == (0, 0)
        emb.encode(["ok doc"])
        emb.encode(["where?"], kind="query")
    assert emb.dim == 4
    assert srv.bodies[0]["input"] == ["ok doc"] and srv.bodies[1]["input"] == ["ok Q: where?"]
    assert "dimensions" not in srv.bodies[0]
    assert OpenAIEmbedder("text-embedding-3-small", "http://127.0.0.1:9/v1").dim == 1536


def test_retryable_errors_are_retried():
    with FakeServer() as srv:
        emb = _embedder(srv.url)
        a = emb.encode(["flaky500 a", "b"])
        b = emb.encode(["ratelimit c"])
    assert srv.hits["flaky500"] == 3 and srv.hits["ratelimit"] == 2
    np.testing.assert_allclose(a, _expected(["flaky500 a", "b"], 4), rtol=1e-6)
    assert b.shape == (1, 4)


@pytest.mark.parametrize("word,match", [("always500", "gave up after 3 attempts"), ("forbidden", "HTTP 401"),
                                        ("short", "1 embeddings for 2 texts")])
def test_failures_raise_a_clear_error(word, match):
    with FakeServer() as srv:
        emb = _embedder(srv.url, max_attempts=3, batch_size=2)
        with pytest.raises(EmbeddingError, match=match) as err:
            emb.encode(["ok fine", "ok fine too", f"{word} x", "y"])
    assert "'fake-embed'" in str(err.value) and "texts 2..3" in str(err.value) and srv.url in str(err.value)
    assert srv.hits[word] == (3 if word == "always500" else 1)


def test_size_mismatch_and_unreachable_endpoint():
    with FakeServer() as srv:
        emb = _embedder(srv.url)
        emb.dim = 8  # e.g. the configured model's known size differs from what the server returns
        with pytest.raises(EmbeddingError, match="got 4-dimensional embeddings, expected 8"):
            emb.encode(["ok"])
    down = OpenAIEmbedder("m", "http://127.0.0.1:9/v1", timeout_s=0.3, max_attempts=2, backoff_s=0.01)
    with pytest.raises(EmbeddingError, match="gave up after 2 attempts: APIConnectionError"):
        down.encode(["ok"])
    with pytest.raises(ValueError):
        OpenAIEmbedder("m", "http://x", dim=0)
