"""Mem0 as its authors evaluated it: pairs inside sessions, per-message times, no summary/window gap,
sequential update of one pair's facts, trim-and-count replies, one memory store per speaker."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from mnemis.baselines.mem0.extract import make_pairs, summary_due
from mnemis.baselines.mem0.pipeline import Mem0Config, build_mem0, run_mem0, store_layout
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.prompts.mem0_extract import MAX_FACT_CHARS, candidate_facts_schema
from mnemis.prompts.mem0_summary import MAX_SUMMARY_CHARS, ConversationSummary
from mnemis.prompts.mem0_update import MemoryOperation
from mnemis.types import Dataset, Episode, Question
from tests.helpers.mem0 import (
    T0,
    Decider,
    block,
    episodes,
    live,
    make_llm,
    new_fact,
    shown_memories,
    stages,
    text_of,
)


def sessions(group: str, sizes: list[int], speakers=("Ann", "Bob")) -> list[Episode]:
    """Sessions of ``sizes`` messages, a day apart; message i says ``m<i>``, speakers alternate."""
    out, pos = [], 0
    for s, n in enumerate(sizes, start=1):
        for t in range(n):
            sp = speakers[pos % len(speakers)]
            out.append(Episode(group_id=group, id=f"{group}:D{s}:{t + 1}", source_id=f"D{s}:{t + 1}", name=f"m{pos}",
                               speaker=sp, content=f"{sp}: m{pos}", session=s, turn=t, position=pos,
                               valid_at=T0 + timedelta(days=s, minutes=t)))
            pos += 1
    return out


# ------------------------------------------------------------------ pairs and times
def test_pairs_are_cut_inside_sessions():
    eps = sessions("g", [3, 2, 1, 4])
    pairs = make_pairs(eps, 2)
    assert [[m.id for m in p.messages] for p in pairs] == [
        ["g:D1:1", "g:D1:2"], ["g:D1:3"], ["g:D2:1", "g:D2:2"], ["g:D3:1"], ["g:D4:1", "g:D4:2"], ["g:D4:3", "g:D4:4"]]
    assert all(len({m.session for m in p.messages}) == 1 for p in pairs)
    assert [p.start for p in pairs] == [0, 2, 3, 5, 6, 8]
    assert sum(len(p.messages) for p in pairs) == len(eps)  # every message new exactly once


def test_locomo_sessions_never_start_mid_pair(locomo):
    pairs = make_pairs([e for e in locomo.episodes if e.group_id == "conv-26"], 2)
    first_of_session = {}
    for e in (e for e in locomo.episodes if e.group_id == "conv-26"):
        first_of_session.setdefault(e.session, e.id)
    starts = {p.messages[0].id for p in pairs}
    assert set(first_of_session.values()) <= starts


def test_every_message_of_the_prompt_shows_its_own_time_with_weekday(tmp_path):
    llm, backend = make_llm(Decider())
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(sessions("g", [3, 2]), llm, HashingEmbedder(), Mem0Config(summary_every=0, m=4), store)
    last = backend.batches_for("mem0_extract")[-1][0]
    assert block(last, "Recent messages:") == ["[2023/05/09 (Tue) 13:00] Ann: m0", "[2023/05/09 (Tue) 13:01] Bob: m1",
                                              "[2023/05/09 (Tue) 13:02] Ann: m2"]
    assert block(last, "NEW MESSAGES") == ["[2023/05/10 (Wed) 13:00] Bob: m3", "[2023/05/10 (Wed) 13:01] Ann: m4"]


# ------------------------------------------------------------------ summary + window leave no gap
def folding_summarizer(req: LLMRequest):
    """Summary = the message numbers folded so far (previous summary + new messages)."""
    if req.stage == "mem0_summary":
        prev = block(req, "Previous summary:")[0]
        seen = [] if prev == "(none yet)" else prev.split()
        return {"summary": " ".join(seen + re.findall(r"\bm\d+\b", "\n".join(block(req, "New messages"))))}
    return Decider()(req)


@pytest.mark.parametrize("m,every", [(10, 20), (4, 6), (3, 40), (10, 5)])
def test_every_earlier_message_is_in_the_summary_or_the_window(tmp_path, m, every):
    eps = sessions("g", [7, 12, 1, 9, 20, 3, 15, 8])  # 75 messages, odd sessions
    llm, backend = make_llm(folding_summarizer)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(eps, llm, HashingEmbedder(), Mem0Config(summary_every=every, m=m), store)
    extracts = [r for b in backend.batches_for("mem0_extract") for r in b]
    assert len(extracts) == len(make_pairs(eps, 2))
    for req in extracts:
        new = re.findall(r"\bm(\d+)\b", "\n".join(block(req, "NEW MESSAGES")))
        start = int(new[0])
        summary = block(req, "Conversation summary:")[0]
        known = set(re.findall(r"\bm(\d+)\b", summary))
        if start > 0 and "Recent messages:" in text_of(req):
            known |= set(re.findall(r"\bm(\d+)\b", "\n".join(block(req, "Recent messages:"))))
        assert {str(i) for i in range(start)} <= known, (start, sorted(map(int, known)))
        assert len(block(req, "Recent messages:") if start else []) <= m
    # refreshes follow the window, not only summary_every
    n_sum = llm.ledger.stage("mem0_summary").calls
    assert n_sum >= (len(eps) - m) // max(min(every, m + 2), 1) - 1


def test_summary_due_rule():
    pair = make_pairs(sessions("g", [30]), 2)[7]  # starts at message 14
    assert summary_due(0, pair, 20, 10)        # window 4..13 leaves 0..3 unseen
    assert not summary_due(4, pair, 20, 10)    # summary covers 0..3: no gap, 10 < 20 since
    assert summary_due(4, pair, 10, 10)        # summary_every reached
    assert not summary_due(0, pair, 0, 10)     # no summary at all


# ------------------------------------------------------------------ trim and count
def test_over_long_replies_are_trimmed_and_counted_not_rejected(tmp_path):
    long_fact = "Ann " + "really " * 60 + "likes tea"
    many = [f"Ann fact number {i}" for i in range(11)]

    def responder(req: LLMRequest):
        if req.stage == "mem0_summary":
            return {"summary": "words " * 500}
        if req.stage == "mem0_extract":
            return {"facts": [long_fact, *many]}
        if req.stage == "mem0_update":
            return {"operation": "ADD", "id": -1, "text": "" if "really" in new_fact(req) else "x " * 400}
        raise AssertionError(req.stage)

    llm, _ = make_llm(responder)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(sessions("g", [6]), llm, HashingEmbedder(), Mem0Config(summary_every=2, m=1, max_facts=10), store)
    totals = store.totals("g")
    assert totals["extract.facts"] == 3 * 10  # max_facts = 10 kept (above the old fixed cap of 8)
    assert totals["extract.facts_cut"] == 3 * 2 and totals["extract.facts_trimmed"] == 3
    assert totals["summary.trimmed"] == totals["summary.refreshes"] == 2
    assert totals["update.text_trimmed"] >= 1
    assert {k for k in totals if k.startswith("bad.")} == {"bad.duplicate_add"}  # the repeated "x x ..." ADDs
    mems = store.memories("g")
    assert len(mems) == 2  # the trimmed fact and one "x x ..." text (repeats of either are duplicate NOOPs)
    assert max(len(m.text) for m in mems) <= 600
    trimmed = [m.text for m in mems if m.text.startswith("Ann really")]
    assert trimmed and all(len(t) <= MAX_FACT_CHARS and t.endswith("really") for t in trimmed)
    text, _ = store.summary("g")
    assert len(text) <= MAX_SUMMARY_CHARS


def test_schemas_steer_but_never_reject_long_replies():
    schema = candidate_facts_schema(12)
    assert schema.model_json_schema()["properties"]["facts"]["maxItems"] == 12
    assert candidate_facts_schema(8).model_json_schema()["properties"]["facts"]["maxItems"] == 8
    assert len(schema.model_validate({"facts": ["x" * 500] * 20}).facts) == 20
    assert schema.model_validate(["a", "b"]).facts == ["a", "b"]  # a bare list is accepted
    ConversationSummary.model_validate({"summary": " ".join(["abcde"] * 241)})
    MemoryOperation.model_validate({"operation": "UPDATE", "id": 0, "text": "y" * 601})


# ------------------------------------------------------------------ sequential update
class Merger(Decider):
    """UPDATEs the memory about Caroline's dog with each new dog fact: text = memory + "; " + fact."""

    def __call__(self, req: LLMRequest):
        if req.stage == "mem0_update":
            fact, shown = new_fact(req), shown_memories(req)
            hit = next((i for i, t in enumerate(shown) if t.startswith("Caroline has a dog")), None)
            if "dog" in fact and hit is not None and not fact.startswith("Caroline has a dog"):
                return {"operation": "UPDATE", "id": hit, "text": f"{shown[hit]}; {fact}"}
            return {"operation": "ADD", "id": -1, "text": fact}
        return super().__call__(req)


