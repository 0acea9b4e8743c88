"""Entity resolution: LLM-decided merges, exact matches without the LLM, the speaker rule."""

from __future__ import annotations

from tests.helpers.ingest import current_message, episodes, rule_responder, section


def names_responder(names_by_text: dict[str, list[str]], merge: bool):
    """Entities per message text; the resolution LLM merges a new name into a known one iff ``merge``."""

    def respond(req):
        if req.stage == "extract_entities":
            msg = current_message(req).split(": ", 1)[1]
            return {"names": names_by_text.get(msg, [])}
        if req.stage == "resolve_entities":
            known = [k.split(" - ")[0] for k in section(req, "Known entities:")]
            new = section(req, "New names:")
            target = known.index("Melanie") if "Melanie" in known else -1
            return {"decisions": [{"new": i, "match": target if merge and n == "Mel" else -1}
                                  for i, n in enumerate(new)]}
        return rule_responder(req)

    return respond


TURNS = [("Melanie", "I love pottery"), ("Caroline", "Mel, that is great"), ("Caroline", "Mel again")]
NAMES = {"I love pottery": ["pottery"], "Mel, that is great": ["Mel"], "Mel again": ["Mel"]}


def test_merges_mel_into_melanie_when_llm_says_so(build):
    builder, backend, store = build(names_responder(NAMES, merge=True))
    eps = episodes("g", TURNS)
    stats = builder.ingest(eps)
    names = sorted(e.name for e in store.entities("g"))
    assert names == ["Caroline", "Melanie", "pottery"]
    melanie = next(e for e in store.entities("g") if e.name == "Melanie")
    for ep in eps[1:]:
        assert melanie.id in {m.entity_id for m in store.mentions("g", episode_ids=[ep.id])}
    # the merge is remembered: the third "Mel" resolves exactly, so only one resolution request was sent
    assert len([r for r in backend.requests if r.stage == "resolve_entities"]) == 1
    assert stats.counters["resolve.merged"] == 1


def test_keeps_mel_separate_when_llm_says_no(build):
    builder, backend, store = build(names_responder(NAMES, merge=False))
    builder.ingest(episodes("g", TURNS))
    assert sorted(e.name for e in store.entities("g")) == ["Caroline", "Mel", "Melanie", "pottery"]
    # "Mel" was new at turn 2 (asked), exact at turn 3 (not asked)
    assert len([r for r in backend.requests if r.stage == "resolve_entities"]) == 1


def test_exact_normalised_match_skips_llm(build):
    names = {"I love pottery": ["Pottery"], "pottery is fun": ["  POTTERY ", "melanie"]}
    builder, backend, store = build(names_responder(names, merge=True))
    builder.ingest(episodes("g", [("Melanie", "I love pottery"), ("Caroline", "pottery is fun")]))
    assert not backend.batches_for("resolve_entities")
    assert sorted(e.name for e in store.entities("g")) == ["Caroline", "Melanie", "Pottery"]


def test_speaker_rule_always_fires(build):
    # the extractor finds nothing at all; the speakers still become speaker entities with mentions
    builder, backend, store = build(names_responder({}, merge=False))
    eps = episodes("g", [("Melanie", "hello there"), ("Caroline", "hi"), ("Melanie", "bye")])
    builder.ingest(eps)
    ents = {e.name: e for e in store.entities("g")}
    assert set(ents) == {"Melanie", "Caroline"} and all(e.is_speaker for e in ents.values())
    for ep in eps:
        assert [m.entity_id for m in store.mentions("g", episode_ids=[ep.id])] == [ents[ep.speaker].id]


def test_speaker_named_by_someone_else_first_becomes_speaker(build):
    names = {"hi, where is Caroline": ["Caroline"], "here": []}
    builder, _, store = build(names_responder(names, merge=False))
    builder.ingest(episodes("g", [("Melanie", "hi, where is Caroline"), ("Caroline", "here")]))
    ents = {e.name: e for e in store.entities("g")}
    assert set(ents) == {"Melanie", "Caroline"} and ents["Caroline"].is_speaker


def test_groups_are_isolated(build):
    builder, _, store = build(names_responder({"I love pottery": ["pottery"]}, merge=True))
    builder.ingest(episodes("a", [("Melanie", "I love pottery")])
                   + episodes("b", [("Jon", "I love pottery")]))
    a, b = store.entities("a"), store.entities("b")
    assert {e.name for e in a} == {"Melanie", "pottery"} and {e.name for e in b} == {"Jon", "pottery"}
    assert not {e.id for e in a} & {e.id for e in b}
