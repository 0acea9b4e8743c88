"""experiments/bench/graphiti_builder.py: the cost of a base-graph build per episode, from graphiti-core's counted
requests or from our ledger, and the graph's shape per episode from the store."""

from __future__ import annotations

from datetime import datetime

from mnemis.store import GraphStore
from mnemis.types import Entity, Episode, Fact, Mention
from tests.helpers.bench import load_bench

bench = load_bench("graphiti_builder")


def test_graphiti_cost_comes_from_its_counted_requests():
    totals = {"graphiti.llm_calls": 12, "graphiti.prompt_tokens": 30000, "graphiti.completion_tokens": 900,
              "graphiti.cut_replies": 4, "graphiti.failed_steps": 1, "graphiti.failed.ValidationError": 1,
              "graphiti.failed_requests": 2}
    cost = bench.builder_cost({}, totals, 3)
    assert cost["llm_calls_per_episode"] == 4.0 and cost["prompt_tokens_per_episode"] == 10000.0
    assert cost["completion_tokens_per_episode"] == 300.0 and cost["cut_replies"] == 4
    assert cost["failed_add_episode"] == 1 and cost["failures_by_type"] == {"ValidationError": 1}
    assert cost["failed_requests"] == 2 and "graphiti-core" in cost["source"]


def test_our_cost_comes_from_the_ledger_ingest_stages_only():
    stages = {"extract_entities": {"calls": 3, "prompt_tokens": 900, "completion_tokens": 60, "truncated": 1,
                                   "failures": 0},
              "dedup_facts": {"calls": 3, "prompt_tokens": 300, "completion_tokens": 30, "truncated": None,
                              "failures": 2},
              "answer": {"calls": 50, "prompt_tokens": 99999, "completion_tokens": 999}}  # not the base graph
    cost = bench.builder_cost({"stages": stages}, {}, 3)
    assert cost["llm_calls"] == 6 and cost["prompt_tokens_per_episode"] == 400.0
    assert cost["completion_tokens_per_episode"] == 30.0 and cost["cut_replies"] == 1 and cost["failed_replies"] == 2


def test_graph_shape_counts_per_episode(tmp_path):
    t = datetime(2024, 1, 1)
    with GraphStore(tmp_path / "m.db") as s:
        s.upsert_episodes([Episode(group_id="g", id=f"g:{i}", source_id=str(i), name="m", speaker="A", content="A: x",
                                   valid_at=t, session=1, turn=i, position=i) for i in range(2)])
        s.upsert_entities([Entity(group_id="g", id="e1", name="A"), Entity(group_id="g", id="e2", name="B")])
        s.upsert_facts([Fact(group_id="g", id="f", source_id="e1", target_id="e2", relation="R", fact="A knows B")])
        s.add_mentions([Mention(group_id="g", episode_id="g:0", entity_id="e1"),
                        Mention(group_id="g", episode_id="g:1", entity_id="e2"),
                        Mention(group_id="g", episode_id="g:1", entity_id="e1")])
        s.set_meta("built:base_graph", {"seconds": 12.34})
    shape = bench.graph_shape(tmp_path / "m.db")
    assert (shape["entities_per_episode"], shape["facts_per_episode"], shape["mentions_per_episode"]) == (1.0, 0.5, 1.5)
    assert shape["base_graph_wall_s"] == 12.3 and shape["graphiti"] is None


def test_a_build_stopped_midway_is_read_from_its_stores_counters(tmp_path):
    store = tmp_path / "m.sqlite"
    with GraphStore(store) as s:
        s.set_meta("ingest.stats", {"graphiti.episodes_added": 2, "graphiti.llm_calls": 23,
                                    "graphiti.prompt_tokens": 12199, "graphiti.completion_tokens": 1117,
                                    "graphiti.wall_ms": 596535})
    out = bench.stopped_build(store)
    assert out["status"] == "stopped in the base-graph build" and out["episodes_added"] == 2
    cost = out["cost"]
    assert cost["llm_calls_per_episode"] == 11.5 and cost["prompt_tokens_per_episode"] == 6099.5
    assert cost["completion_tokens_per_episode"] == 558.5 and cost["wall_s_per_episode"] == 298.3
    assert cost["failed_add_episode"] == 0
    with GraphStore(tmp_path / "empty.sqlite") as s:
        pass
    assert bench.stopped_build(tmp_path / "empty.sqlite")["cost"]["prompt_tokens_per_episode"] is None