def test_two_facts_of_one_pair_updating_one_memory_keep_both(tmp_path):
    turns = [("Caroline", "Caroline has a dog"), ("Melanie", "Melanie paints"),
             ("Caroline", "Caroline's dog is named Max"), ("Caroline", "Caroline's dog is three years old")]
    eps = episodes("a", turns) + episodes("b", turns)
    llm, backend = make_llm(Merger())
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(eps, llm, HashingEmbedder(), Mem0Config(summary_every=0), store)
    for g in ("a", "b"):
        dog = next(t for t in live(store, g) if t.startswith("Caroline has a dog"))
        assert "named Max" in dog and "three years old" in dog, dog
        hist = [h for h in store.history(g) if h.operation == "UPDATE"]
        assert [h.old_text for h in hist] == ["Caroline has a dog", "Caroline has a dog; Caroline's dog is named Max"]
    # the second pair's 2 facts: 2 rounds, each one generate over both groups
    assert stages(backend)[-2:] == [("mem0_update", 2), ("mem0_update", 2)]


def test_a_memory_added_earlier_in_the_pair_is_seen_by_the_next_fact(tmp_path):
    turns = [("Ann", "Ann likes green tea"), ("Ann", "Ann likes green tea a lot")]
    llm, backend = make_llm(Decider())
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", turns), llm, HashingEmbedder(), Mem0Config(summary_every=0), store)
    second = backend.batches_for("mem0_update")[1][0]
    assert shown_memories(second) == ["Ann likes green tea"]


