"""Hierarchy over ~20 hand-made entities with SmolLM2-135M through vLLM on CPU.

Checks the pipeline and the stored structure (coverage 1.0, strict layers, minimum children, Speaker),
not the quality of a 135M model's categories. Metrics are printed and written to
``$MNEMIS_HIERARCHY_METRICS`` when that is set.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from mnemis.hierarchy import HierarchyConfig, organize, write_metrics
from mnemis.models.llm.base import Sampling
from mnemis.models.llm.client import LLM
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, category_id, entity_id

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

GROUP = "conv-test"
ENTITIES = {
    "Golden retriever": ["dog", "pet"],
    "Tabby cat": ["cat", "pet"],
    "Parrot": ["bird", "pet"],
    "Oak tree": ["tree", "garden"],
    "Rose bush": ["flower", "garden"],
    "Guitar": ["instrument", "music"],
    "Piano": ["instrument", "music"],
    "Jazz concert": ["music", "event"],
    "Marathon": ["running", "sport"],
    "Yoga class": ["exercise", "sport"],
    "Swimming": ["sport", "water"],
    "Paris": ["city", "travel"],
    "Tokyo": ["city", "travel"],
    "Beach trip": ["travel", "vacation"],
    "Sister": ["family member"],
    "Grandmother": ["family member"],
    "Pasta": ["food", "cooking"],
    "Birthday cake": ["food", "celebration"],
}
SPEAKERS = ["Caroline", "Melanie"]


@pytest.fixture(scope="module")
def backend(vllm_backend):
    """The session's shared SmolLM2 engine (tests/integration/conftest.py)."""
    return vllm_backend


def _entities() -> list[Entity]:
    ents = [
        Entity(group_id=GROUP, id=entity_id(GROUP, n), name=n, tags=t, summary=f"{n} came up in the chat.")
        for n, t in ENTITIES.items()
    ]
    ents += [
        Entity(group_id=GROUP, id=entity_id(GROUP, n), name=n, tags=["speaker"], is_speaker=True)
        for n in SPEAKERS
    ]
    return ents


def test_hierarchy_with_smollm2_on_vllm_cpu(backend, tmp_path):
    store = GraphStore(tmp_path / "memory.sqlite")
    store.upsert_entities(_entities())
    # the 135M model pads replies to max_tokens: keep the small budgets (shrunk schemas), as the
    # quickstart does
    llm = LLM(backend, max_retries=1, reply_budget="fit")
    cfg = HierarchyConfig(
        max_layers=3,
        categorize_sampling=Sampling(max_tokens=384),
        describe_sampling=Sampling(max_tokens=128),
    )
    t0 = time.perf_counter()
    metrics = organize(store, llm, [GROUP], cfg)
    wall = time.perf_counter() - t0
    m = metrics[GROUP]
    print(json.dumps({"wall_s": round(wall, 1), **m.model_dump()}, indent=1))
    if os.environ.get("MNEMIS_HIERARCHY_METRICS"):
        write_metrics(os.environ["MNEMIS_HIERARCHY_METRICS"], metrics)

    assert m.coverage == 1.0 and m.entities == len(ENTITIES) + len(SPEAKERS)
    cats = store.categories(GROUP)
    edges = store.category_edges(GROUP)
    for c in cats:
        print(c.layer, repr(c.name), sum(e.parent_id == c.id for e in edges), c.tags, "promoted" * c.promoted)
    assert (
        cats
        and 1 <= m.layers <= 3
        and m.nodes_per_layer[1:] == [len(store.categories(GROUP, layer=i)) for i in range(1, m.layers + 1)]
    )
    layer = {c.id: c.layer for c in cats}
    ents = {e.id for e in store.entities(GROUP)}
    kids: dict[str, int] = {}
    for e in edges:
        kids[e.parent_id] = kids.get(e.parent_id, 0) + 1
        assert (
            (e.child_id in ents)
            if layer[e.parent_id] == 1
            else (layer.get(e.child_id) == layer[e.parent_id] - 1)
        )
    for c in cats:
        assert kids.get(c.id, 0) >= (1 if c.promoted or c.name == "Speaker" else cfg.min_children)
        assert len(c.tags) <= 5 and all(len(t.split()) <= 3 for t in c.tags)
        assert " and " not in f" {c.name.lower()} " or c.promoted
    speaker = category_id(GROUP, 1, "Speaker")
    assert {e.child_id for e in edges if e.parent_id == speaker} >= {entity_id(GROUP, n) for n in SPEAKERS}
    assert m.llm_calls >= 1 and wall < 180
