"""Salvage of cut replies, failures recorded for exact replay, and retry_failed (mnemis.models.llm.client)."""

from __future__ import annotations

import sqlite3

import pytest

from mnemis.models.cache import CacheMissError, ResponseCache
from mnemis.models.llm.client import LLM
from mnemis.models.llm.salvage import salvage
from mnemis.models.llm.scripted import Cut, ScriptedBackend
from mnemis.prompts.dedup_facts import FactDecisions
from mnemis.prompts.entity_attributes import EntityAttributes
from mnemis.prompts.extract_facts import ExtractedFacts
from tests.helpers.models import GOOD, make_request

FACT = '{"source": 0, "target": 1, "relation": "LIKES", "fact": "Ann likes tea.", "valid_at": "", "invalid_at": ""}'


def test_salvage_keeps_only_complete_items():
    cut = '{"facts": [' + FACT + ", " + FACT.replace("tea", "jam") + ', {"source": 0, "target": 2, "rel'
    got = salvage(cut, ExtractedFacts)
    assert [f.fact for f in got.facts] == ["Ann likes tea.", "Ann likes jam."]
    # a half-written element is never default-filled: a decision cut inside its list is dropped whole
    dec = '{"decisions": [{"new": 0, "duplicate_of": 2, "contradicts": []}, {"new": 1, "duplicate_of": -1, "contra'
    assert [d.new for d in salvage(dec, FactDecisions).decisions] == [0]
    # inner list of the top-level object cut: the complete tags are kept, the summary too
    attrs = '{"summary": "Ann likes tea.", "tags": ["Person", "Tea dri'
    assert salvage(attrs, EntityAttributes).model_dump() == {"summary": "Ann likes tea.", "tags": ["Person"]}
    assert salvage('{"summary": "Ann li', EntityAttributes) is None  # nothing complete
    assert salvage("no json at all", ExtractedFacts) is None
    # strings holding brackets and commas do not confuse the scan
    tricky = '{"facts": [' + FACT.replace("tea", "tea, [jam] {x}") + ', {"sou'
    assert salvage(tricky, ExtractedFacts).facts[0].fact == "Ann likes tea, [jam] {x}."


def test_cut_reply_is_salvaged_without_retry_and_counted():
    text = '{"facts": [' + FACT + ", " + FACT[:30]
    be = ScriptedBackend(lambda r: Cut(text))
    llm = LLM(be, max_retries=2)
    [res] = llm.generate([make_request(0, schema=ExtractedFacts)])
    assert res.ok and res.truncated and res.salvaged and len(res.parsed.facts) == 1
    assert len(be.batches) == 1  # the same budget would cut it again: not re-asked
    st = llm.ledger.stage("extract")
    assert (st.truncated, st.salvaged, st.failures, st.retries) == (1, 1, 0, 0)


def test_invalid_reply_is_salvaged_after_retries():
    text = '{"facts": [' + FACT + ', {"source": "zero"}]}'  # complete JSON, second item invalid
    be = ScriptedBackend(lambda r: text)
    llm = LLM(be, max_retries=1)
    [res] = llm.generate([make_request(0, schema=ExtractedFacts)])
    assert len(be.batches) == 2 and res.ok and res.salvaged and not res.truncated
    assert len(res.parsed.facts) == 1
    off = LLM(ScriptedBackend(lambda r: text), max_retries=0)
    [res] = off.generate([make_request(0, schema=ExtractedFacts).model_copy(update={"salvage": False})])
    assert not res.ok


def _flaky(fail_ids):
    def respond(req):
        return "garbage" if any(f"episode {i}" in req.messages[1]["content"] for i in fail_ids) else GOOD
    return respond


def test_replay_only_reproduces_failures_exactly(tmp_path):
    reqs = [make_request(i) for i in range(4)]
    first = LLM(ScriptedBackend(_flaky({1, 3})), cache_dir=tmp_path, max_retries=1).generate(reqs)
    assert [r.ok for r in first] == [True, False, True, False]
    silent = ScriptedBackend(lambda r: pytest.fail("replay must not call the backend"))
    replay = LLM(silent, cache_dir=tmp_path, cache_mode="replay_only").generate(reqs)
    assert [(r.ok, r.text, r.error, r.parsed) for r in replay] == [(r.ok, r.text, r.error, r.parsed) for r in first]
    assert all(r.cached for r in replay)
    with pytest.raises(CacheMissError):  # a request never made is still a miss
        LLM(silent, cache_dir=tmp_path, cache_mode="replay_only").generate([make_request(9)])


def test_readwrite_retries_stored_failures_only_when_asked(tmp_path):
    reqs = [make_request(i) for i in range(3)]
    LLM(ScriptedBackend(_flaky({1})), cache_dir=tmp_path, max_retries=0).generate(reqs)
    be = ScriptedBackend(lambda r: GOOD)
    again = LLM(be, cache_dir=tmp_path).generate(reqs)
    assert be.batches == [] and [r.ok for r in again] == [True, False, True]
    retry = LLM(be, cache_dir=tmp_path, retry_failed=True).generate(reqs)
    assert [len(b) for b in be.batches] == [1] and all(r.ok for r in retry)
    assert ResponseCache(tmp_path).failures() == 0  # the success replaced the stored failure


def test_cache_written_before_failures_were_recorded_is_upgraded(tmp_path):
    conn = sqlite3.connect(tmp_path / "responses.sqlite")
    conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, stage TEXT, text TEXT NOT NULL, "
                 "prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)")
    conn.execute("INSERT INTO responses VALUES ('k', 'm', 's', 'old', 1, 2, 0)")
    conn.commit()
    conn.close()
    cache = ResponseCache(tmp_path)
    got = cache.get_many(["k"])["k"]
    assert (got.text, got.error, got.retries) == ("old", None, 0)
