"""Two-step categorisation with the placement made by the embedder (``assign_by: embedding``): the LLM proposes
and describes, each node goes to the proposed name nearest to it (plus names within the margin, up to
``max_parents``), nodes of dissolved categories are re-placed into the survivors, and the LLM is never asked to
place anything."""

from __future__ import annotations

import numpy as np
import pytest

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.hierarchy.embed_assign import choose, node_text
from mnemis.hierarchy.state import LayerNode
from mnemis.hierarchy.two_step import STAGE_ASSIGN, STAGE_PROPOSE, STAGE_REASSIGN
from tests.helpers.hierarchy import (
    STAGE_DESCRIBE,
    TWO_STEP_SPEC,
    described,
    listed_nodes,
    make_entities,
    scripted,
    stage_calls,
)

# a toy embedding space: one axis per topic; a text points along the topics whose words it contains
TOPICS = {"pet": ("dog", "cat", "pet", "animal", "living"), "tree": ("oak", "maple", "tree", "living"),
          "music": ("guitar", "piano", "violin", "music", "instrument", "leisure"),
          "speaker": ("alice", "speaker", "leisure")}


class TopicEmbedder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def encode(self, texts, *, kind="document"):
        self.calls.append((kind, len(texts)))
        out = np.zeros((len(texts), len(TOPICS) + 1), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.lower()
            for j, vocab in enumerate(TOPICS.values()):
                out[i, j] = sum(w in words for w in vocab)
            out[i, -1] = 0.1  # nothing in common: still a direction
        return out


PROPOSALS = {1: ["Animals", "Trees", "Music", "Stamps"], 2: ["Living Things", "Leisure"]}


def respond(req):
    if req.stage == STAGE_DESCRIBE:
        name, _ = described(req)
        return {"tags": [name.lower()], "summary": f"About {name}."}
    if req.stage == STAGE_PROPOSE:
        layer = 1 if "Dog" in listed_nodes(req) or "Guitar" in listed_nodes(req) else 2
        return {"categories": PROPOSALS[layer]}
    raise AssertionError(f"the LLM was asked to place nodes ({req.stage})")


CFG = {"categorizer": "two_step", "assign_by": "embedding", "top_width": 2, "min_children": 2}


def test_nodes_go_to_the_nearest_proposed_name_and_the_llm_never_places():
    llm, backend = scripted(respond)
    emb = TopicEmbedder()
    built = build_hierarchies({"g": make_entities("g", TWO_STEP_SPEC, speakers=["Alice"])}, llm, HierarchyConfig(**CFG),
                              embedder=emb)["g"]
    by_layer: dict[int, dict[str, set[str]]] = {}
    names = {c.id: c.name for c in built.categories}
    names |= {e.id: e.name for e in make_entities("g", TWO_STEP_SPEC, speakers=["Alice"])}
    for c in built.categories:
        kids = {names[e.child_id] for e in built.edges if e.parent_id == c.id}
        by_layer.setdefault(c.layer, {})[c.name] = kids
    assert by_layer[1]["Animals"] == {"Dog", "Cat"} and by_layer[1]["Trees"] == {"Oak", "Maple"}
    assert by_layer[1]["Music"] == {"Guitar", "Piano", "Violin"}
    assert "Stamps" not in by_layer[1]  # nothing near it: never made
    assert set(by_layer[2]) == {"Living Things", "Leisure"}
    assert built.metrics.promoted == 0 and built.metrics.coverage == 1.0
    assert STAGE_ASSIGN not in stage_calls(backend) and STAGE_REASSIGN not in stage_calls(backend)
    assert ("query", 4) in emb.calls  # the layer's four proposed names, embedded in one call


def test_a_node_of_a_dissolved_category_is_replaced_into_a_survivor():
    spec = {**TWO_STEP_SPEC, "Fern": ["plant"]}  # alone near "Ferns", a category of one
    proposals = {1: ["Animals", "Trees", "Music", "Ferns"], 2: ["Living Things", "Leisure"]}

    def respond2(req):
        if req.stage == STAGE_PROPOSE:
            layer = 1 if "Dog" in listed_nodes(req) else 2
            return {"categories": proposals[layer]}
        return respond(req)

    llm, _ = scripted(respond2)
    built = build_hierarchies({"g": make_entities("g", spec, speakers=["Alice"])}, llm, HierarchyConfig(**CFG),
                              embedder=TopicEmbedder())["g"]
    layer1 = {c.name for c in built.categories if c.layer == 1}
    assert "Ferns" not in layer1  # one child only: dissolved ...
    assert built.metrics.reasked_nodes >= 1 and built.metrics.coverage == 1.0  # ... and Fern re-placed
    assert built.metrics.promoted == 0


def test_choose_keeps_names_within_the_margin_up_to_max_parents():
    sims = np.array([[0.9, 0.88, 0.5, 0.87], [0.2, 0.7, 0.7, 0.1]])
    assert choose(sims, 0.05, 2) == [[0, 1], [1, 2]]
    assert choose(sims, 0.05, 3) == [[0, 1, 3], [1, 2]]
    assert choose(sims, 0.0, 2) == [[0], [1, 2]]  # an exact tie is kept; the earlier column first


def test_node_text_reads_name_tags_and_a_cut_summary():
    node = LayerNode("e1", "Guitar", ("music", "instrument"), "A red   acoustic guitar " * 20)
    text = node_text(node, 30)
    assert text.startswith("Guitar [music, instrument]: A red acoustic guitar") and len(text) < 70
    assert node_text(LayerNode("e2", "Oak"), 30) == "Oak"


def test_embedding_placement_without_an_embedder_is_refused():
    llm, _ = scripted(respond)
    with pytest.raises(ValueError, match="assign_by=embedding"):
        build_hierarchies({"g": make_entities("g", TWO_STEP_SPEC)}, llm, HierarchyConfig(**CFG))
