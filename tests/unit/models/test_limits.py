"""Model limits: HTTP 400s classified by their wording, budgets clamped to the cap and the window less the prompt,
clamps / refusals / format switches counted in the ledger (OpenAIBackend against a fake server on 127.0.0.1)."""

from __future__ import annotations

import pytest

from mnemis.models.cache import request_key
from mnemis.models.llm.base import Sampling
from mnemis.models.llm.client import LLM
from mnemis.models.llm.limits import (
    FORMAT,
    LIMIT,
    OTHER,
    ModelLimits,
    SchemaDecodingRefused,
    classify_rejection,
    estimate_prompt_tokens,
)
from mnemis.models.llm.openai_backend import OpenAIBackend
from mnemis.models.llm.scripted import SchemaFakeBackend
from tests.helpers.models import REFUSED_FORMAT, Facts, FakeServer, make_request

# wordings of the OpenAI API and of vLLM's OpenAI-compatible server (0.32 and earlier)
LIMIT_MESSAGES = [
    "max_tokens is too large: 56779. This model supports at most 32768 completion tokens, whereas you provided 56779.",
    "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens (64 in the messages, "
    "8192 in the completion). Please reduce the length of the messages or completion.",
    "max_tokens=40000 cannot be greater than max_model_len=32768. Please request fewer output tokens.",
    "max_completion_tokens=40000 cannot be greater than max_model_len=32768. Please request fewer output tokens.",
    "This model's maximum context length is 2048 tokens. However, your prompt contains 2100 input tokens, which "
    "exceeds this limit even without any output tokens. Please reduce the length of the input prompt.",
    "Input length (2100) exceeds model's maximum context length (2048).",
    "The decoder prompt (length 2100) is longer than the maximum model length of 2048. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    "'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's maximum context length is 64001 "
    "tokens and your request has 24235 input tokens (64000 > 64001 - 24235).",
]
FORMAT_MESSAGES = [
    REFUSED_FORMAT,
    "The parameter `response_format.type` specified in the request are not valid: invalid value: `json_schema`, "
    "supported values are: `json_object` and `text`.",
    "Unrecognized request argument supplied: response_format",
]
OTHER_MESSAGES = [
    "The provided JSON schema contains features not supported by xgrammar.",
    "Unsupported parameter: 'seed' is not supported with this model.",
    "'messages' must contain the word 'json' in some form",
]


@pytest.mark.parametrize("message", LIMIT_MESSAGES)
def test_limit_wordings_are_limit_errors(message):
    assert classify_rejection(message) == LIMIT


@pytest.mark.parametrize("message", FORMAT_MESSAGES)
def test_only_an_explicit_format_refusal_is_a_format_error(message):
    assert classify_rejection(message) == FORMAT


@pytest.mark.parametrize("message", OTHER_MESSAGES)
def test_other_400s_are_neither(message):
    assert classify_rejection(message) == OTHER


def test_context_length_code_alone_is_a_limit():
    assert classify_rejection("Bad request", param="messages", code="context_length_exceeded") == LIMIT
    assert classify_rejection("Invalid value", param="response_format", code=None) == FORMAT


def test_room_is_the_smaller_of_cap_and_window_less_prompt():
    lim = ModelLimits(32_768, 1_047_576, "config")
    assert lim.room(1_000) == 32_768 and lim.room(1_040_000) == 7_576
    assert ModelLimits(None, 4096).room(1000) == 3096 and ModelLimits().room(10) is None
    with pytest.raises(ValueError, match="max_model_len"):
        ModelLimits(None, 0, "llm.backend")


def test_estimate_bounds_bytes_and_schema():
    msgs = [{"role": "user", "content": "héllo"}]  # é is two UTF-8 bytes
    assert estimate_prompt_tokens(msgs) >= len("héllo".encode()) + 1
    assert estimate_prompt_tokens(msgs, Facts.model_json_schema()) > estimate_prompt_tokens(msgs) + 100


