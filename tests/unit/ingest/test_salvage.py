"""Ingest stages keep the complete items of replies cut at max_tokens (client salvage), counted per stage."""

from __future__ import annotations

import json

from mnemis.models.llm.scripted import Cut
from tests.helpers.ingest import CONVERSATIONS, graph, rule_responder, slice_episodes


def _cut_last_item(value: dict, key: str) -> Cut | dict:
    """The JSON of ``value`` cut in the middle of the last element of ``value[key]`` (when it has two or more)."""
    items = value[key]
    if len(items) < 2:
        return value
    text = json.dumps(value)
    last = json.dumps(items[-1])
    return Cut(text[: text.rfind(last) + len(last) // 2])


def test_cut_fact_and_resolution_replies_keep_complete_items(build):
    def respond(req):
        value = rule_responder(req)
        if req.stage == "extract_facts":
            return _cut_last_item(value, "facts")
        if req.stage == "resolve_entities":
            return _cut_last_item(value, "decisions")
        return value

    ref_builder, _, ref_store = build(rule_responder)
    ref_builder.ingest(slice_episodes())
    builder, backend, store = build(respond, max_retries=2)
    run = builder.ingest(slice_episodes())
    c = run.counters
    assert c["salvaged.extract_facts"] >= 1 and c["truncated.extract_facts"] == c["salvaged.extract_facts"]
    assert c.get("skip.failed_reply.extract_facts", 0) == 0
    led = builder.llm.ledger.stage("extract_facts")
    assert led.salvaged == c["salvaged.extract_facts"] and led.failures == 0 and led.retries == 0
    # only the cut-off last fact of each cut reply is missing; every kept fact is one the full reply had
    kept = {(g, f["fact"]) for g in CONVERSATIONS for f in graph(store, g)["facts"]}
    full = {(g, f["fact"]) for g in CONVERSATIONS for f in graph(ref_store, g)["facts"]}
    assert kept < full and len(kept) >= len(full) // 2  # each cut reply lost exactly its last fact
