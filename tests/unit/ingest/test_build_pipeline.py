"""Pipeline behaviour: batching per step, bad replies, empty messages, reruns, incremental adds."""

from __future__ import annotations

import pytest

from mnemis.ingest.pipeline import BaseGraphBuilder
from mnemis.models.llm.scripted import Refused
from mnemis.store.sqlite import GraphStore
from tests.helpers.ingest import current_message, episodes, graph, rule_responder

G1 = [("Melanie", "I went to Paris with Caroline"), ("Caroline", "Mel, I live in Boston"),
      ("Melanie", "Caroline, I live in Denver"), ("Caroline", "Mel took pottery in Paris")]
G2 = [("Jon", "Gina opened a Studio"), ("Gina", "Jonny, I live in Rome"), ("Jon", "Gina, I live in Milan")]


def test_one_generate_per_stage_per_step(build):
    builder, backend, store = build(rule_responder)
    eps = episodes("a", G1) + episodes("b", G2)
    builder.ingest(eps)
    for stage in ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts",
                  "entity_attributes"):
        assert len(backend.batches_for(stage)) == 1, stage
    (batch,) = backend.batches_for("extract_entities")
    assert len(batch) == len(eps)  # every episode of every group in one call
    # resolution and fact dedup: at most one call per step (4 steps = the longest group), never per group
    for stage in ("resolve_entities", "dedup_facts"):
        batches = backend.batches_for(stage)
        assert 1 <= len(batches) <= 4, stage
        assert all(all(r.stage == stage for r in b) for b in batches)
    assert any(len(b) == 2 for b in backend.batches_for("resolve_entities"))  # both groups in one step
    names = {e.name for e in store.entities("a")}
    assert names >= {"Melanie", "Caroline", "Paris", "Boston", "Denver", "pottery"}


def test_rerun_is_idempotent_and_calls_nothing(build):
    builder, backend, store = build(rule_responder)
    eps = episodes("a", G1) + episodes("b", G2)
    builder.ingest(eps)
    before = {g: graph(store, g) for g in ("a", "b")}
    n = len(backend.batches)
    builder.ingest(eps)
    assert len(backend.batches) == n
    assert {g: graph(store, g) for g in ("a", "b")} == before


def test_incremental_add_matches_bulk_structure(build):
    bulk, _, s1 = build(rule_responder)
    bulk.ingest(episodes("a", G1))
    inc, _, s2 = build(rule_responder)
    eps = episodes("a", G1)
    inc.add(eps[:2])
    inc.add(eps[2:])
    g1, g2 = graph(s1, "a"), graph(s2, "a")
    def strip(rows):
        return [{k: v for k, v in r.items() if k not in ("summary", "tags")} for r in rows]

    assert strip(g1["entities"]) == strip(g2["entities"])
    assert g1["facts"] == g2["facts"] and g1["mentions"] == g2["mentions"]


@pytest.mark.parametrize("refresh", ["end", "episode"])
def test_empty_text_episode_is_stored_without_extraction(build, refresh):
    builder, backend, store = build(rule_responder, attribute_refresh=refresh)
    eps = episodes("a", [("Melanie", "Hi Caroline"), ("Caroline", "   "), ("Melanie", "")])
    stats = builder.ingest(eps)
    assert len(store.episodes("a")) == 3
    sent = [r.messages[-1]["content"] for r in backend.requests if r.stage == "extract_entities"]
    assert len(sent) == 1 and "Hi Caroline" in sent[0]
    assert not store.mentions("a", episode_ids=[eps[1].id, eps[2].id])
    assert stats.counters["episodes.empty_text"] == 2
    assert store.embedded_ids("a", "episode") == {e.id for e in eps}


def bad_responder(req):
    """Every way a model can answer wrongly, in valid JSON (and requests the backend refuses)."""
    s = req.stage
    if s == "extract_entities":
        return {"names": ["", "   ", "Caroline", "caroline ", "x" * 200, "Paris", "...", "Carol"]}
    if s == "reflect_entities":
        return Refused("prompt longer than the context")
    if s == "extract_facts":
        return {"facts": [
            {"source": 0, "target": 9, "relation": "R", "fact": "bad index"},
            {"source": -1, "target": 1, "relation": "R", "fact": "negative"},
            {"source": 1, "target": 1, "relation": "R", "fact": "self loop"},
            {"source": 0, "target": 1, "relation": "!!!", "fact": "no relation"},
            {"source": 0, "target": 1, "relation": "KNOWS", "fact": "   "},
            {"source": 0, "target": 1, "relation": "knows well", "fact": "Speaker knows Caroline.",
             "valid_at": "last Tuesday-ish", "invalid_at": "31/31/2023"},
            {"source": 0, "target": 2, "relation": "VISITED", "fact": "Speaker visited Paris.",
             "valid_at": "2023-05-01", "invalid_at": "2020-01-01"},
        ]}
    if s == "reflect_facts":
        return "this is not json"
    if s == "resolve_entities":
        return {"decisions": [{"new": 7, "match": 0}, {"new": 0, "match": 99}, {"new": 0, "match": 0}]}
    if s == "dedup_facts":
        return {"decisions": [{"new": 5, "duplicate_of": 0},
                              {"new": 0, "duplicate_of": 42, "contradicts": [7, -3]}]}
    if s == "entity_attributes":
        return {"summary": "  ", "tags": ["one two three four five", "", "A", "a", "B", "C", "D"][:5]}
    raise AssertionError(s)


