"""Two-step categorisation (propose names, then place every node) with a scripted model: the decoding schema
requires every listed node and allows only the proposed names, many-to-many is kept, batches fit the window,
the minimum-children and shrink rules still apply, and the top layer keeps several categories."""

from __future__ import annotations

import pytest

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.hierarchy.state import LayerNode
from mnemis.hierarchy.two_step import STAGE_ASSIGN, STAGE_PROPOSE, STAGE_REASSIGN, window_batch_size
from mnemis.models.llm.base import LLMRequest
from mnemis.prompts.categorize_two_step import Placement, key_index, node_key, placement_schema, proposal_count
from tests.helpers.hierarchy import (
    STAGE_DESCRIBE,
    TWO_STEP_SPEC,
    described,
    listed_nodes,
    make_entities,
    scripted,
    stage_calls,
)

TWO_STEP = {"categorizer": "two_step", "top_width": 2, "min_children": 2}


def _allowed(req: LLMRequest) -> list[str]:
    body = req.messages[-1]["content"].split("Allowed categories", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    return [line[2:] for line in body.splitlines()]


def responder(table: dict[str, list[str]], *, skip: frozenset[str] = frozenset(), invent: bool = False):
    """Proposes every category ``table`` gives the listed nodes; places each node as ``table`` says (nodes in
    ``skip`` are left out of the first placement; ``invent`` adds a name that was never proposed)."""

    def respond(req: LLMRequest) -> object:
        if req.stage == STAGE_DESCRIBE:
            name, layer = described(req)
            return {"tags": [name.lower()], "summary": f"About {name}."}
        names = listed_nodes(req)
        if req.stage == STAGE_PROPOSE:
            return {"categories": list(dict.fromkeys(c for n in names for c in table.get(n, ())))}
        allowed = set(_allowed(req))
        out = {}
        for k, n in enumerate(names, start=1):
            if req.stage == STAGE_ASSIGN and n in skip:
                continue
            cats = [c for c in table.get(n, ()) if c in allowed] or sorted(allowed)[:1]
            out[node_key(k, n)] = cats + (["Invented"] if invent else [])
        return {"placements": out}

    return respond


TABLE = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Maple": ["Trees"], "Guitar": ["Instruments"],
         "Piano": ["Instruments", "Keyboards"], "Violin": ["Instruments"],
         "Pets": ["Living Things"], "Trees": ["Living Things"], "Instruments": ["Leisure"], "Speaker": ["Leisure"],
         "Keyboards": ["Leisure"]}


def test_every_node_is_placed_many_to_many_and_the_top_keeps_several_categories():
    llm, backend = scripted(responder(TABLE))
    built = build_hierarchies({"g": make_entities("g", TWO_STEP_SPEC, speakers=["Alice"])}, llm, HierarchyConfig(**TWO_STEP))["g"]
    layers: dict[int, set[str]] = {}
    for c in built.categories:
        layers.setdefault(c.layer, set()).add(c.name)
    # Keyboards has one child (Piano) and is dissolved; Piano keeps Instruments, so nothing is promoted
    assert layers[1] == {"Speaker", "Pets", "Trees", "Instruments"}
    assert layers[2] == {"Living Things", "Leisure"} and max(layers) == 2
    assert built.metrics.stop_reason == "top_width" and built.metrics.promoted == 0 and built.metrics.coverage == 1.0
    assert stage_calls(backend)[:2] == [STAGE_PROPOSE, STAGE_ASSIGN]
    # the assignment schema requires every listed node and allows only the proposed names
    req = next(r for r in backend.requests if r.stage == STAGE_ASSIGN)
    schema = req.json_schema()["properties"]["placements"]
    assert schema["required"] == [node_key(k, n) for k, n in enumerate(listed_nodes(req), start=1)]
    assert schema["additionalProperties"] is False
    item = next(iter(schema["properties"].values()))
    assert sorted(item["items"]["enum"]) == sorted(_allowed(req)) and item["minItems"] == 1 and item["maxItems"] == 2


def test_unplaced_and_invented_are_counted_reassigned_then_promoted():
    llm, backend = scripted(responder(TABLE, skip=frozenset({"Oak", "Violin"}), invent=True))
    cfg = HierarchyConfig(**{**TWO_STEP, "top_width": None, "max_layers": 1})
    built = build_hierarchies({"g": make_entities("g", TWO_STEP_SPEC)}, llm, cfg)["g"]
    stages = stage_calls(backend)
    assert stages[:3] == [STAGE_PROPOSE, STAGE_ASSIGN, STAGE_REASSIGN]
    re_req = next(r for r in backend.requests if r.stage == STAGE_REASSIGN)
    # Oak and Violin, and Maple (Trees kept one child and was dissolved), are re-asked over the surviving names
    assert sorted(listed_nodes(re_req)) == ["Maple", "Oak", "Violin"] and "Trees" not in _allowed(re_req)
    m = built.metrics
    assert m.repairs["unknown_categories"] > 0 and m.reasked_nodes == 3 and m.coverage == 1.0


def test_a_layer_closing_into_one_root_is_discarded_when_a_top_width_is_set():
    # layer 2: Leisure gets only Instruments, is dissolved, and Instruments is re-placed under Living Things
    def build(top_width):
        llm, _ = scripted(responder(TABLE))
        cfg = HierarchyConfig(**{**TWO_STEP, "top_width": top_width})
        return build_hierarchies({"g": make_entities("g", TWO_STEP_SPEC)}, llm, cfg)["g"].metrics

    paper_like, ours = build(None), build(2)
    assert paper_like.nodes_per_layer == [7, 3, 1] and paper_like.stop_reason == "single_node"
    assert ours.nodes_per_layer == [7, 3] and ours.stop_reason == "single_root"


def test_batches_shrink_to_the_window():
    nodes = [LayerNode(f"e{i}", f"Entity number {i}", ("some tag", "another tag")) for i in range(40)]
    wide = HierarchyConfig(categorizer="two_step", batch_size=40, window_tokens=32768)
    narrow = HierarchyConfig(categorizer="two_step", batch_size=40, window_tokens=4096)
    assert window_batch_size(nodes, wide) == 40
    assert 2 <= window_batch_size(nodes, narrow) < 40
    assert window_batch_size(nodes, HierarchyConfig(batch_size=40)) == 40  # no window: batch_size alone


def test_schema_helpers_reject_what_a_reply_cannot_hold():
    assert proposal_count(40, 4, 2) == (5, 10) and proposal_count(3, 4, 2) == (2, 2)
    assert key_index("3. Oak", 5) == 2 and key_index("9. Oak", 5) is None and key_index("Oak", 5) is None
    assert node_key(2, 'a "quoted"\\name') == "2. a quoted"
    assert node_key(3, "Caroline's adoption agency") == "3. Caroline's" and node_key(4, "Supercalifragilistic") == \
        "4. Supercalifra"
    with pytest.raises(ValueError, match="at least one node and one category"):
        placement_schema((), ("A",), 2)
    assert Placement.model_validate({"placements": {"1. x": ["A"]}}).placements == {"1. x": ["A"]}
