"""System-2 global selection with a scripted LLM on a hand-built two-group hierarchy."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.system2 import System2, System2Config, save_traversals, selection_cost
from mnemis.types import Episode, Fact, Mention, Question
from tests.helpers.system2 import T0, build_store, cid, eid, prompt_candidates, selector

HEALTH = "What health problem does Caroline have?"
MUSIC = "Which instrument does Caroline play?"
WORK = "What does Bob work on?"
TRIP = "Where did Bob travel?"


def q(text: str, group: str = "g1", n: int = 0) -> Question:
    return Question(group_id=group, id=f"{group}-q{n}", question=text, answer="", category="1")


@pytest.fixture
def store(tmp_path):
    s = build_store(tmp_path / "m.db")
    yield s
    s.close()


def run(store, plan, questions, *, max_retries: int = 0, **cfg):
    backend = ScriptedBackend(selector(plan) if not callable(plan) else plan)
    llm = LLM(backend, max_retries=max_retries)
    res = System2(store, llm, **cfg).select(questions)
    return res, backend, llm


def entity_ids(res) -> set[str]:
    return {h.id for h in res.context.entities}


def test_walk_selects_down_to_entities_and_expands_one_hop(store):
    plan = {HEALTH: {"Lifestyle": False, "Health": False, "gastritis": False}}
    [res], backend, _ = run(store, plan, [q(HEALTH)])
    assert res.traversal.fallback is None and not res.fallback
    assert [r.layer for r in res.traversal.rounds] == [2, 1, 0]
    assert len(backend.batches) == 3
    assert entity_ids(res) >= {cid("g1", 2, "Lifestyle"), cid("g1", 1, "Health"), eid("g1", "gastritis")}
    kinds = {h.id: h.kind for h in res.context.entities}
    assert kinds[cid("g1", 1, "Health")] == "category" and kinds[eid("g1", "gastritis")] == "entity"
    # one hop: the fact, its other end (Caroline) and the mentioning episode
    assert [h.id for h in res.context.facts] == ["g1_f0"]
    assert eid("g1", "Caroline") in entity_ids(res)
    assert [h.id for h in res.context.episodes] == [Episode.make_id("g1", "D1:1")]
    # round 1 shows the children of Lifestyle only; round 2 the entity children of Health
    names1 = [c["name"] for c in prompt_candidates(backend.batches[1][0])]
    assert names1 == ["Health", "Hobbies"]
    names2 = [c["name"] for c in prompt_candidates(backend.batches[2][0])]
    assert names2 == ["gastritis", "yoga"]


def test_shortcut_adds_subtree_without_further_calls(store):
    plan = {MUSIC: {"Lifestyle": True}}
    [res], backend, _ = run(store, plan, [q(MUSIC)])
    assert len(backend.batches) == 1
    assert res.traversal.rounds[0].flagged == [cid("g1", 2, "Lifestyle")]
    want = {cid("g1", 2, "Lifestyle"), cid("g1", 1, "Health"), cid("g1", 1, "Hobbies"),
            eid("g1", "gastritis"), eid("g1", "yoga"), eid("g1", "guitar"), eid("g1", "painting")}
    assert want <= entity_ids(res)
    assert cid("g1", 2, "People") not in entity_ids(res)
    assert {"g1_f0", "g1_f1", "g1_f2", "g1_f3"} == {h.id for h in res.context.facts}


def test_shortcut_node_left_out_when_configured(store):
    [res], _, _ = run(store, {MUSIC: {"Lifestyle": True}}, [q(MUSIC)], include_shortcut_nodes=False)
    assert cid("g1", 2, "Lifestyle") not in entity_ids(res)
    assert cid("g1", 1, "Health") in entity_ids(res)


def test_empty_round_stops_the_walk_but_keeps_earlier_selection(store):
    [res], backend, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH)])
    assert len(backend.batches) == 2
    assert res.traversal.fallback is None
    assert [h.id for h in res.context.entities] == [cid("g1", 2, "Lifestyle")]
    assert res.context.facts == [] and res.context.episodes == []


def test_entity_round_disabled_reproduces_released_code(store):
    plan = {HEALTH: {"Lifestyle": False, "Health": False, "gastritis": False}}
    [res], backend, _ = run(store, plan, [q(HEALTH)], entity_round=False)
    assert len(backend.batches) == 2
    assert [r.layer for r in res.traversal.rounds] == [2, 1]
    assert eid("g1", "gastritis") not in entity_ids(res)
    assert res.context.facts == []
    # entities still enter through a shortcut subtree
    [res2], _, _ = run(store, {HEALTH: {"Lifestyle": False, "Health": True}}, [q(HEALTH)], entity_round=False)
    assert eid("g1", "gastritis") in entity_ids(res2) and res2.context.facts


def test_multi_parent_child_shown_once(store):
    plan = {MUSIC: {"Lifestyle": False, "Health": False, "Hobbies": False}}
    [res], backend, _ = run(store, plan, [q(MUSIC)])
    names = [c["name"] for c in prompt_candidates(backend.batches[2][0])]
    assert names == ["gastritis", "guitar", "painting", "yoga"]


def test_invented_selections_are_ignored_and_counted(store):
    plan = {HEALTH: {"Lifestyle": False}}
    extra = lambda text: [{"id": "n99", "name": "Bogus"}, {"id": "", "name": "lifestyle"}]  # noqa: E731
    backend_fn = selector(plan, extra=extra)
    [res], _, _ = run(store, backend_fn, [q(HEALTH)])
    r0 = res.traversal.rounds[0]
    assert r0.invented == 1  # "lifestyle" maps by case-insensitive name
    assert r0.selected == [cid("g1", 2, "Lifestyle")]


def test_failing_query_falls_back_while_others_succeed(store):
    plan = {HEALTH: {"Lifestyle": False, "Health": False}, WORK: {"Work": False}}
    fn = selector(plan, fail=lambda text: text == MUSIC)
    res, _, llm = run(store, fn, [q(HEALTH), q(MUSIC, n=1), q(WORK, "g2")])
    assert not res[0].fallback and cid("g1", 1, "Health") in entity_ids(res[0])
    assert res[1].fallback and res[1].traversal.fallback == "llm_failure"
    assert "s2_fallback" in res[1].context.flags and res[1].context.entities == []
    assert not res[2].fallback
    assert llm.ledger.stage("select").failures == 1


def test_nothing_selected_at_top_falls_back(store):
    [res], _, _ = run(store, {}, [q("Unrelated question?")])
    assert res.traversal.fallback == "empty_top_selection"
    assert res.context.flags[0] == "s2_fallback"


def test_group_without_hierarchy_falls_back_without_calls(tmp_path):
    store = build_store(tmp_path / "m.db", groups=("g1",))
    store.replace_hierarchy("g1", [], [])
    [res], backend, _ = run(store, {}, [q(HEALTH)])
    assert res.traversal.fallback == "no_hierarchy" and backend.batches == []


def test_one_generate_per_round_across_queries_and_groups(store):
    plan = {HEALTH: {"Lifestyle": False, "Health": False, "gastritis": False},
            MUSIC: {"Lifestyle": False, "Hobbies": False, "guitar": False},
            WORK: {"Work": False, "Projects": False, "database migration": False},
            TRIP: {"Travel": True}}
    qs = [q(HEALTH), q(MUSIC, n=1), q(WORK, "g2", 2), q(TRIP, "g2", 3)]
    res, backend, llm = run(store, plan, qs)
    assert len(backend.batches) == 3
    assert [len(b) for b in backend.batches] == [4, 3, 3]
    groups0 = {"g1" if "Lifestyle" in r.messages[-1]["content"] else "g2" for r in backend.batches[0]}
    assert groups0 == {"g1", "g2"}
    # same group -> identical prompt prefix up to the query
    p0, p1 = (r.messages[-1]["content"].split("Query:")[0] for r in backend.batches[0][:2])
    assert p0 == p1
    assert eid("g2", "Paris") in entity_ids(res[3]) and eid("g2", "Tokyo") in entity_ids(res[3])
    assert llm.ledger.stage("select").calls == 10 and llm.ledger.stage("select").batches == 3
    cost = selection_cost(res)
    assert cost["calls"] == 10 and cost["prompt_tokens"] > 0 and cost["fallbacks"] == 0


def test_wide_candidate_lists_are_split_and_merged(store):
    plan = {HEALTH: {"Lifestyle": False, "People": False, "Health": False, "Speaker": False}}
    [res], backend, _ = run(store, plan, [q(HEALTH)], max_candidates_per_prompt=1, entity_round=False)
    assert [len(b) for b in backend.batches] == [2, 4]
    assert res.traversal.rounds[0].prompts == 2
    assert set(res.traversal.rounds[0].selected) == {cid("g1", 2, "Lifestyle"), cid("g1", 2, "People")}
    assert set(res.traversal.rounds[1].selected) == {cid("g1", 1, "Health"), cid("g1", 1, "Speaker")}
    # each split prompt numbers its own candidates from n1
    assert all(prompt_candidates(r)[0]["id"] == "n1" for r in backend.batches[0])


def test_partial_prompt_failure_keeps_other_chunks(store):
    def fn(req):
        cands = prompt_candidates(req)
        if cands[0]["name"] == "Lifestyle":
            raise RuntimeError("boom")
        return {"selections": [{"id": c["id"], "name": c["name"]} for c in cands if c["name"] == "People"]}

    [res], _, _ = run(store, fn, [q(HEALTH)], max_candidates_per_prompt=1, entity_round=False)
    assert res.traversal.rounds[0].failed_prompts == 1
    assert res.traversal.rounds[0].selected == [cid("g1", 2, "People")]
    assert "s2_prompt_failed" in res.context.flags and not res.fallback


def test_hub_entity_expansion_is_capped_and_query_aware(tmp_path):
    store = build_store(tmp_path / "m.db", groups=("g1",))
    g, hub = "g1", eid("g1", "Caroline")
    store.upsert_facts([Fact(group_id=g, id=f"hub{n}", source_id=hub, target_id=eid(g, "sister"), relation="R",
                             fact=f"Caroline mentioned topic {n}", valid_at=T0) for n in range(40)])
    store.upsert_episodes([Episode(group_id=g, id=f"g1:X{n}", source_id=f"X{n}", name="x", speaker="Caroline",
                                   content=f"filler {n}", valid_at=T0 + timedelta(days=n), session=2, turn=n,
                                   position=100 + n) for n in range(40)])
    store.add_mentions([Mention(group_id=g, episode_id=f"g1:X{n}", entity_id=hub) for n in range(40)])
    text = "Does Caroline have gastritis?"
    [res], _, _ = run(store, {text: {"People": False, "Speaker": False, "Caroline": False}}, [q(text)],
                      max_facts_per_entity=3, max_episodes_per_entity=4, max_neighbours_per_entity=1)
    facts = [h.id for h in res.context.facts]
    assert len(facts) == 3 and facts[0] == "g1_f0"  # the fact sharing "gastritis" with the query first
    eps = [h.id for h in res.context.episodes]
    assert len(eps) == 4 and eps[0] == Episode.make_id("g1", "D1:1")
    assert res.traversal.counts == {"entities": len(res.context.entities), "facts": 3, "episodes": 4}
    neighbours = [h for h in res.context.entities if h.scores["s2"] == 0.5]
    assert len(neighbours) == 1


def test_per_type_cap_applies_across_entities(store):
    [res], _, _ = run(store, {MUSIC: {"Lifestyle": True}}, [q(MUSIC)], max_items_per_type=2)
    assert len(res.context.facts) <= 2 and len(res.context.episodes) <= 2 and len(res.context.entities) <= 2


def test_traversal_log_saved_as_jsonl(store, tmp_path):
    res, _, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH), q("nothing", n=1)])
    path = tmp_path / "out" / "traversal.jsonl"
    save_traversals(res, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["g1-q0", "g1-q1"]
    assert rows[0]["rounds"][0]["candidates"] == [cid("g1", 2, "Lifestyle"), cid("g1", 2, "People")]
    assert rows[1]["fallback"] == "empty_top_selection"


def test_config_rejects_unknown_keys():
    with pytest.raises(ValueError):
        System2Config(max_candidates=3)


def test_truncated_reply_is_salvaged(store):
    def fn(req):
        c = prompt_candidates(req)[0]
        return '{"selections": [{"id": "%s", "name": "%s", "take_all_children": false}, {"id": "n2", "na' % (
            c["id"], c["name"])

    [res], backend, llm = run(store, fn, [q(HEALTH)], max_retries=1, entity_round=False)
    r0 = res.traversal.rounds[0]
    assert r0.salvaged == 1 and r0.failed_prompts == 0 and r0.selected == [cid("g1", 2, "Lifestyle")]
    assert llm.ledger.stage("select").retries >= 1  # the client re-asked before we salvaged
    [res2], _, _ = run(store, fn, [q(HEALTH)], salvage=False)
    assert res2.traversal.fallback == "llm_failure"


def _schema_bound(req) -> object:
    """A model that picks nothing unless the decoding schema demands a pick; then it picks the first candidate."""
    need = req.json_schema()["properties"]["selections"].get("minItems", 0)
    first = prompt_candidates(req)[0]
    return {"selections": [{"id": first["id"], "name": first["name"], "take_all_children": False}] if need else []}


def test_every_round_must_pick_when_configured(store):
    """min_lower_selections puts minItems on every later round, so a model that would stop at the top goes on
    down to the entities; with 0 the same model stops after its forced first pick."""
    [res], backend, _ = run(store, _schema_bound, [q(HEALTH)], min_top_selections=1, min_lower_selections=1)
    rounds = [b[0].json_schema()["properties"]["selections"] for b in backend.batches]
    assert [r.get("minItems") for r in rounds] == [1, 1, 1]
    assert [r.layer for r in res.traversal.rounds] == [2, 1, 0]
    assert all(r.selected for r in res.traversal.rounds)
    assert any(h.kind == "entity" for h in res.context.entities) and res.context.facts
    [res0], backend0, _ = run(store, _schema_bound, [q(HEALTH)], min_top_selections=1, min_lower_selections=0)
    assert len(backend0.batches) == 2 and not res0.traversal.rounds[1].selected
    assert all(h.kind == "category" for h in res0.context.entities) and not res0.context.facts


def test_decoding_schema_restricts_ids_and_length(store):
    [res], backend, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH)])
    schema = backend.batches[0][0].json_schema()
    item = schema["$defs"]["NodeSelection"]
    assert item["properties"]["id"]["enum"] == ["n1", "n2"]
    assert schema["properties"]["selections"]["maxItems"] == 2
    [_], backend2, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH)], constrain_ids=False)
    assert "enum" not in backend2.batches[0][0].json_schema()["$defs"]["NodeSelection"]["properties"]["id"]


def test_first_round_must_pick_when_configured(store):
    """min_top_selections puts minItems on the first round's decoding schema only (0: none anywhere)."""
    [_], backend, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH)], min_top_selections=1,
                          min_lower_selections=0)
    rounds = [b[0].json_schema()["properties"]["selections"] for b in backend.batches]
    assert len(rounds) >= 2 and rounds[0]["minItems"] == 1 and all("minItems" not in r for r in rounds[1:])
    [_], backend0, _ = run(store, {HEALTH: {"Lifestyle": False}}, [q(HEALTH)], min_top_selections=0,
                           min_lower_selections=0)
    assert all("minItems" not in b[0].json_schema()["properties"]["selections"] for b in backend0.batches)
    from mnemis.prompts.select_nodes import selection_schema

    assert selection_schema(2, 5).model_json_schema()["properties"]["selections"]["minItems"] == 2  # capped at K
