from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError

from mnemis.models.cache import CacheMissError, ResponseCache, request_key
from mnemis.models.failures import EngineFailure
from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import Completion, LLMRequest, Sampling
from mnemis.models.llm.client import LLM, parse_reply
from mnemis.models.llm.scripted import SchemaFakeBackend, ScriptedBackend
from tests.helpers.models import GOOD, Facts, make_request


def test_empty_batch_makes_no_backend_call(tmp_path):
    be = ScriptedBackend(lambda r: GOOD)
    llm = LLM(be, cache_dir=tmp_path)
    assert llm.generate([]) == []
    assert be.batches == []
    assert llm.ledger.total().calls == 0


def test_order_preserved_and_one_batched_call():
    be = ScriptedBackend(lambda r: {**GOOD, "confidence": int(r.messages[-1]["content"].split()[-1]) / 100})
    llm = LLM(be)
    res = llm.generate([make_request(i) for i in range(20)])
    assert len(be.batches) == 1 and len(be.batches[0]) == 20
    assert [r.parsed.confidence for r in res] == [i / 100 for i in range(20)]
    assert all(r.ok and not r.cached and r.retries == 0 for r in res)


@pytest.mark.parametrize("text", [
    "```json\n" + json.dumps(GOOD) + "\n```",
    "Sure! Here is the JSON: " + json.dumps(GOOD) + " Hope this helps.",
    "```\n" + json.dumps(GOOD) + "\n```",
    "{ broken } and then " + json.dumps(GOOD),
])
def test_parse_tolerates_fences_and_prose(text):
    parsed, err = parse_reply(text, Facts)
    assert err is None and parsed == Facts.model_validate(GOOD)


def test_parse_reports_schema_violation():
    parsed, err = parse_reply(json.dumps({"facts": [{"subject": "a", "relation": "hates", "obj": "b"}],
                                          "confidence": 2}), Facts)
    assert parsed is None and "relation" in err and "confidence" in err


def test_retry_appends_bad_reply_and_error():
    replies = {"extract": ['{"facts": [], "confidence": 7}', GOOD]}
    be = ScriptedBackend(replies)
    llm = LLM(be, max_retries=2)
    (res,) = llm.generate([make_request(0)])
    assert res.ok and res.retries == 1
    assert len(be.batches) == 2
    retry_msgs = be.batches[1][0].messages
    assert retry_msgs[:2] == make_request(0).messages
    assert retry_msgs[2] == {"role": "assistant", "content": '{"facts": [], "confidence": 7}'}
    assert "confidence" in retry_msgs[3]["content"] and retry_msgs[3]["role"] == "user"
    st = llm.ledger.stage("extract")
    assert (st.calls, st.retries, st.failures, st.batches) == (1, 1, 0, 1)


def test_retries_are_batched_and_failures_counted():
    # even items always fail; odd items succeed first time
    def responder(r: LLMRequest):
        i = int(r.messages[1]["content"].split()[-1])
        return "not json at all" if i % 2 == 0 else GOOD

    be = ScriptedBackend(responder)
    llm = LLM(be, max_retries=2)
    res = llm.generate([make_request(i) for i in range(10)])
    assert [r.ok for r in res] == [i % 2 == 1 for i in range(10)]
    assert [len(b) for b in be.batches] == [10, 5, 5]  # one call per round
    assert all(r.error and r.retries == 2 for r in res[::2])
    st = llm.ledger.stage("extract")
    assert st.failures == 5 and st.retries == 10 and st.calls == 10


def test_transport_errors_are_retried_with_original_messages():
    replies = {"extract": [RuntimeError("HTTP 500"), GOOD]}
    be = ScriptedBackend(replies)
    llm = LLM(be, engine_backoff_s=0)
    (res,) = llm.generate([make_request(0)])
    assert res.ok and res.retries == 0  # an engine retry is not a retry of the reply
    assert be.batches[1][0].messages == make_request(0).messages


def test_backend_crash_is_an_engine_failure():
    class Crashing:
        model_id = "crash"

        def complete(self, requests):
            raise MemoryError("boom")

    llm = LLM(Crashing(), max_retries=1, engine_retries=1, engine_backoff_s=0)
    with pytest.raises(EngineFailure, match="no reply for 3 of 3 request.*MemoryError: boom") as info:
        llm.generate([make_request(i) for i in range(3)])
    assert (info.value.stage, info.value.items) == ("extract", 3)


def test_wrong_length_from_backend_is_an_engine_failure():
    class Short:
        model_id = "short"

        def complete(self, requests):
            return [Completion(text=json.dumps(GOOD))]

    with pytest.raises(EngineFailure, match="1 completions for 2 requests"):
        LLM(Short(), max_retries=0, engine_retries=0).generate([make_request(i) for i in range(2)])


def test_no_schema_returns_text():
    be = ScriptedBackend(lambda r: "plain answer")
    (res,) = LLM(be).generate([make_request(0, schema=None)])
    assert res.ok and res.text == "plain answer" and res.parsed is None


