"""A categorize / describe reply cut at max_tokens keeps its complete items (client salvage), counted."""

from __future__ import annotations

import json

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.models.llm.scripted import Cut
from tests.helpers.hierarchy import STAGE_CATEGORIZE, STAGE_DESCRIBE, by_map, make_entities, scripted

SPEC = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Maple": ["tree"], "Guitar": ["music"], "Piano": ["music"]}
LAYER1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Maple": ["Trees"], "Guitar": ["Instruments"],
          "Piano": ["Instruments"]}


def test_cut_replies_keep_their_complete_items():
    base = by_map({1: LAYER1, 2: {"Pets": ["Life"], "Trees": ["Life"], "Instruments": ["Life"]}})

    def respond(req):
        value = base(req)
        text = json.dumps(value)
        if req.stage == STAGE_CATEGORIZE and "Instruments" in text:  # cut inside the last assignment
            return Cut(text[: text.rfind('{"category"') + 14])
        if req.stage == STAGE_DESCRIBE:
            return Cut(json.dumps({"tags": ["kept", "also kept", "lost"], "summary": "never written"})[:32])
        return value

    llm, backend = scripted(respond, max_retries=2)
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1))["g"]
    names = {c.name for c in built.categories if c.layer == 1}
    assert {"Pets", "Trees"} <= names  # the complete assignments of the cut reply
    assert built.metrics.reasked_nodes == 2  # the nodes of the lost assignment were asked again
    cat = llm.ledger.stage(STAGE_CATEGORIZE)
    assert cat.truncated >= 1 and cat.salvaged >= 1 and cat.retries == 0  # cut: salvaged, not re-asked
    # the describe reply lost its summary (required): nothing complete to keep -> a counted failure
    assert llm.ledger.stage(STAGE_DESCRIBE).failures >= 1 and llm.ledger.stage(STAGE_DESCRIBE).salvaged == 0