def _backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend("fake-model", url, timeout_s=2, backoff_s=0.01, max_attempts=2, **kw)


def _req(word: str, i: int = 0, max_tokens: int = 64):
    r = make_request(i, max_tokens=max_tokens)
    return r.model_copy(update={"messages": [{"role": "user", "content": f"{word} item {i}"}]})


@pytest.mark.parametrize("message", LIMIT_MESSAGES[:3])
def test_a_limit_400_fails_the_item_and_keeps_the_format(message):
    with FakeServer(reject_json_schema=message) as srv:
        be = _backend(srv.url)
        llm = LLM(be, max_retries=2)
        res = llm.generate([_req("ok", i) for i in range(3)])
    assert all(not r.ok and "HTTP 400 (limit)" in r.error for r in res)
    assert be.response_format == "json_schema" and be.format_downgrade is None
    assert all(b["response_format"]["type"] == "json_schema" for b in srv.bodies)
    assert len(srv.bodies) == 3  # a limit error is not re-asked: the same request would be refused again
    st = llm.ledger.stage("extract")
    assert st.over_limit == 3 and st.failures == 3 and st.unconstrained == 0 and st.retries == 0


def test_a_format_refusal_switches_once_and_counts_every_unconstrained_request(caplog):
    with FakeServer(reject_json_schema=True) as srv:
        be = _backend(srv.url)
        llm = LLM(be)
        res = llm.generate([_req("ok", i) for i in range(4)])
        assert all(r.ok for r in res)
        llm.generate([_req("ok", 9)])
    assert be.response_format == "json_object" and "not supported" in be.format_downgrade
    assert [r.levelname for r in caplog.records if "refused response_format" in r.message] == ["ERROR"]
    assert llm.ledger.stage("extract").unconstrained == 5
    last = srv.bodies[-1]
    assert last["response_format"] == {"type": "json_object"} and "JSON schema" in last["messages"][-1]["content"]


def test_another_400_fails_the_item_without_a_switch():
    with FakeServer(reject_json_schema=OTHER_MESSAGES[0]) as srv:
        be = _backend(srv.url)
        (c,) = be.complete([_req("ok")])
    assert c.error.startswith("HTTP 400 (other)") and not c.over_limit and be.response_format == "json_schema"


def test_json_schema_only_stops_the_run_on_a_format_refusal():
    with FakeServer(reject_json_schema=True) as srv:
        llm = LLM(_backend(srv.url, response_format="json_schema_only"))
        with pytest.raises(SchemaDecodingRefused, match="json_schema_only"):
            llm.generate([_req("ok", i) for i in range(2)])


def test_limits_read_from_the_server_narrow_the_configured_ones():
    rows = [{"id": "other", "max_model_len": 99}, {"id": "fake-model", "object": "model", "max_model_len": 2048}]
    with FakeServer(models=rows) as srv:
        lim = _backend(srv.url, max_completion_tokens=32_768, max_model_len=1_047_576).limits()
        assert (lim.max_completion_tokens, lim.max_model_len) == (32_768, 2048) and "server" in lim.source
        assert lim.prompt_count == "the server's /tokenize"
    with FakeServer(models=[{"id": "fake-model", "object": "model"}]) as srv:  # the OpenAI API reports none
        lim = _backend(srv.url, max_completion_tokens=32_768, max_model_len=1_047_576).limits()
        assert (lim.max_model_len, lim.source) == (1_047_576, "config") and lim.prompt_count.startswith("estimate")


def test_a_server_that_cannot_be_asked_leaves_the_configured_limits_and_is_asked_again():
    be = OpenAIBackend("m", "http://127.0.0.1:9/v1", timeout_s=0.3, max_completion_tokens=100)
    assert be.limits().max_completion_tokens == 100 and be._limits is None


