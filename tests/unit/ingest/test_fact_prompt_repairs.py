"""The fact prompt as a real 1.5B model read it: no format name to copy as a relation, and a date key so
"yesterday" is dated the day before the message. Repairs run through the client's retry loop."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM, parse_reply
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.extract_facts import EXTRACT_FACTS, REFLECT_FACTS, ExtractedFacts, date_key
from tests.helpers.ingest import episodes


def _facts(relation: str, valid_at: str = "") -> dict:
    return {"facts": [{"source": 0, "target": 1, "relation": relation, "fact": "Caroline went to a support group.",
                       "valid_at": valid_at, "invalid_at": ""}]}


def test_date_key_gives_absolute_dates_for_relative_words():
    key = date_key(datetime(2023, 5, 8, 13, 56))  # a Monday
    assert "written Monday 2023-05-08" in key and "today = 2023-05-08" in key
    assert "yesterday = 2023-05-07" in key and "the day before yesterday = 2023-05-06" in key
    assert "last week = week of 2023-05-01" in key and "last month = 2023-04" in key and "last year = 2022" in key
    assert "last month = 2022-12" in date_key(datetime(2023, 1, 3))


def test_fact_prompts_carry_the_date_key_and_no_format_placeholder():
    eps = episodes("g", [("Melanie", "hi"), ("Caroline", "I went to a LGBTQ support group yesterday")])
    for msgs in (EXTRACT_FACTS.render(eps[1], eps[:1], ["Caroline", "LGBTQ support group"]),
                 REFLECT_FACTS.render(eps[1], eps[:1], ["Caroline", "LGBTQ support group"], [])):
        text = msgs[-1]["content"]
        assert "yesterday = 2023-05-07" in text
        assert "SCREAMING" not in text and "SCREAMING" not in json.dumps(ExtractedFacts.model_json_schema())
        # the numbered entity list still ends before the task lines
        assert text.split("Entities:\n", 1)[1].startswith("0. Caroline\n1. LGBTQ support group\n")
        assert "LIVES_IN" not in text and "WORKS_AT" not in text  # examples were copied onto unrelated facts
    assert EXTRACT_FACTS.version == REFLECT_FACTS.version == "v3"


@pytest.mark.parametrize("relation", ["SCREAMING_SNAKE_CASE", "screaming snake case", "Relation_Type", "VERB"])
def test_placeholder_relation_is_rejected_with_a_reason(relation):
    parsed, err = parse_reply(json.dumps(_facts(relation)), ExtractedFacts)
    assert parsed is None and "format name, not a relation" in err


def test_real_relations_pass():
    parsed, err = parse_reply(json.dumps(_facts("ATTENDED", "2023-05-07")), ExtractedFacts)
    assert err is None and parsed.facts[0].relation == "ATTENDED"


def test_placeholder_relation_is_retried_and_the_retry_is_used():
    backend = ScriptedBackend({"extract_facts": [_facts("SCREAMING_SNAKE_CASE"), _facts("ATTENDED", "2023-05-07")]})
    llm = LLM(backend, max_retries=2)
    eps = episodes("g", [("Caroline", "I went to a LGBTQ support group yesterday")])
    req = LLMRequest(messages=EXTRACT_FACTS.render(eps[0], [], ["Caroline", "LGBTQ support group"]),
                     schema=ExtractedFacts, stage="extract_facts")
    (res,) = llm.generate([req])
    assert res.ok and res.retries == 1 and res.parsed.facts[0].relation == "ATTENDED"
    retry = backend.batches[1][0].messages
    assert retry[-2]["role"] == "assistant" and "SCREAMING_SNAKE_CASE" in retry[-2]["content"]
    assert "format name, not a relation" in retry[-1]["content"]
    assert llm.ledger.stage("extract_facts").retries == 1


def test_placeholder_relation_every_time_fails_the_item_visibly():
    backend = ScriptedBackend({"extract_facts": [_facts("SCREAMING_SNAKE_CASE")] * 3})
    llm = LLM(backend, max_retries=2)
    eps = episodes("g", [("Caroline", "hello")])
    req = LLMRequest(messages=EXTRACT_FACTS.render(eps[0], [], ["Caroline", "Melanie"]), schema=ExtractedFacts,
                     stage="extract_facts")
    (res,) = llm.generate([req])
    assert not res.ok and "format name" in res.error and llm.ledger.stage("extract_facts").failures == 1
