"""Base-graph prompts in paper mode (whole context episodes, no caps of ours, date-times) and decoding bounds
that follow the list each request shows, in every mode (a union of per-item candidates can pass 100)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from mnemis.config import compose, to_plain
from mnemis.ingest.extract import EpisodeExtraction, ExtractedFactRecord, extract_episodes
from mnemis.ingest.facts import GroupFacts, dedup_step
from mnemis.ingest.resolve import GroupEntities, resolve_step
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.budget import plan, worst_case_tokens
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.extract_entities import EXTRACT_ENTITIES, ExtractedEntities, entities_schema
from mnemis.prompts.extract_facts import EXTRACT_FACTS, facts_schema
from mnemis.prompts.limits import DEFAULT_LIMITS, PAPER_LIMITS, PromptLimits
from mnemis.prompts.resolve_entities import RESOLVE_ENTITIES
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, Fact, entity_id
from tests.helpers.ingest import T0, episodes, section

EMB = HashingEmbedder(64)
LONG = " ".join(f"word{i}" for i in range(120))  # a 120-word earlier message


def _user(msgs):
    return msgs[-1]["content"]


def test_paper_context_shows_whole_earlier_episodes_and_ours_cuts_them():
    prev = episodes("g", [("Ann", LONG)])
    (cur,) = episodes("g", [("Bob", "Hi Ann")], first=1)
    paper = _user(EXTRACT_ENTITIES.render(cur, prev, PAPER_LIMITS))
    ours = _user(EXTRACT_ENTITIES.render(cur, prev, DEFAULT_LIMITS))
    assert "word119" in paper and "..." not in paper
    assert "word38" in ours and "word39" not in ours and "..." in ours  # "Ann:" + 39 words
    assert ours == _user(EXTRACT_ENTITIES.render(cur, prev))  # the default render is ours


def test_paper_facts_ask_for_date_times_and_ours_for_days():
    (ep,) = episodes("g", [("Ann", "I moved to Denver yesterday")])
    paper = _user(EXTRACT_FACTS.render(ep, [], ["Ann", "Denver"], PAPER_LIMITS))
    ours = _user(EXTRACT_FACTS.render(ep, [], ["Ann", "Denver"]))
    assert "YYYY-MM-DDTHH:MM:SS" in paper and f"{T0:%Y-%m-%dT%H:%M:%S}" in paper
    assert "YYYY-MM-DDTHH" not in ours and "(YYYY-MM-DD)" in ours


def test_no_cap_of_ours_in_paper_mode_but_every_schema_stays_bounded():
    (ep,) = episodes("g", [("Ann", "Ann met Bob, Cat, Dan, Eve, Fay, Gus, Hal, Ida, Jon, Kim and Lou in Oslo")])
    assert entities_schema(ep, DEFAULT_LIMITS) is ExtractedEntities  # ours: the 10-name schema, unchanged
    paper_names = entities_schema(ep, PAPER_LIMITS).model_json_schema()["properties"]["names"]["maxItems"]
    assert paper_names == len(set(ep.content.casefold().split())) > 10
    facts = facts_schema(13, PAPER_LIMITS).model_json_schema()
    assert facts["properties"]["facts"]["maxItems"] == 13 * 12
    assert facts_schema(13, DEFAULT_LIMITS).model_json_schema()["properties"]["facts"]["maxItems"] == 8
    for schema in (entities_schema(ep, PAPER_LIMITS), facts_schema(13, PAPER_LIMITS)):
        assert worst_case_tokens(schema.model_json_schema()) is not None
        assert plan(schema.model_json_schema(), 0, "raise")[2] == "auto"  # max_tokens: auto has a value


def test_fact_indexes_are_bounded_by_the_listed_entities():
    item = facts_schema(3, DEFAULT_LIMITS).model_json_schema()["$defs"]["ExtractedFact"]["properties"]
    assert (item["source"]["maximum"], item["target"]["maximum"]) == (2, 2)


def test_paper_extraction_reply_keeps_more_than_our_caps():
    (ep,) = episodes("g", [("Ann", " ".join(f"Name{i}" for i in range(14)))])
    names = [f"Name{i}" for i in range(14)]

    def reply(req):
        if req.stage == "extract_entities":
            return {"names": names}
        if req.stage == "extract_facts":
            return {"facts": [{"source": 0, "target": j, "relation": "KNOWS", "fact": f"Ann knows Name{j}.",
                               "valid_at": "2023-05-08T13:56:00", "invalid_at": ""} for j in range(1, 13)]}
        return {"names": []} if "entities" in req.stage else {"facts": []}

    stats: Counter = Counter()
    out = extract_episodes([ep], {}, LLM(ScriptedBackend(reply)), stats, max_tokens={
        "extract_entities": 0, "reflect_entities": 0, "extract_facts": 0, "reflect_facts": 0},
        limits=PAPER_LIMITS)
    ext = out[ep.id]
    assert len(ext.names) == 15 and len(ext.facts) == 12  # the speaker + 14 names; 12 facts (ours cap 10 / 8)
    assert ext.facts[0].valid_at == "2023-05-08T13:56:00"


def test_resolution_shows_the_whole_message_and_summaries_in_paper_mode():
    msg = "Ann: " + LONG
    summary = " ".join(f"s{i}" for i in range(40))
    paper = _user(RESOLVE_ENTITIES.render(msg, ["Annie"], [("Ann", summary)], PAPER_LIMITS))
    ours = _user(RESOLVE_ENTITIES.render(msg, ["Annie"], [("Ann", summary)]))
    assert "word119" in paper and "s39" in paper
    assert "word119" not in ours and "s39" not in ours


def _union_store(store):
    """12 new names, each with 10 known entities of its own (120 in the union)."""
    heads = ["Amber", "Basil", "Cedar", "Delta", "Ember", "Flint", "Grove", "Heron", "Iris", "Jasper",
             "Kestrel", "Lotus"]
    tails = ["Ray", "Sol", "Tam", "Uma", "Vic", "Wen", "Xia", "Yul", "Zed", "Quin"]
    known = [f"{h} {t}" for h in heads for t in tails]
    store.upsert_entities([Entity(group_id="g", id=entity_id("g", n), name=n) for n in known])
    return heads


def test_resolution_bounds_follow_a_union_of_120_candidates(tmp_path):
    with GraphStore(tmp_path / "m.db") as store:
        new = _union_store(store)
        state = GroupEntities(store, "g", EMB)
        (ep,) = episodes("g", [("Zed", " ".join(new))])
        ext = EpisodeExtraction(names=new)

        def pick_last(req):  # the model picks the 120th known entity for the first name
            n = len(section(req, "Known entities:"))
            return {"decisions": [{"new": 0, "match": n - 1}]}

        backend = ScriptedBackend(pick_last)
        stats: Counter = Counter()
        out = resolve_step([(state, ep, ext)], LLM(backend), EMB, stats, max_candidates=10, per_item=True)
        (req,) = backend.requests
        shown = section(req, "Known entities:")
        assert len(shown) == 120
        schema = req.json_schema()
        item = schema["$defs"]["Resolution"]["properties"]
        assert item["match"]["maximum"] == 119 and item["new"]["maximum"] == 11
        assert schema["properties"]["decisions"]["maxItems"] == 12
        assert out[0].resolved[0] == entity_id("g", shown[119].split(" - ")[0])  # the 120th merges
        assert stats["skip.resolve_bad_match_index"] == 0


def test_dedup_bounds_follow_the_existing_facts_shown(tmp_path):
    ids = [entity_id("g", f"E{i}") for i in range(13)]
    rows = [Fact(group_id="g", id=f"f{j}_{k}", source_id=ids[0], target_id=ids[j], relation="R",
                 fact=f"E0 and E{j} did thing {k}.", valid_at=T0, created_at=T0, episode_ids=["e"])
            for j in range(1, 13) for k in range(10)]
    with GraphStore(tmp_path / "m.db") as store:
        store.upsert_entities([Entity(group_id="g", id=i, name=f"E{n}") for n, i in enumerate(ids)])
        store.upsert_facts(rows)
        state = GroupFacts(store, "g", EMB)
        (ep,) = episodes("g", [("E0", "news")], start=T0 + timedelta(days=1))
        ext = EpisodeExtraction(names=[f"E{i}" for i in range(13)], facts=[
            ExtractedFactRecord(0, j, "R", f"E0 and E{j} did a new thing.") for j in range(1, 13)])
        backend = ScriptedBackend(lambda req: {"decisions": []})
        dedup_step([(state, ep, ext, ids)], LLM(backend), EMB, Counter(), max_candidates=10,
                   min_similarity=0.0, per_item=True)
        (req,) = backend.requests
        n = len(section(req, "Existing facts:"))
        assert n >= 120
        schema = req.json_schema()
        item = schema["$defs"]["FactDecision"]["properties"]
        assert item["duplicate_of"]["maximum"] == n - 1 and item["contradicts"]["items"]["maximum"] == n - 1
        assert item["contradicts"]["maxItems"] == n and item["new"]["maximum"] == 11
        assert schema["properties"]["decisions"]["maxItems"] == 12


def test_paper_mode_composes_the_paper_extraction():
    paper = to_plain(compose(["experiment=paper_locomo_k10"]))["ingest"]
    assert paper["context_window"] == 10
    assert PromptLimits.model_validate(paper["prompt_limits"]) == PAPER_LIMITS
    assert to_plain(compose(["experiment=paper_lme_s"]))["ingest"]["context_window"] == 3  # bulk ingestion
    ours = to_plain(compose(["experiment=quickstart"]))["ingest"]
    assert PromptLimits.model_validate(ours["prompt_limits"]) == DEFAULT_LIMITS
