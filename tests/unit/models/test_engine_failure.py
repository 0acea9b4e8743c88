"""An engine that gives no reply is an error, never an answer (mnemis.models.failures): the client retries with
back-off, then raises ``EngineFailure``; nothing of it is cached; replies the model did produce are kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemis.models.cache import CachedReply, ResponseCache, request_key
from mnemis.models.failures import EngineFailure, with_retries
from mnemis.models.llm import client as client_mod
from mnemis.models.llm.base import Completion
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import Refused, ScriptedBackend
from mnemis.models.llm.vllm_backend import refused
from mnemis.models.openai_embed import EmbeddingError
from mnemis.models.rerank_cache import CachedReranker
from tests.helpers.models import GOOD, make_request


class DiesAfter(ScriptedBackend):
    """Answers its first ``alive`` batches, then raises on every batch (a dead engine)."""

    def __init__(self, alive: int) -> None:
        super().__init__(lambda r: GOOD, model_id="m")
        self.alive, self.calls = alive, 0

    def complete(self, requests):
        self.calls += 1
        if self.calls > self.alive:
            raise RuntimeError("EngineDeadError: EngineCore encountered an issue")
        return super().complete(requests)


@pytest.fixture
def waits(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    return slept


def test_dead_engine_raises_after_backoff_and_stores_nothing(tmp_path, waits):
    be = DiesAfter(alive=2)
    llm = LLM(be, cache_dir=tmp_path, engine_retries=3, engine_backoff_s=0.5)
    llm.generate([make_request(0)])
    llm.generate([make_request(1)])
    with pytest.raises(EngineFailure, match=r"stage 'extract'.*no reply for 2 of 2 .* 4 attempt.*EngineDeadError"):
        llm.generate([make_request(2), make_request(3)])
    assert waits == [0.5, 1.0, 2.0] and be.calls == 6
    cache = ResponseCache(tmp_path)
    assert len(cache) == 2 and cache.failures() == 0  # the two answered requests only
    healthy = ScriptedBackend(lambda r: GOOD, model_id="m")
    again = LLM(healthy, cache_dir=tmp_path).generate([make_request(i) for i in range(4)])  # retry_failed: False
    assert all(r.ok for r in again) and [len(b) for b in healthy.batches] == [2]  # exactly the unanswered two


def test_a_mixed_batch_keeps_the_answered_items_and_raises(tmp_path, waits):
    def respond(r):
        return RuntimeError("connection reset") if "episode 1" in r.messages[-1]["content"] else GOOD

    with pytest.raises(EngineFailure, match="no reply for 1 of 3") as info:
        LLM(ScriptedBackend(respond, model_id="m"), cache_dir=tmp_path, engine_retries=2,
            engine_backoff_s=0).generate([make_request(i) for i in range(3)])
    assert info.value.items == 1
    stored = ResponseCache(tmp_path).get_many([request_key("m", make_request(i)) for i in range(3)])
    assert sorted(stored) == sorted(request_key("m", make_request(i)) for i in (0, 2))


def test_a_transient_failure_recovers_within_the_retries(waits, caplog):
    replies = {"extract": [RuntimeError("HTTP 503"), RuntimeError("HTTP 503"), GOOD]}
    llm = LLM(ScriptedBackend(replies), engine_retries=2, engine_backoff_s=1.0)
    (res,) = llm.generate([make_request(0)])
    assert res.ok and waits == [1.0, 2.0]
    assert "retry 2 of 2" in caplog.text and llm.ledger.stage("extract").failures == 0


def test_validation_failures_still_fail_the_item_and_are_cached(tmp_path):
    """A reply the model produced that never validates is an answer (a failed one): counted, stored, no raise."""
    llm = LLM(ScriptedBackend(lambda r: "not json", model_id="m"), cache_dir=tmp_path, max_retries=1)
    (res,) = llm.generate([make_request(0)])
    assert not res.ok and ResponseCache(tmp_path).failures() == 1


def test_a_refused_request_fails_alone_without_retries(tmp_path, waits):
    def respond(r):
        return Refused("prompt longer than the context") if "episode 1" in r.messages[-1]["content"] else GOOD

    be = ScriptedBackend(respond, model_id="m")
    res = LLM(be, cache_dir=tmp_path, max_retries=2).generate([make_request(i) for i in range(3)])
    assert [r.ok for r in res] == [True, False, True] and res[1].error.startswith("request refused: prompt longer")
    assert len(be.batches) == 1 and waits == []  # neither an engine retry nor a reply retry
    assert ResponseCache(tmp_path).failures() == 1  # a replay reproduces it
    be2 = ScriptedBackend(lambda r: GOOD, model_id="m")
    assert all(r.ok for r in LLM(be2, cache_dir=tmp_path, retry_failed=True).generate([make_request(1)]))


def test_an_engine_failure_an_older_version_stored_is_asked_again_but_replayed_as_stored(tmp_path):
    key = request_key("m", make_request(0))
    ResponseCache(tmp_path).put_many([(key, "m", "extract", CachedReply("", 0, 0, error="backend error: EngineDead"))])
    be = ScriptedBackend(lambda r: GOOD, model_id="m")
    (res,) = LLM(be, cache_dir=tmp_path).generate([make_request(0)])
    assert res.ok and not res.cached and len(be.batches) == 1
    ResponseCache(tmp_path).put_many([(key, "m", "extract", CachedReply("", 0, 0, error="backend error: EngineDead"))])
    (old,) = LLM(be, cache_dir=tmp_path, cache_mode="replay_only").generate([make_request(0)])
    assert old.error == "backend error: EngineDead"  # an archive made before reproduces its run


def test_engine_retry_settings_are_checked():
    with pytest.raises(ValueError, match="engine_retries"):
        LLM(ScriptedBackend(lambda r: GOOD), engine_retries=-1)


# ---------------------------------------------------------------- reranker, embedder, vLLM
class FlakyReranker:
    model_id = "rr"

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def score(self, queries, documents):
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("CUDA error: out of memory")
        return np.arange(len(documents), dtype=np.float32)


def test_reranker_retries_then_raises_and_caches_nothing(tmp_path):
    ok = CachedReranker(FlakyReranker(failures=2), tmp_path, engine_retries=2, engine_backoff_s=0)
    assert ok.score("q", ["a", "b"]).tolist() == [0.0, 1.0]
    dead = CachedReranker(FlakyReranker(failures=99), tmp_path / "dead", engine_retries=1, engine_backoff_s=0)
    with pytest.raises(EngineFailure, match="stage 'rerank'.*2 item.*2 attempt.*out of memory"):
        dead.score("q", ["c", "d"])
    assert dead._db._rows("SELECT key FROM scores") == []


def test_with_retries_backs_off_doubling():
    slept: list[float] = []
    calls = iter([ConnectionResetError("reset"), ConnectionResetError("reset"), 7])

    def call():
        v = next(calls)
        if isinstance(v, Exception):
            raise v
        return v

    assert with_retries(call, stage="embed", items=3, retries=2, first_backoff_s=0.25, sleep=slept.append) == 7
    assert slept == [0.25, 0.5]


def test_embedding_errors_are_engine_failures():
    err = EmbeddingError("model e at http://x: gave up after 5 attempts")
    assert isinstance(err, EngineFailure) and err.stage == "embed"


def _exc(name: str, base: type[Exception] = Exception) -> Exception:
    parent = type("VLLMServerError" if "Dead" in name else "VLLMClientError", (base,), {})
    return type(name, (parent,), {})("x")


def test_vllm_refusals_are_told_from_engine_deaths():
    assert refused(_exc("VLLMValidationError"))  # a prompt longer than the context
    assert refused(ValueError("grammar cannot be compiled"))
    assert not refused(_exc("EngineDeadError"))
    assert not refused(_exc("EngineDeadError", ValueError))  # a server error is never a refusal
    assert not refused(RuntimeError("CUDA error: an illegal memory access was encountered"))


def test_completion_refused_defaults_to_an_engine_error():
    c = Completion(text="", error="boom")
    assert not c.refused and json.loads(c.model_dump_json())["refused"] is False
