"""Candidates per extracted name / new fact: each item's own top-k, the union sent (Graphiti), or one
shared cap per episode (``per_item=False``)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from mnemis.ingest.extract import EpisodeExtraction, ExtractedFactRecord
from mnemis.ingest.facts import GroupFacts, dedup_step
from mnemis.ingest.resolve import GroupEntities, resolve_step
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, Fact, entity_id
from tests.helpers.ingest import T0, episodes, section

EMB = HashingEmbedder(64)


def _no_match(req):
    if req.stage == "resolve_entities":
        return {"decisions": [{"new": i, "match": -1} for i in range(len(section(req, "New names:")))]}
    header = next(h for h in req.messages[-1]["content"].splitlines() if h.startswith("New facts"))
    return {"decisions": [{"new": i, "duplicate_of": -1, "contradicts": []}
                          for i in range(len(section(req, header)))]}


@pytest.mark.parametrize("per_item", [True, False])
def test_each_name_keeps_its_own_top_k(tmp_path, per_item):
    # 12 known "Mel ..." and 12 known "Bob ..." entities: each new name has >= 10 candidates of its own
    with GraphStore(tmp_path / "m.db") as store:
        known = [f"{p} {c}" for p in ("Mel", "Bob") for c in "ABCDEFGHIJKL"]
        store.upsert_entities([Entity(group_id="g", id=entity_id("g", n), name=n) for n in known])
        state = GroupEntities(store, "g", EMB)
        (ep,) = episodes("g", [("Zed", "Mel and Bob came")])
        ext = EpisodeExtraction(names=["Mel", "Bob"])
        own = {n: state.candidates(n, EMB.encode([n])[0], 10, 0.5) for n in ext.names}
        assert all(len(c) == 10 for c in own.values())
        backend = ScriptedBackend(_no_match)
        stats: Counter = Counter()
        resolve_step([(state, ep, ext)], LLM(backend), EMB, stats, max_candidates=10, per_item=per_item)

        (req,) = backend.requests
        shown = [k.split(" - ")[0] for k in section(req, "Known entities:")]
        names = {state.entities[i].name for c in own.values() for i in c}
        if per_item:  # the union of both top-10 lists, every candidate once
            assert len(shown) == 20 and set(shown) == names
        else:  # one shared cap, filled round-robin: 5 of each
            assert len(shown) == 10 and sum(s.startswith("Mel") for s in shown) == 5


def _fact(i, src, tgt, text, when):
    return Fact(group_id="g", id=f"f{i}", source_id=src, target_id=tgt, relation="R", fact=text,
                valid_at=when, created_at=when, episode_ids=[f"e{i}"])


@pytest.mark.parametrize("per_item", [True, False])
def test_each_fact_keeps_its_own_candidates(tmp_path, per_item):
    a, b, c = (entity_id("g", n) for n in ("Ann", "Bob", "Cat"))
    # 15 same-pair facts (Ann-Bob chit-chat), then one Ann-Cat fact about where Ann lives
    rows = [_fact(i, a, b, f"Ann chatted with Bob about topic {i}.", T0 + timedelta(days=i))
            for i in range(15)]
    rows.append(_fact(15, a, c, "Ann lives in Denver with Cat.", T0 + timedelta(days=20)))
    with GraphStore(tmp_path / "m.db") as store:
        store.upsert_entities([Entity(group_id="g", id=i, name=n)
                               for i, n in ((a, "Ann"), (b, "Bob"), (c, "Cat"))])
        store.upsert_facts(rows)
        state = GroupFacts(store, "g", EMB)
        vec = EMB.encode(["Ann lives in Denver with Bob."])[0]
        got = state.candidates(a, b, vec, 10, 0.0, per_item=per_item)
        if per_item:  # the 10 same-pair facts closest to it, then the close facts touching either end
            sims = {r.id: float(EMB.encode([r.fact])[0] @ vec) for r in rows}
            newest = [r.id for r in reversed(rows[:15])]  # ties stay newest first
            assert got[:10] == sorted(newest, key=lambda i: -sims[i])[:10]
            assert "f15" in got  # the contradiction candidate is not crowded out by same-pair facts
        else:
            assert got == [f"f{i}" for i in range(14, 4, -1)]  # newest same-pair facts fill all 10 slots

        # dedup of two new facts: one request whose list is the union of their own candidates
        (ep,) = episodes("g", [("Ann", "I moved")], start=T0 + timedelta(days=30))
        ext = EpisodeExtraction(names=["Ann", "Bob", "Cat"], facts=[
            ExtractedFactRecord(0, 1, "LIVES_WITH", "Ann lives in Denver with Bob."),
            ExtractedFactRecord(0, 2, "KNOWS", "Ann knows Cat from work.")])
        other = EMB.encode(["Ann knows Cat from work."])[0]
        own = [state.candidates(a, b, vec, 10, 0.0, per_item=per_item),
               state.candidates(a, c, other, 10, 0.0, per_item=per_item)]
        assert len(set(own[0]) | set(own[1])) > 10
        backend = ScriptedBackend(_no_match)
        dedup_step([(state, ep, ext, [a, b, c])], LLM(backend), EMB, Counter(), max_candidates=10,
                   min_similarity=0.0, per_item=per_item)
        (req,) = backend.requests
        shown = section(req, "Existing facts:")
        assert len(shown) == (len(set(own[0]) | set(own[1])) if per_item else 10)
        assert len(set(shown)) == len(shown)  # no candidate twice


def test_round_robin_union_or_cap():
    from mnemis.ingest.common import round_robin

    lists = [["a", "b", "c"], ["c", "d"], ["e"]]
    assert round_robin(lists, None) == ["a", "c", "e", "b", "d"]
    assert round_robin(lists, 3) == ["a", "c", "e"]