# ------------------------------------------------------------------ one store per speaker
def test_per_speaker_stores_mine_own_messages_and_search_k_each(tmp_path):
    turns = [("Ann", "Ann likes green tea"), ("Bob", "Bob plays golf"), ("Ann", "Ann runs marathons"),
             ("Bob", "Bob owns a cat"), ("Ann", "Ann hates golf")]
    eps = episodes("g", turns)

    def responder(req: LLMRequest):
        if req.stage == "mem0_extract":
            who = re.search(r"writing the memory of (\w+)\.", text_of(req)).group(1)
            return {"facts": [m.split(": ", 1)[1] for m in block(req, "NEW MESSAGES") if f"] {who}: " in m]}
        return Decider()(req)

    qs = [Question(group_id="g", id="g:q", question="What does Bob play?", answer="golf", category="single-hop")]
    llm, backend = make_llm(responder)
    run = run_mem0(Dataset(name="t", groups=["g"], episodes=eps, questions=qs), llm, HashingEmbedder(),
                   Mem0Config(per_speaker=True, k=2, summary_every=0), tmp_path)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    assert sorted(live(store, "g::Ann")) == ["Ann hates golf", "Ann likes green tea", "Ann runs marathons"]
    assert sorted(live(store, "g::Bob")) == ["Bob owns a cat", "Bob plays golf"]
    assert live(store, "g") == []
    # pairs (0,1), (2,3): both speakers; (4): Ann only -> 5 extraction requests in 3 steps, one generate each
    assert [n for s, n in stages(backend) if s == "mem0_extract"] == [2, 2, 1]
    assert run.stats["stores"] == {"g": ["g::Ann", "g::Bob"]} and run.stats["memories"] == {"g": 5}
    assert len(run.retrieved[0].facts) == 4  # k = 2 from each store
    ctx = run.contexts[0]
    ann, bob = ctx.split("\n\n")
    assert ann.startswith("Memories for Ann:\n[2023/05/08 (Mon) 13:0") and len(ann.splitlines()) == 3
    assert bob.splitlines()[0] == "Memories for Bob:" and "[2023/05/08 (Mon) 13:01] Bob plays golf" in bob
    assert all(re.match(r"\[\d{4}/\d\d/\d\d \(\w{3}\) \d\d:\d\d\] ", ln) for ln in ctx.splitlines()
               if ln.startswith("["))


def test_store_layout_defaults_to_one_store_per_group():
    eps = {"g": sessions("g", [3], speakers=("Ann", "Bob", "Cy"))}
    assert [r.key for r in store_layout(eps, False)["g"]] == ["g"]
    assert [(r.key, r.speaker) for r in store_layout(eps, True)["g"]] == [
        ("g::Ann", "Ann"), ("g::Bob", "Bob"), ("g::Cy", "Cy")]
    assert Mem0Config().per_speaker is False and Mem0Config().k == 10
