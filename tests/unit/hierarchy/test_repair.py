"""Bad replies and failed items: repaired or skipped, counted, and coverage stays 1.0."""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.models.llm.scripted import Refused
from mnemis.types import Category
from tests.helpers.hierarchy import (
    STAGE_CATEGORIZE,
    STAGE_DESCRIBE,
    STAGE_REASK,
    make_entities,
    prompt_nodes,
    scripted,
)

SPEC = {f"Node {i}": [f"tag {i % 3}"] for i in range(8)}


def _check_invariants(built, n: int) -> None:
    """Coverage 1.0, strict layers, the minimum-children rule and unique ids, whatever the model said."""
    m = built.metrics
    assert m.coverage == 1.0
    layer = {c.id: c.layer for c in built.categories}
    assert len(layer) == len(built.categories)
    kids: dict[str, int] = {}
    for e in built.edges:
        kids[e.parent_id] = kids.get(e.parent_id, 0) + 1
        if layer[e.parent_id] > 1:
            assert layer[e.child_id] == layer[e.parent_id] - 1
    for c in built.categories:
        assert kids.get(c.id, 0) >= (1 if c.promoted or c.name == "Speaker" else n), c
        assert len(c.tags) <= 5 and all(len(t.split()) <= 3 for t in c.tags)
    assert all(b < a for a, b in zip(m.nodes_per_layer[1:], m.nodes_per_layer[2:], strict=False))
    json.dumps(m.model_dump())


def test_bad_indexes_names_and_empty_replies_are_counted():
    def respond(req):
        if req.stage == STAGE_DESCRIBE:
            return {"tags": ["a tag that is far too long", "ok"] * 4, "summary": "  spaced   out  "}
        if req.stage == STAGE_REASK:
            return {
                "assignments": [{"category": "Rest", "indexes": list(range(1, len(prompt_nodes(req)) + 1))}]
            }
        return {
            "assignments": [
                {"category": "Evens", "indexes": [1, 3, 3, 5, 99, -1]},
                {"category": "", "indexes": [2]},
                {"category": "Odds and Ends", "indexes": [2, 4]},
                {"category": "Nothing", "indexes": [100]},
            ]
        }

    llm, _ = scripted(respond)
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, HierarchyConfig(max_layers=1))["g"]
    m = built.metrics
    assert m.repairs["out_of_range"] == 3 and m.repairs["duplicate_indexes"] == 1
    assert m.repairs["empty_names"] == 1 and m.repairs["empty_assignments"] == 1
    assert m.rejected_names == ["Odds and Ends"] and m.reasked_nodes == 5
    evens = next(c for c in built.categories if c.name == "Evens")
    assert evens.tags == ["a tag that", "ok"] and evens.summary == "spaced out"
    _check_invariants(built, 2)


def test_failed_items_do_not_crash_and_nodes_are_reasked():
    def respond(req):
        if req.stage == STAGE_CATEGORIZE and "Node 0" in prompt_nodes(req):
            return Refused("prompt longer than the context")  # the backend refuses this item
        if req.stage == STAGE_DESCRIBE:
            return "not json at all"  # validation failure
        names = prompt_nodes(req)
        return {"assignments": [{"category": "All", "indexes": list(range(1, len(names) + 1))}]}

    llm, backend = scripted(respond)
    groups = {"g": make_entities("g", SPEC), "h": make_entities("h", SPEC)}
    built = build_hierarchies(groups, llm, HierarchyConfig(batch_size=4, max_layers=1))
    for g in ("g", "h"):
        m = built[g].metrics
        # first batch (holds Node 0) failed; its 4 nodes were re-asked and joined "All"; describe failed
        assert m.llm_failures == 2 and m.reasked_nodes == 4 and m.llm_calls == 4
        (cat,) = built[g].categories
        assert cat.name == "All" and cat.summary.startswith("All: Node 4, Node 5") and cat.tags
        _check_invariants(built[g], 2)
    assert len(backend.batches) == 3


def test_everything_failing_still_gives_full_coverage():
    llm, backend = scripted(lambda req: "down", max_retries=1)
    built = build_hierarchies({"g": make_entities("g", SPEC, speakers=["me"])}, llm)["g"]
    m = built.metrics
    # layer 1: Speaker + 8 promoted nodes; layer 2 promotes all 9 again, does not shrink, is discarded
    assert m.layers == 1 and m.promoted == 8 and m.stop_reason == "no_shrink" and m.discarded_layer_size == 9
    assert m.llm_failures == 4 and len(backend.batches) == 8  # 2 steps x 2 layers, each tried twice
    _check_invariants(built, 2)
    assert all(isinstance(c, Category) for c in built.categories)


def _random_responder(seed: int):
    rng = random.Random(seed)
    names = ["Alpha", "Beta", "Gamma", "Delta", "Food and Drink", "", "Epsilon", "Zeta"]

    def respond(req):
        if req.stage == STAGE_DESCRIBE:
            return rng.choice([{"tags": ["x y z w", "q"], "summary": "s"}, "garbage", Refused("x")])
        n = len(prompt_nodes(req))
        mode = rng.random()
        if mode < 0.1:
            return Refused("refused")
        if mode < 0.2:
            return "{not json"
        out = []
        for _ in range(rng.randint(0, 5)):
            idx = [rng.randint(-1, n + 2) for _ in range(rng.randint(0, n + 1))]
            out.append({"category": rng.choice(names), "indexes": idx})
        return rng.choice([{"assignments": out}, out])

    return respond


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    n_entities=st.integers(0, 14),
    n=st.integers(1, 3),
    batch=st.integers(2, 6),
    speakers=st.integers(0, 2),
)
def test_random_replies_never_break_the_invariants(seed, n_entities, n, batch, speakers):
    spec = {f"E{i}": [f"t{i % 4}"] for i in range(n_entities)}
    ents = make_entities("g", spec, speakers=[f"S{i}" for i in range(speakers)])
    llm, _ = scripted(_random_responder(seed))
    cfg = HierarchyConfig(min_children=n, batch_size=batch, max_layers=4)
    built = build_hierarchies({"g": ents, "other": make_entities("other", spec)}, llm, cfg)
    for b in built.values():
        _check_invariants(b, n)
