"""Fact dedup and contradiction: exact validity bookkeeping, merges, nothing deleted."""

from __future__ import annotations

from datetime import datetime

from tests.helpers.ingest import current_message, episodes, section


def facts_responder(facts_by_text: dict[str, list[dict]], decide):
    """Entities = capitalised words (speaker first); facts per message text; ``decide(new, old)`` ->
    (duplicate_of, contradicts) for the dedup LLM."""

    def respond(req):
        if req.stage in ("reflect_entities", "reflect_facts"):
            return {"names": []} if req.stage == "reflect_entities" else {"facts": []}
        if req.stage == "extract_entities":
            body = current_message(req).split(": ", 1)[1]
            return {"names": [w.strip(".,") for w in body.split() if w[:1].isupper()]}
        if req.stage == "extract_facts":
            return {"facts": facts_by_text.get(current_message(req).split(": ", 1)[1], [])}
        if req.stage == "dedup_facts":
            lines = req.messages[-1]["content"].splitlines()
            new = section(req, next(h for h in lines if h.startswith("New facts")))
            old = [o.rsplit(" (", 1)[0] for o in section(req, "Existing facts:")]
            out = []
            for i, f in enumerate(new):
                dup, contra = decide(f, old)
                out.append({"new": i, "duplicate_of": dup, "contradicts": contra})
            return {"decisions": out}
        if req.stage == "entity_attributes":
            return {"summary": "s", "tags": []}
        raise AssertionError(req.stage)

    return respond


def fact(src, tgt, text, rel="LIVES_IN", valid="", invalid=""):
    return {"source": src, "target": tgt, "relation": rel, "fact": text, "valid_at": valid,
            "invalid_at": invalid}


def contradict_lives(new, old):
    if " lives in " in new:
        who = new.split(" lives in ")[0]
        return -1, [j for j, o in enumerate(old) if o.startswith(f"{who} lives in ") and o != new]
    return -1, []


def test_contradiction_sets_invalid_at_exactly(build):
    # lower-case "i": only the city is capitalised, so it is entity 1 after the speaker
    facts = {"i live in Boston": [fact(0, 1, "Caroline lives in Boston.", valid="2022-01-01")],
             "i moved, i live in Denver": [fact(0, 1, "Caroline lives in Denver.")]}
    builder, backend, store = build(facts_responder(facts, contradict_lives))
    eps = episodes("g", [("Caroline", "i live in Boston"), ("Caroline", "i moved, i live in Denver")])
    stats = builder.ingest(eps)
    by_text = {f.fact: f for f in store.facts("g")}
    old, new = by_text["Caroline lives in Boston."], by_text["Caroline lives in Denver."]
    assert old.valid_at == datetime(2022, 1, 1)
    assert new.valid_at == eps[1].valid_at  # no date given: the message time
    assert old.invalid_at == new.valid_at and old.expired_at == eps[1].valid_at
    assert new.invalid_at is None and new.expired_at is None
    assert stats.counters["facts.invalidated"] == 1
    assert len(store.facts("g")) == 2  # nothing deleted


def test_contradiction_uses_the_new_facts_stated_date(build):
    facts = {"i live in Boston": [fact(0, 1, "Caroline lives in Boston.", valid="2022-01-01")],
             "i moved to Denver": [fact(0, 1, "Caroline lives in Denver.", valid="2023-04-30T10:00:00Z")]}
    builder, _, store = build(facts_responder(facts, contradict_lives))
    builder.ingest(episodes("g", [("Caroline", "i live in Boston"), ("Caroline", "i moved to Denver")]))
    by_text = {f.fact: f for f in store.facts("g")}
    assert by_text["Caroline lives in Boston."].invalid_at == datetime(2023, 4, 30, 10, 0)


def test_older_new_fact_is_ended_by_the_stored_newer_one(build):
    facts = {"i live in Denver": [fact(0, 1, "Caroline lives in Denver.", valid="2023-01-01")],
             "i lived in Boston": [fact(0, 1, "Caroline lives in Boston.", valid="2020-01-01")]}
    builder, _, store = build(facts_responder(facts, contradict_lives))
    builder.ingest(episodes("g", [("Caroline", "i live in Denver"), ("Caroline", "i lived in Boston")]))
    by_text = {f.fact: f for f in store.facts("g")}
    assert by_text["Caroline lives in Denver."].invalid_at is None
    assert by_text["Caroline lives in Boston."].invalid_at == datetime(2023, 1, 1)


def test_duplicate_facts_merge(build):
    facts = {"i adopted Luna": [fact(0, 1, "Caroline adopted a dog named Luna.", "ADOPTED")],
             "Luna is my new dog": [fact(0, 1, "Caroline has a new dog, Luna.", "OWNS")]}

    def decide(new, old):
        return (0 if "Luna" in new and old else -1), []

    builder, backend, store = build(facts_responder(facts, decide))
    eps = episodes("g", [("Caroline", "i adopted Luna"), ("Caroline", "Luna is my new dog")])
    builder.ingest(eps)
    (only,) = store.facts("g")
    assert only.fact == "Caroline adopted a dog named Luna." and only.episode_ids == [eps[0].id, eps[1].id]
    assert len(backend.batches_for("dedup_facts")) == 1


def test_exact_duplicate_merges_without_llm(build):
    same = [fact(0, 1, "Caroline likes Luna.", "LIKES")]
    builder, backend, store = build(facts_responder({"i like Luna": same, "i really like Luna": same},
                                                    lambda n, o: (-1, [])))
    eps = episodes("g", [("Caroline", "i like Luna"), ("Caroline", "i really like Luna")])
    stats = builder.ingest(eps)
    (only,) = store.facts("g")
    assert only.episode_ids == [e.id for e in eps]
    assert not backend.batches_for("dedup_facts") and stats.counters["facts.exact_duplicate"] == 1


def test_fact_ids_are_deterministic(build):
    from mnemis.types import fact_id

    facts = {"i like Luna and Max": [fact(0, 1, "Caroline likes Luna.", "LIKES"),
                                     fact(0, 2, "Caroline likes Max.")]}
    builder, _, store = build(facts_responder(facts, lambda n, o: (-1, [])))
    eps = episodes("g", [("Caroline", "i like Luna and Max")])
    builder.ingest(eps)
    assert {f.id for f in store.facts("g")} == {fact_id("g", eps[0].id, 0), fact_id("g", eps[0].id, 1)}