def test_clamped_budgets_are_counted_per_stage_and_never_exceed_the_limits():
    with FakeServer(models=[{"id": "fake-model", "object": "model"}]) as srv:
        be = _backend(srv.url, max_completion_tokens=500, max_model_len=1000)
        llm = LLM(be)
        res = llm.generate([_req("ok", 0, max_tokens=64), _req("ok", 1, max_tokens=5000),
                            _req("ok", 2, max_tokens=900).model_copy(update={"stage": "other"})])
    assert all(r.ok for r in res)
    asked = sorted(b["max_tokens"] for b in srv.bodies)
    prompt = estimate_prompt_tokens([{"role": "user", "content": "ok item 2"}])
    assert asked[0] == 64 and asked[1] == 500 and asked[2] == min(500, 1000 - prompt)
    assert llm.ledger.stage("extract").clamped == 1 and llm.ledger.stage("other").clamped == 1
    assert llm.ledger.total().over_limit == 0


def test_a_prompt_that_fills_the_window_is_not_sent():
    backend = SchemaFakeBackend(max_model_len=50)
    llm = LLM(backend, max_retries=2)
    long = make_request(0, max_tokens=10).model_copy(update={"messages": [{"role": "user", "content": "x " * 40}]})
    (res,) = llm.generate([long])
    assert not res.ok and "no room for a reply" in res.error and backend.batches == []
    assert llm.ledger.stage("extract").over_limit == 1


def test_auto_budget_above_the_cap_is_clamped_and_a_cut_reply_counted():
    from mnemis.models.llm.scripted import Cut, ScriptedBackend

    class Capped(ScriptedBackend):
        def limits(self):
            return ModelLimits(20, None, "config")

    cut = '{"confidence": 0.5, "facts": [{"subject": "Ann", "relation": "likes", "obj": "tea"}, {"sub'
    backend = Capped(lambda r: Cut(cut))
    llm = LLM(backend, max_retries=0)
    big = make_request(0).model_copy(update={"sampling": Sampling(max_tokens=5000)})
    (res,) = llm.generate([big])
    assert backend.requests[0].sampling.max_tokens == 20
    assert res.salvaged and res.truncated and len(res.parsed.facts) == 1  # the complete item kept
    st = llm.ledger.stage("extract")
    assert (st.clamped, st.clamped_cut, st.over_limit) == (1, 1, 0)


def test_a_refusal_is_stored_as_one_replayed_as_one_and_asked_again_live(tmp_path):
    """A prompt refused for the window is stored as a refusal (no reply): a replay without the served model serves
    it and counts it over the limit as the live run did (so the run's limits warning replays); a live run asks it
    again, since the model it serves may have a larger window."""
    from mnemis.models.llm.client import OVER_LIMIT

    long = make_request(0, max_tokens=10).model_copy(update={"messages": [{"role": "user", "content": "x " * 40}]})
    live = LLM(SchemaFakeBackend(max_model_len=50), cache_dir=tmp_path, max_retries=2)
    (res,) = live.generate([long])
    assert res.over_limit and live.ledger.stage("extract").over_limit == 1
    (stored,) = live.cache.get_many([request_key(live.model_id, long)]).values()
    assert stored.finish_reason == OVER_LIMIT and stored.text == "" and "no room for a reply" in stored.error
    replay = LLM(SchemaFakeBackend(), cache_dir=tmp_path, cache_mode="replay_only")  # no limits known
    (again,) = replay.generate([long])
    assert again.cached and again.over_limit and not again.ok and again.error == res.error
    st = replay.ledger.stage("extract")
    assert (st.over_limit, st.failures, st.cache_hits) == (1, 1, 1)
    wider = SchemaFakeBackend(max_model_len=4096)  # a live run on a wider window asks again, and gets a reply
    (answered,) = LLM(wider, cache_dir=tmp_path).generate([long])
    assert answered.ok and len(wider.batches) == 1
    (kept,) = LLM(SchemaFakeBackend(), cache_dir=tmp_path, cache_mode="replay_only").generate([long])
    assert kept.ok and not kept.over_limit  # the reply replaced the refusal
