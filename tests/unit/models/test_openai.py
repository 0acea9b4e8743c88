"""OpenAIBackend against a tiny scripted HTTP server on 127.0.0.1 (500s, timeouts, bad JSON, 400s, a server gone)."""

from __future__ import annotations

import json

import pytest

from mnemis.models.failures import EngineFailure
from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.openai_backend import NoReply, OpenAIBackend
from tests.helpers.models import GOOD, Facts, FakeServer, make_request


def _req(word: str, i: int = 0, schema=Facts) -> LLMRequest:
    r = make_request(i, schema=schema)
    return r.model_copy(update={"messages": [{"role": "user", "content": f"{word} item {i}"}]})


def _backend(url: str, **kw) -> OpenAIBackend:
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_attempts", 4)
    return OpenAIBackend("fake-model", url, **kw)


def test_success_retries_and_errors_per_item():
    with FakeServer() as srv:
        be = _backend(srv.url)
        words = ["ok", "flaky500", "ratelimit", "slow", "badjson", "forbidden"]
        out = be.complete([_req(w) for w in words])
        with pytest.raises(NoReply, match="no reply after 4 attempts.*500"):  # a 5xx to the end: no reply
            be.complete([_req("ok", 1), _req("always500")])
    byword = dict(zip(words, out))
    for w in ["ok", "flaky500", "ratelimit", "slow", "badjson"]:
        assert byword[w].error is None, (w, byword[w].error)
        assert Facts.model_validate_json(byword[w].text) == Facts.model_validate(GOOD)
        assert byword[w].prompt_tokens == 11 and byword[w].completion_tokens == 7
    assert srv.hits["always500"] == 4
    assert "403" in byword["forbidden"].error and srv.hits["forbidden"] == 1
    assert srv.hits["flaky500"] == 3 and srv.hits["slow"] == 2
    body = next(b for b in srv.bodies if b["messages"][-1]["content"].startswith("ok"))
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == Facts.model_json_schema()


def test_json_schema_rejected_falls_back_to_json_object():
    with FakeServer(reject_json_schema=True) as srv:
        be = _backend(srv.url)
        out = be.complete([_req("ok", i) for i in range(5)])
        assert all(c.error is None for c in out)
        assert be.response_format == "json_object"
        later = be.complete([_req("ok", 9)])
    assert later[0].error is None
    last = srv.bodies[-1]
    assert last["response_format"] == {"type": "json_object"}
    assert "JSON schema" in last["messages"][-1]["content"]


def test_concurrency_is_bounded_and_order_kept():
    with FakeServer() as srv:
        be = _backend(srv.url, max_concurrency=3, timeout_s=5)
        out = be.complete([_req("echo", i) for i in range(15)])
    assert all(c.error is None for c in out)
    assert [json.loads(c.text)["echo"] for c in out] == list(range(15))  # replies in request order
    assert 2 <= srv.peak <= 3  # never more than the bound in flight, and concurrent


def test_unreachable_endpoint_gives_no_reply():
    be = OpenAIBackend("m", "http://127.0.0.1:9/v1", timeout_s=0.3, max_attempts=2, backoff_s=0.01)
    with pytest.raises(NoReply, match="2 attempts.*Connection"):
        be.complete([_req("ok")])


def test_a_batch_past_its_time_limit_gives_no_reply():
    with FakeServer() as srv:
        be = _backend(srv.url, timeout_s=5, batch_timeout_s=0.3)
        with pytest.raises(NoReply, match="batch of 2 requests was unfinished after 0.3 s"):
            be.complete([_req("ok", 0), _req("slow", 1)])  # the first "slow" request takes 1.5 s


def test_through_client_invalid_reply_counted_and_dead_server_raised(tmp_path):
    with FakeServer() as srv:
        llm = LLM(_backend(srv.url), max_retries=1, cache_dir=tmp_path)
        res = llm.generate([_req("ok", 0), _req("invalid", 1)])
        assert [r.ok for r in res] == [True, False]
        st = llm.ledger.stage("extract")
        assert st.failures == 1 and st.retries == 1 and st.prompt_tokens >= 11 * 2
        llm = LLM(_backend(srv.url, max_attempts=2), engine_retries=1, engine_backoff_s=0, cache_dir=tmp_path)
        with pytest.raises(EngineFailure, match="no reply for 2 of 2 .*2 attempt.*500"):
            llm.generate([_req("ok", 2), _req("always500", 3)])
    assert srv.hits["always500"] == 4  # 2 client attempts x 2 HTTP attempts
    assert len(llm.cache) == 2  # only the first call's two replies


def test_empty_batch_and_bad_args():
    assert _backend("http://127.0.0.1:9/v1").complete([]) == []
    with pytest.raises(ValueError):
        OpenAIBackend("m", "http://x", response_format="xml")


def test_missing_key_becomes_empty(monkeypatch):
    monkeypatch.delenv("MNEMIS_TEST_NO_KEY", raising=False)
    assert OpenAIBackend("m", "http://x", api_key_env="MNEMIS_TEST_NO_KEY").api_key == "EMPTY"