@pytest.mark.parametrize("refresh", ["end", "episode"])
def test_bad_replies_are_counted_not_raised(build, refresh):
    builder, backend, store = build(bad_responder, attribute_refresh=refresh)
    eps = episodes("a", [("Melanie", "hello"), ("Jon", "hey"), ("Melanie", "again")])
    stats = builder.ingest(eps)
    c = stats.counters
    assert c["skip.bad_entity_name"] >= 3 * 3  # "", "   ", overlong, "..." in each episode
    assert c["skip.fact_bad_entity_index"] >= 2 and c["skip.fact_self_loop"] >= 1
    assert c["skip.fact_empty"] >= 2
    assert c["skip.bad_date"] >= 3
    assert c["skip.failed_reply.reflect_entities"] == 3 and c["skip.failed_reply.reflect_facts"] == 3
    assert c["skip.resolve_bad_name_index"] + c["skip.resolve_bad_match_index"] >= 1
    assert c["skip.dedup_bad_index"] + c["skip.dedup_bad_fact_index"] >= 1
    assert c["skip.tags_dropped"] >= 1
    # the graph is still well formed
    ents = {e.id: e for e in store.entities("a")}
    assert {"Caroline", "Paris", "Melanie", "Jon"} <= {e.name for e in ents.values()}
    for f in store.facts("a"):
        assert f.source_id in ents and f.target_id in ents and f.source_id != f.target_id
        assert f.relation == f.relation.upper() and f.fact.strip()
        assert f.invalid_at is None or f.valid_at is None or f.invalid_at >= f.valid_at
    for e in ents.values():
        assert len(e.tags) <= 5 and all(1 <= len(t.split()) <= 3 for t in e.tags)
    assert store.get_meta("ingest.stats")["skip.fact_self_loop"] == c["skip.fact_self_loop"]


def test_unknown_max_tokens_stage_is_rejected(tmp_path):
    with GraphStore(tmp_path / "m.db") as store, pytest.raises(ValueError, match="unknown stages"):
        BaseGraphBuilder(store, object(), object(), max_tokens={"nope": 3})


def test_attributes_refresh_only_entities_with_new_mentions(build):
    builder, backend, store = build(rule_responder)
    eps = episodes("a", [("Melanie", "I went to Paris with Caroline"), ("Caroline", "nice"),
                         ("Melanie", "back home")])
    builder.ingest(eps[:2])
    first = {r.messages[-1]["content"].splitlines()[0] for r in backend.requests
             if r.stage == "entity_attributes"}
    assert first == {"Entity: Melanie", "Entity: Caroline", "Entity: Paris"}
    n = len(backend.requests)
    stats = builder.add(eps[2:])  # only Melanie is mentioned again
    again = [r.messages[-1]["content"] for r in backend.requests[n:] if r.stage == "entity_attributes"]
    assert len(again) == 1 and again[0].startswith("Entity: Melanie\nCurrent summary: Melanie is discussed")
    assert "back home" in again[0] and "Paris with Caroline" not in again[0]  # only the new mention is shown
    assert stats.counters["attributes.refreshed"] == 1
    mel = next(e for e in store.entities("a") if e.name == "Melanie")
    assert store.embedded_ids("a", "entity_summary") >= {mel.id}


def _two_haystacks():
    """Groups a and b: a different first session, then the same shared session (same text, same times)."""
    from datetime import timedelta

    from tests.helpers.ingest import T0

    shared = [("Caroline", "I went to the Pride parade with Melanie."), ("Melanie", "Painting is my hobby."),
              ("Caroline", "Melanie loves camping in Denver.")]
    out = []
    for g, filler in (("a", [("Jon", "Gina opened a dance studio in Boston.")]),
                      ("b", [("Gina", "Jon lost his job at the bank in Paris.")])):
        first = episodes(g, filler)
        second = [e.model_copy(update={"id": f"{g}:D2:{e.turn}", "source_id": f"D2:{e.turn}", "session": 2,
                                       "position": e.position + len(first)})
                  for e in episodes(g, shared, start=T0 + timedelta(days=7))]
        out += first + second
    return out


@pytest.mark.parametrize("scope", ["group", "session"])
def test_context_scope_session_makes_shared_sessions_identical_prompts(build, scope):
    builder, backend, store = build(rule_responder, context_scope=scope)
    builder.ingest(_two_haystacks())
    (batch,) = backend.batches_for("extract_entities")
    shared = [r.messages[-1]["content"] for r in batch if "Pride parade" in current_message(r)]
    assert len(shared) == 2  # the same turn in both haystacks
    if scope == "session":
        assert shared[0] == shared[1]  # byte-identical: one cache entry serves every haystack
        assert "Gina" not in shared[0] and "Jon" not in shared[0]  # nothing from the previous session
    else:
        assert shared[0] != shared[1]  # the window reaches into each group's own first session
    later = [r.messages[-1]["content"] for r in batch if "camping" in current_message(r)]
    assert "Painting is my hobby" in later[0]  # earlier turns of the same session stay in the window
    assert {e.name for e in store.entities("b")} >= {"Caroline", "Melanie", "Denver"}


def test_context_scope_is_validated(tmp_path):
    with GraphStore(tmp_path / "m.db") as store, pytest.raises(ValueError, match="context_scope.*'haystack'"):
        BaseGraphBuilder(store, object(), object(), context_scope="haystack")
