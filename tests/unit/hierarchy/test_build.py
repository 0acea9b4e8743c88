"""The layer loop with a scripted LLM: structure, Speaker, stop rules, batching across groups."""

from __future__ import annotations

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.types import category_id, entity_id
from tests.helpers.hierarchy import (
    STAGE_CATEGORIZE,
    STAGE_DESCRIBE,
    STAGE_REASK,
    by_map,
    described,
    make_entities,
    prompt_existing,
    prompt_layer,
    prompt_nodes,
    scripted,
    stage_calls,
)

SPEC = {
    "Dog": ["pet", "animal"],
    "Cat": ["pet", "animal"],
    "Oak": ["tree"],
    "Maple": ["tree"],
    "Guitar": ["instrument"],
    "Piano": ["instrument"],
}
LAYER1 = {
    "Dog": ["Pets"],
    "Cat": ["Pets"],
    "Oak": ["Trees"],
    "Maple": ["Trees"],
    "Guitar": ["Instruments"],
    "Piano": ["Instruments"],
}
LAYER2 = {
    "Pets": ["Living Things"],
    "Trees": ["Living Things"],
    "Instruments": ["Personal Life"],
    "Speaker": ["Personal Life"],
}
LAYER3 = {"Living Things": ["World"], "Personal Life": ["World"]}


def _by_layer(built):
    out: dict[int, list[str]] = {}
    for c in built.categories:
        out.setdefault(c.layer, []).append(c.name)
    return out


def test_three_layers_speaker_and_one_call_per_step():
    llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
    ents = make_entities("g", SPEC, speakers=["Alice"])
    built = build_hierarchies({"g": ents}, llm)["g"]

    assert _by_layer(built) == {
        1: ["Speaker", "Pets", "Trees", "Instruments"],
        2: ["Personal Life", "Living Things"],
        3: ["World"],
    }
    speaker = category_id("g", 1, "Speaker")
    assert {e.child_id for e in built.edges if e.parent_id == speaker} == {entity_id("g", "Alice")}
    # the speaker is placed by rule, never shown to the model at layer 1; at layer 2 Speaker is a node
    layer1 = [r for r in backend.requests if r.stage == STAGE_CATEGORIZE and prompt_layer(r) == 1]
    assert "Alice" not in prompt_nodes(layer1[0]) and prompt_existing(layer1[0]) == ["Speaker"]
    layer2 = [r for r in backend.requests if r.stage == STAGE_CATEGORIZE and prompt_layer(r) == 2]
    assert "Speaker" in prompt_nodes(layer2[0])
    # nothing left over, so no re-ask: categorize + describe per layer, one backend batch each
    assert stage_calls(backend) == [STAGE_CATEGORIZE, STAGE_DESCRIBE] * 3
    m = built.metrics
    assert m.coverage == 1.0 and m.nodes_per_layer == [7, 4, 2, 1] and m.stop_reason == "single_node"
    assert m.compression_per_layer == [1.75, 2.0, 2.0] and m.llm_failures == 0 and m.promoted == 0
    pets = next(c for c in built.categories if c.name == "Pets")
    assert pets.tags == ["pets"] and pets.summary == "About Pets at layer 1."
    # a single-member Speaker takes its member's description without an LLM call
    assert all(described(r)[0] != "Speaker" for r in backend.requests if r.stage == STAGE_DESCRIBE)


def test_all_groups_batched_in_one_generate_per_step():
    groups = {
        "a": make_entities("a", SPEC, speakers=["Alice"]),
        "b": make_entities("b", {f"{n} B": t for n, t in SPEC.items()}, speakers=["Bob"]),
        "one": make_entities("one", {"Lonely": ["single"]}),
        "none": [],
    }
    layer1 = {**LAYER1, **{f"{n} B": c for n, c in LAYER1.items()}, "Guitar B": []}  # leave one out
    reask = {1: {"Guitar B": ["Instruments"], "Piano B": ["Instruments"]}}
    llm, backend = scripted(by_map({1: layer1, 2: LAYER2, 3: LAYER3}, reask=reask))
    built = build_hierarchies(groups, llm, HierarchyConfig(batch_size=3))

    # one backend call per step and layer, holding every group's requests; trivial groups absent
    assert (
        stage_calls(backend)
        == [STAGE_CATEGORIZE, STAGE_REASK, STAGE_DESCRIBE] + [STAGE_CATEGORIZE, STAGE_DESCRIBE] * 2
    )
    assert [prompt_layer(b[0]) for b in backend.batches if b[0].stage == STAGE_CATEGORIZE] == [1, 2, 3]
    assert len(backend.batches[0]) == 4  # 2 batches (batch_size=3) for each of "a" and "b"
    assert [len(b) for b in backend.batches[3:5]] == [4, 4]  # layer 2: 2 batches per group; 2 describes each
    # "Piano B" lost its only partner, so its category was dissolved and both nodes were re-asked
    assert len(backend.batches[1]) == 1 and prompt_nodes(backend.batches[1][0]) == ["Guitar B", "Piano B"]
    assert prompt_existing(backend.batches[1][0]) == ["Pets", "Trees", "Speaker"]  # largest first
    assert {g: b.metrics.coverage for g, b in built.items()} == {"a": 1.0, "b": 1.0, "one": 1.0, "none": 1.0}
    assert built["b"].metrics.reasked_nodes == 2 and built["b"].metrics.promoted == 0
    assert built["b"].metrics.dissolved == 1
    assert [len(b.categories) for b in built.values()] == [7, 7, 1, 0]
    assert built["none"].categories == [] and built["none"].metrics.stop_reason == "empty"
    one = built["one"].categories
    assert len(one) == 1 and one[0].promoted and one[0].name == "Lonely" and one[0].tags == ["single"]


