"""The paper's layer build: sequential batches that see the layer's earlier categories with descriptions,
and per-layer progress records so a killed build resumes without asking again for finished layers."""

from __future__ import annotations

import pytest
from hierarchy_helpers import (
    STAGE_CATEGORIZE,
    STAGE_DESCRIBE,
    by_map,
    described,
    make_entities,
    prompt_layer,
    prompt_nodes,
    scripted,
)

from mnemis.hierarchy import HierarchyConfig, build_hierarchies, organize
from mnemis.hierarchy.progress import PROGRESS_KEY
from mnemis.models.embed import HashingEmbedder
from mnemis.store.sqlite import GraphStore

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