def test_cache_second_run_fully_cached(tmp_path):
    be = ScriptedBackend(lambda r: GOOD)
    llm = LLM(be, cache_dir=tmp_path)
    reqs = [make_request(i) for i in range(8)]
    first = llm.generate(reqs)
    second = llm.generate(reqs)
    assert len(be.batches) == 1
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert [r.parsed for r in first] == [r.parsed for r in second]
    assert llm.ledger.stage("extract").cache_hits == 8
    # a fresh client on the same dir replays too (persistence)
    be2 = ScriptedBackend(lambda r: GOOD)
    assert all(r.cached for r in LLM(be2, cache_dir=tmp_path).generate(reqs)) and be2.batches == []


def test_cache_stores_final_failures_too(tmp_path):
    be = ScriptedBackend(lambda r: "garbage")
    llm = LLM(be, cache_dir=tmp_path, max_retries=0)
    llm.generate([make_request(0)])
    cache = ResponseCache(tmp_path)
    assert len(cache) == 1 and cache.failures() == 1


def test_cache_key_depends_on_model_schema_sampling_messages():
    r = make_request(0)
    base = request_key("m@1", r)
    assert base == request_key("m@1", make_request(0))
    assert base != request_key("m@2", r)
    assert base != request_key("m@1", make_request(1))
    assert base != request_key("m@1", make_request(0, max_tokens=65))
    assert base != request_key("m@1", make_request(0, schema=None))


def test_identical_requests_in_one_batch_sent_once_when_cached(tmp_path):
    be = ScriptedBackend(lambda r: GOOD)
    res = LLM(be, cache_dir=tmp_path).generate([make_request(0)] * 5)
    assert len(be.batches[0]) == 1 and all(r.ok for r in res)


def test_cache_off_sends_duplicates(tmp_path):
    be = ScriptedBackend(lambda r: GOOD)
    LLM(be, cache_dir=tmp_path, cache_mode="off").generate([make_request(0)] * 5)
    assert len(be.batches[0]) == 5 and not (tmp_path / "responses.sqlite").exists()


def test_replay_only_raises_naming_stage(tmp_path):
    be = ScriptedBackend(lambda r: GOOD)
    LLM(be, cache_dir=tmp_path).generate([make_request(0, stage="resolve")])
    replay = LLM(ScriptedBackend(lambda r: GOOD), cache_dir=tmp_path, cache_mode="replay_only")
    assert replay.generate([make_request(0, stage="resolve")])[0].cached
    with pytest.raises(CacheMissError, match="resolve"):
        replay.generate([make_request(0, stage="resolve"), make_request(1, stage="resolve")])
    assert replay.backend.batches == []


def test_invalid_cache_mode_and_args(tmp_path):
    with pytest.raises(ValueError):
        LLM(SchemaFakeBackend(), cache_mode="sometimes")
    with pytest.raises(ValueError):
        LLM(SchemaFakeBackend(), cache_mode="replay_only")


def test_mixed_stages_one_call_ledger_per_stage():
    be = SchemaFakeBackend()
    led = Ledger()
    llm = LLM(be, ledger=led)
    res = llm.generate([make_request(i, stage="a" if i < 3 else "b") for i in range(5)])
    assert all(r.ok for r in res) and len(be.batches) == 1
    assert led.stage("a").calls == 3 and led.stage("b").calls == 2
    assert led.total().prompt_tokens > 0


def test_schema_fake_backend_builds_valid_instances():
    from typing import Literal

    from pydantic import Field

    class Inner(BaseModel):
        kind: Literal["x", "y"]
        n: int = Field(ge=5, le=9)

    class Outer(BaseModel):
        items: list[Inner] = Field(min_length=2)
        maybe: Inner | None
        tags: dict[str, int]
        name: str = Field(min_length=3)

    (res,) = LLM(SchemaFakeBackend()).generate([LLMRequest(messages=[{"role": "user", "content": "x"}],
                                                           schema=Outer)])
    assert res.ok and len(res.parsed.items) == 2 and res.parsed.items[0].n == 5


def test_scripted_queue_exhausted_gives_no_reply():
    be = ScriptedBackend({"extract": [GOOD]})
    with pytest.raises(EngineFailure, match="no reply for 1 of 2.*no scripted reply left for stage 'extract'"):
        LLM(be, max_retries=0, engine_retries=0).generate([make_request(0), make_request(1)])


def test_sampling_is_frozen_and_part_of_request():
    req = make_request(0)
    with pytest.raises(ValidationError, match="frozen"):
        req.sampling.max_tokens = 1  # a cached request's sampling cannot change under its cache key
    assert request_key("m@1", req) != request_key("m@1", req.model_copy(update={"sampling": Sampling(seed=1)}))


def test_failed_items_still_report_token_cost():
    be = ScriptedBackend(lambda r: "not json")
    (res,) = LLM(be, max_retries=1).generate([make_request(0)])
    assert not res.ok and res.completion_tokens == 4 and res.prompt_tokens > 0
