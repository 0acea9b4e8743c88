"""organize(): entities from the store in, categories + edges + embeddings stored, metrics out."""

from __future__ import annotations

import json

import numpy as np

from mnemis.hierarchy import HierarchyConfig, compute_metrics, organize, write_metrics
from mnemis.models.embed import HashingEmbedder
from mnemis.store.sqlite import GraphStore
from mnemis.types import category_id, entity_id
from tests.helpers.hierarchy import by_map, make_entities, scripted

SPEC = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Maple": ["tree"]}
LAYER1 = {"Dog": ["Pets", "Animals"], "Cat": ["Pets", "Animals"], "Oak": ["Trees"], "Maple": ["Trees"]}
LAYER2 = {"Pets": ["Nature"], "Animals": ["Nature"], "Trees": ["Nature"], "Speaker": ["People"]}


def test_organize_stores_structure_embeddings_and_metrics(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    store.upsert_entities(make_entities("g1", SPEC, speakers=["Ann"]))
    store.upsert_entities(make_entities("g2", SPEC))
    llm, backend = scripted(by_map({1: LAYER1, 2: LAYER2}))
    metrics = organize(
        store, llm, ["g1", "g2"], HierarchyConfig(max_layers=2), embedder=HashingEmbedder(dim=32)
    )

    assert set(metrics) == {"g1", "g2"} and all(m.coverage == 1.0 for m in metrics.values())
    assert [c.name for c in store.categories("g2", layer=1)] == ["Pets", "Animals", "Trees"]
    assert [c.name for c in store.categories("g2", layer=2)] == ["Nature"]
    assert [c.name for c in store.categories("g1", layer=2)] == ["Nature", "Speaker"]  # promoted
    assert next(c for c in store.categories("g1", layer=2) if c.name == "Speaker").promoted
    edges = {(e.parent_id, e.child_id) for e in store.category_edges("g1")}
    assert (category_id("g1", 1, "Speaker"), entity_id("g1", "Ann")) in edges
    assert (category_id("g1", 1, "Pets"), entity_id("g1", "Dog")) in edges
    assert (category_id("g1", 1, "Animals"), entity_id("g1", "Dog")) in edges
    assert (category_id("g1", 2, "Nature"), category_id("g1", 1, "Pets")) in edges
    ids, vecs = store.embeddings("g1", "category")
    assert sorted(ids) == sorted(c.id for c in store.categories("g1")) and vecs.shape == (len(ids), 32)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # the stored rows give the same metrics as the build's own
    stored = compute_metrics("g1", store.entities("g1"), store.categories("g1"), store.category_edges("g1"))
    assert stored.nodes_per_layer == metrics["g1"].nodes_per_layer == [5, 4, 2]
    assert stored.coverage == 1.0 and stored.multi_parent_rate == metrics["g1"].multi_parent_rate

    # one generate() per step holding both groups: layer 1 categorize + describe, layer 2 categorize +
    # re-ask (g1's lone "Speaker") + describe
    assert [len(b) for b in backend.batches] == [2, 6, 2, 1, 2]
    assert metrics["g1"].multi_parent_rate == round(2 / 9, 6) and metrics["g1"].promoted == 1
    path = write_metrics(tmp_path / "out" / "hierarchy_metrics.json", metrics)
    assert json.loads(path.read_text())["g1"]["coverage"] == 1.0

    # a rebuild replaces (never appends to) the old hierarchy
    n_cats, n_edges = len(store.categories("g1")), len(store.category_edges("g1"))
    llm2, _ = scripted(by_map({1: LAYER1, 2: LAYER2}))
    organize(store, llm2, ["g1"], {"max_layers": 1})
    assert len(store.categories("g1")) == 4 < n_cats and len(store.category_edges("g1")) < n_edges
    assert store.embeddings("g1", "category")[0] == []
    assert len(store.categories("g2")) == 4  # other group untouched
    store.close()


def test_metrics_of_a_hand_made_hierarchy():
    from mnemis.types import Category, CategoryEdge

    ents = make_entities("g", {"a": [], "b": [], "c": []})
    cats = [
        Category(group_id="g", id="c1", name="X", layer=1),
        Category(group_id="g", id="c2", name="Y", layer=1),
        Category(group_id="g", id="t", name="T", layer=2, promoted=True),
    ]
    edges = [
        CategoryEdge(group_id="g", parent_id=p, child_id=c)
        for p, c in [("c1", ents[0].id), ("c1", ents[1].id), ("c2", ents[1].id), ("t", "c1")]
    ]
    m = compute_metrics("g", ents, cats, edges, dissolved=1)
    # c (unreachable) and c2 (not under the top) are missed: coverage 2/3
    assert m.coverage == round(2 / 3, 6) and m.layers == 2 and m.nodes_per_layer == [3, 2, 1]
    assert m.compression_per_layer == [1.5, 2.0] and m.mean_children_per_layer == [1.5, 1.0]
    assert m.multi_parent_rate == round(1 / 5, 6) and m.promoted == 1 and m.dissolved == 1
