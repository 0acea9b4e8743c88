"""The paper's layer build: sequential batches that see the layer's earlier categories with descriptions,
and per-layer progress records so a killed build resumes without asking again for finished layers."""

from __future__ import annotations

import pytest

from mnemis.hierarchy import HierarchyConfig, build_hierarchies, organize
from mnemis.hierarchy.progress import PROGRESS_KEY
from mnemis.models.embed import HashingEmbedder
from mnemis.store.sqlite import GraphStore
from tests.helpers.hierarchy import (
    STAGE_CATEGORIZE,
    STAGE_DESCRIBE,
    by_map,
    described,
    make_entities,
    prompt_layer,
    prompt_nodes,
    scripted,
)

SPEC = {"Dog": ["pet", "animal"], "Cat": ["pet", "animal"], "Oak": ["tree"], "Maple": ["tree"],
        "Guitar": ["instrument"], "Piano": ["instrument"], "Hamster": ["pet"], "Elm": ["tree"]}
LAYER1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Hamster": ["Pets"], "Oak": ["Trees"], "Maple": ["Trees"],
          "Elm": ["Trees"], "Guitar": ["Instruments"], "Piano": ["Instruments"]}
LAYER2 = {"Pets": ["Living Things"], "Trees": ["Living Things"], "Instruments": ["Culture"],
          "Speaker": ["Culture"]}
LAYER3 = {"Living Things": ["World"], "Culture": ["World"]}
PAPER = {"sequential_batches": True, "existing_descriptions": True, "max_existing": None}