def test_trivial_groups_make_no_llm_call():
    llm, backend = scripted(lambda req: (_ for _ in ()).throw(AssertionError("no call expected")))
    built = build_hierarchies(
        {
            "empty": [],
            "one": make_entities("one", {"X": ["t"]}),
            "spk": make_entities("spk", {}, speakers=["user"]),
        },
        llm,
    )
    assert backend.batches == []
    assert built["empty"].metrics.layers == 0 and built["empty"].metrics.coverage == 1.0
    for g in ("one", "spk"):
        m = built[g].metrics
        assert m.layers == 1 and m.coverage == 1.0 and m.llm_calls == 0 and m.stop_reason == "single_node"
    assert [c.name for c in built["spk"].categories] == ["Speaker"]


def test_min_children_dissolves_then_reask_fills():
    layer1 = {
        "Dog": ["Pets"],
        "Cat": ["Pets"],
        "Oak": ["Trees"],
        "Maple": ["Trees"],
        "Guitar": ["Instruments"],
        "Piano": ["Keyboards"],
    }  # Instruments and Keyboards have one child
    reask = {1: {"Guitar": ["Instruments"], "Piano": ["Instruments"]}}
    llm, backend = scripted(by_map({1: layer1}, reask=reask))
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1))["g"]
    m = built.metrics
    assert m.dissolved == 2 and m.reasked_nodes == 2 and m.promoted == 0
    assert sorted(_by_layer(built)[1]) == ["Instruments", "Pets", "Trees"]
    reask_req = backend.batches[1][0]
    assert reask_req.stage == STAGE_REASK and sorted(prompt_nodes(reask_req)) == ["Guitar", "Piano"]
    assert "Keyboards" not in prompt_existing(reask_req)  # dissolved categories are not offered again


def test_unplaceable_nodes_are_promoted_with_own_name():
    layer1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Maple": ["Trees"], "Guitar": ["Strings"]}
    reask = {1: {"Guitar": ["Strings"], "Piano": ["Keys"]}}  # still alone: dissolved again, then promoted
    llm, _ = scripted(by_map({1: layer1, 2: {}}, reask=reask))
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1))["g"]
    layer1_cats = {c.name: c for c in built.categories}
    assert sorted(layer1_cats) == ["Guitar", "Pets", "Piano", "Trees"]
    for name in ("Guitar", "Piano"):
        c = layer1_cats[name]
        kids = [e.child_id for e in built.edges if e.parent_id == c.id]
        assert c.promoted and kids == [entity_id("g", name)] and c.summary == f"{name} summary"
    m = built.metrics
    # "Strings" dissolved after the first pass, "Strings" and "Keys" again after the re-ask
    assert m.promoted == 2 and m.dissolved == 3 and m.coverage == 1.0 and m.stop_reason == "max_layers"
    # every non-promoted category honours the minimum of n children
    kids = {c.id: sum(e.parent_id == c.id for e in built.edges) for c in built.categories}
    assert all(kids[c.id] >= 2 for c in built.categories if not c.promoted)


def test_many_to_many_membership_is_kept():
    layer1 = {**LAYER1, "Guitar": ["Instruments", "Strings"], "Piano": ["Instruments", "Strings"]}
    llm, _ = scripted(by_map({1: layer1}))
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1))["g"]
    parents = [e.parent_id for e in built.edges if e.child_id == entity_id("g", "Guitar")]
    assert sorted(parents) == sorted([category_id("g", 1, "Instruments"), category_id("g", 1, "Strings")])
    assert built.metrics.multi_parent_rate == round(2 / 6, 6)


def test_shrink_rule_discards_a_layer_that_does_not_shrink():
    layer2 = {"Pets": ["Pets Group"], "Trees": ["Trees Group"], "Instruments": ["Music Group"]}
    llm, backend = scripted(by_map({1: LAYER1, 2: layer2}))
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm)["g"]
    m = built.metrics
    assert m.layers == 1 and m.stop_reason == "no_shrink" and m.discarded_layer_size == 3
    assert m.dissolved == 3 and m.coverage == 1.0
    assert not any(described(r)[1] == 2 for r in backend.requests if r.stage == STAGE_DESCRIBE)


def test_max_layers_stops_the_build():
    llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2}))
    built = build_hierarchies(
        {"g": make_entities("g", SPEC, speakers=["Alice"])}, llm, {"max_layers": 2, "_target_": "ignored"}
    )["g"]
    assert built.metrics.layers == 2 and built.metrics.stop_reason == "max_layers"
    assert max(prompt_layer(r) for r in backend.requests if r.stage == STAGE_CATEGORIZE) == 2


def test_sequential_batches_show_earlier_categories():
    llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2, 3: LAYER3}))
    cfg = HierarchyConfig(batch_size=3, sequential_batches=True, max_layers=1)
    build_hierarchies({"g": make_entities("g", SPEC)}, llm, cfg)
    first, second = backend.batches[0][0], backend.batches[1][0]
    assert prompt_existing(first) == [] and set(prompt_existing(second)) >= {"Pets"}


def test_describe_can_be_turned_off():
    llm, backend = scripted(by_map({1: LAYER1}))
    built = build_hierarchies(
        {"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1, describe=False)
    )
    assert stage_calls(backend) == [STAGE_CATEGORIZE]
    pets = next(c for c in built["g"].categories if c.name == "Pets")
    assert pets.tags == ["pet", "animal"] and pets.summary == "Pets: Dog, Cat."