def _existing_lines(req) -> list[str]:
    text = req.messages[-1]["content"]
    if "Existing categories" not in text:
        return []
    return text.split("Existing categories", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_sequential_batches_see_earlier_categories_with_descriptions():
    groups = {g: make_entities(g, SPEC, speakers=["Ann"]) for g in ("a", "b")}
    llm, backend = scripted(by_map({1: LAYER1}))
    build_hierarchies(groups, llm, HierarchyConfig(batch_size=3, max_layers=1, **PAPER))
    rounds = [b for b in backend.batches if b[0].stage == STAGE_CATEGORIZE]
    # 8 nodes in batches of 3, 3, 2: three rounds, each one generate() holding both groups
    assert [len(b) for b in rounds] == [2, 2, 2]
    first, second, third = (r[0] for r in rounds)
    assert prompt_nodes(first) == ["Dog", "Cat", "Oak"]
    assert prompt_nodes(second) == ["Maple", "Guitar", "Piano"]
    assert _existing_lines(first) == ["- Speaker [conversation participant]: e.g. Ann"]
    # round 2 sees what round 1 made, each category described by its members' tags and names
    assert set(_existing_lines(second)) == {"- Speaker [conversation participant]: e.g. Ann",
                                            "- Pets [pet, animal]: e.g. Dog, Cat", "- Trees [tree]: e.g. Oak"}
    assert "- Trees [tree]: e.g. Oak, Maple" in _existing_lines(third)
    assert "- Instruments [instrument]: e.g. Guitar, Piano" in _existing_lines(third)


def test_parallel_default_shows_no_earlier_batch_and_names_only():
    llm, backend = scripted(by_map({1: LAYER1}))
    build_hierarchies({"a": make_entities("a", SPEC, speakers=["Ann"])}, llm,
                      HierarchyConfig(batch_size=3, max_layers=1))
    (first_pass, *_) = [b for b in backend.batches if b[0].stage == STAGE_CATEGORIZE]
    assert len(first_pass) == 3 and all(_existing_lines(r) == ["- Speaker"] for r in first_pass)


class Kill(BaseException):
    pass


def _dies_at(layer: int):
    respond = by_map({1: LAYER1, 2: LAYER2, 3: LAYER3})

    def f(req):
        if req.stage == STAGE_CATEGORIZE and prompt_layer(req) == layer:
            raise Kill
        return respond(req)

    return f


def _fill(store):
    for g in ("a", "b"):
        store.upsert_entities(make_entities(g, SPEC, speakers=["Ann"]))


def _hierarchy(store, g):
    return ([c.model_dump() for c in store.categories(g)], sorted((e.parent_id, e.child_id)
                                                                  for e in store.category_edges(g)))


def test_killed_build_resumes_per_layer_without_asking_again(tmp_path):
    cfg = HierarchyConfig(batch_size=4, **PAPER)
    with GraphStore(tmp_path / "ref.db") as ref:
        _fill(ref)
        llm, _ = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
        expect = organize(ref, llm, ["a", "b"], cfg, embedder=HashingEmbedder(16))
        expect_rows = {g: _hierarchy(ref, g) for g in ("a", "b")}

    with GraphStore(tmp_path / "m.db") as store:
        _fill(store)
        llm, _ = scripted(_dies_at(3))
        with pytest.raises(Kill):
            organize(store, llm, ["a", "b"], cfg, embedder=HashingEmbedder(16))
        # layers 1 and 2 are committed, with their progress records
        assert {c.layer for c in store.categories("a")} == {1, 2}
        assert store.get_meta(PROGRESS_KEY.format("a"))["next_layer"] == 3

        llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
        got = organize(store, llm, ["a", "b"], cfg, embedder=HashingEmbedder(16))
        asked = {prompt_layer(r) for r in backend.requests if r.stage == STAGE_CATEGORIZE}
        asked |= {described(r)[1] for r in backend.requests if r.stage == STAGE_DESCRIBE}
        assert asked == {3}  # finished layers made no LLM call
        assert {g: _hierarchy(store, g) for g in ("a", "b")} == expect_rows
        assert {g: m.model_dump() for g, m in got.items()} == {g: m.model_dump() for g, m in expect.items()}
        assert sorted(store.embedded_ids("a", "category")) == sorted(c.id for c in store.categories("a"))

        # a finished build is not redone; changed entities (or config) start afresh
        llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
        again = organize(store, llm, ["a", "b"], cfg)
        assert backend.batches == [] and again["a"] == got["a"]
        assert sorted(store.embedded_ids("a", "category")) == sorted(c.id for c in store.categories("a"))
        store.upsert_entities(make_entities("a", {"Rose": ["flower"]}))
        llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
        organize(store, llm, ["a", "b"], cfg)
        assert 1 in {prompt_layer(r) for r in backend.requests if r.stage == STAGE_CATEGORIZE}  # from scratch
        rounds = [b for b in backend.batches if b[0].stage == STAGE_CATEGORIZE]
        assert rounds and all(len(b) == 1 for b in rounds)  # only group "a" (b is unchanged and finished)


# --------------------------------------------------------------------------- the paper prompt's scaffolding
def test_paper_prompt_carries_examples_guidance_tags_and_the_previous_layer():
    from mnemis.prompts.categorize import NodeView
    from mnemis.prompts.categorize_paper import CATEGORIZE_PAPER

    msgs = CATEGORIZE_PAPER.render([NodeView("Pets", ("animal",)), NodeView("Trees", ("plant",))], 3,
                                   existing=[NodeView("Nature", ("outdoors",), ("Parks",))],
                                   previous=[NodeView("Pets", (), ("Dog", "Cat"))])
    system, user = msgs[0]["content"], msgs[1]["content"]
    for layer in (1, 2, 3, 4):  # worked examples of every layer
        assert f"Layer {layer}," in system
    assert "tags are a short list" in system and '"and"' in system and "Speaker" in system
    assert "You are building layer 3:" in user and "layer 2" in user
    assert "How some of the layer-2 categories were formed:\n- 'Dog', 'Cat' -> 'Pets'" in user
    assert "- Nature [outdoors]: e.g. Parks" in user and "1. Pets [animal]" in user
    first = CATEGORIZE_PAPER.render([NodeView("Dog", ())], 1)[1]["content"]
    assert "You are building layer 1:" in first and "How some of" not in first  # nothing below layer 1


def test_paper_prompt_build_shows_how_the_layer_below_was_grouped():
    llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
    built = build_hierarchies({"a": make_entities("a", SPEC, speakers=["Ann"])}, llm,
                              HierarchyConfig(max_layers=3, prompt="paper", layer_rule="no_growth"))
    sizes = [sum(c.layer == i for c in built["a"].categories) for i in (1, 2, 3)]
    assert sizes == [4, 2, 1]
    reqs = [r for b in backend.batches for r in b if r.stage == STAGE_CATEGORIZE]
    assert [prompt_layer(r) for r in reqs] == [1, 2, 3]
    assert "You are building layer 2" in reqs[1].messages[-1]["content"]
    assert "'Dog', 'Cat', 'Hamster' -> 'Pets'" in reqs[1].messages[-1]["content"]
    assert "# Existing categories" in reqs[0].messages[-1]["content"]


@pytest.mark.parametrize(("rule", "layers", "stop"), [("shrink", 1, "no_shrink"), ("no_growth", 2, "max_layers")])
def test_a_layer_as_large_as_the_one_below_is_kept_under_the_paper_rule(rule, layers, stop):
    # layer 2 puts the 3 layer-1 categories into 3 categories, one of them joining two: same size, a merge
    spec = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Elm": ["tree"], "Sun": ["star"], "Sky": ["star"]}
    layer1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Elm": ["Trees"], "Sun": ["Space"],
              "Sky": ["Space"]}
    layer2 = {"Pets": ["Animals", "Nature"], "Trees": ["Nature", "Plants"], "Space": ["Plants", "Animals"]}
    llm, _ = scripted(by_map({1: layer1, 2: layer2}))
    built = build_hierarchies({"a": make_entities("a", spec)}, llm,
                              HierarchyConfig(max_layers=2, layer_rule=rule))["a"]
    assert max(c.layer for c in built.categories) == layers
    assert built.metrics.stop_reason == stop


def test_a_same_size_layer_that_merged_nothing_ends_the_build():
    spec = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Elm": ["tree"]}
    layer1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Elm": ["Trees"]}
    layer2 = {"Pets": ["Animals"], "Trees": ["Plants"]}  # a one-to-one renaming
    llm, _ = scripted(by_map({1: layer1, 2: layer2}))
    built = build_hierarchies({"a": make_entities("a", spec)}, llm,
                              HierarchyConfig(max_layers=4, layer_rule="no_growth", min_children=1))["a"]
    assert max(c.layer for c in built.categories) == 1 and built.metrics.stop_reason == "no_merge"
