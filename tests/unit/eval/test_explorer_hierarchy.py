"""``report.html`` shows a group's hierarchy as a tree (layers, children, promoted nodes marked, nodes and
promoted nodes per layer) and, per question, which nodes System-2 picked and what they brought into the
context; checked in the data and in headless Chromium (skips where chromium or selenium are missing)."""

from __future__ import annotations

import json

from mnemis.eval.explorer import explorer_data, graph_snapshot, system2_brought, write_html
from mnemis.store.sqlite import GraphStore
from mnemis.types import Category, CategoryEdge, Entity
from tests.helpers.eval import browser as headless_browser
from tests.helpers.explorer_run import G, _run_dir


def _with_walk(tmp_path):
    run = _run_dir(tmp_path)
    graph = json.loads((run / "explorer_graph.json").read_text())
    graph["groups"][G]["nodes"]["cat_trips"]["promoted"] = True
    (run / "explorer_graph.json").write_text(json.dumps(graph))
    # q0's fused context: Miso and the episode came from the walk too, Pets only from it; Oslo only from System-1
    ctx = {"question_id": f"{G}:q0", "group_id": G, "text": "ctx",
           "entities": [{"id": "ent_miso", "kind": "entity", "score": 1, "scores": {"rerank": 1, "s2": 1.0}},
                        {"id": "cat_pets", "kind": "category", "score": 1, "scores": {"s2": 1.0}},
                        {"id": "ent_oslo", "kind": "entity", "score": 1, "scores": {"rrf": 0.5}}],
           "facts": [], "episodes": [{"id": "conv-1:D1:1", "kind": "episode", "score": 1, "scores": {"s2": 0.5}}]}
    (run / "contexts.jsonl").write_text(json.dumps(ctx) + "\n")
    (run / "system1.jsonl").write_text(json.dumps({"question_id": f"{G}:q0", "group_id": G,
                                                   "episodes": ["conv-1:D1:2"], "entities": ["ent_miso", "ent_oslo"],
                                                   "facts": []}) + "\n")
    return run


def test_the_data_says_what_the_walk_picked_and_brought(tmp_path):
    data = explorer_data(_with_walk(tmp_path))
    q0 = next(q for q in data["questions"] if q["id"] == f"{G}:q0")
    assert q0["system2"]["picked"] == ["cat_top", "cat_pets", "cat_trips", "ent_miso"]
    assert q0["system2"]["kept"] == {"entities": ["ent_miso", "cat_pets"], "facts": [], "episodes": ["conv-1:D1:1"]}
    assert q0["system2"]["only_s2"] == {"entities": ["cat_pets"], "facts": [], "episodes": ["conv-1:D1:1"]}
    assert system2_brought(None, None, None) is None
    fell = system2_brought({}, {}, {"rounds": [], "fallback": "prompt_too_long"})
    assert fell["fallback"] == "prompt_too_long" and fell["picked"] == []


def test_the_snapshot_marks_promoted_categories(tmp_path):
    store = GraphStore(tmp_path / "s.db")
    store.upsert_entities([Entity(group_id="g", id="e1", name="Miso"), Entity(group_id="g", id="e2", name="Oslo")])
    store.replace_hierarchy("g", [Category(group_id="g", id="c1", name="Pets", layer=1),
                                  Category(group_id="g", id="c2", name="Oslo", layer=1, promoted=True)],
                            [CategoryEdge(group_id="g", parent_id="c1", child_id="e1"),
                             CategoryEdge(group_id="g", parent_id="c2", child_id="e2")])
    nodes = graph_snapshot(store, [])["groups"]
    store.close()
    assert nodes == {}  # groups come from the questions; none asked here
    store = GraphStore(tmp_path / "s.db")
    from tests.helpers.eval import make_question

    snap = graph_snapshot(store, [make_question(0, group="g")])["groups"]["g"]
    store.close()
    assert snap["nodes"]["c2"] == {"name": "Oslo", "layer": 1, "promoted": True}
    assert snap["nodes"]["c1"] == {"name": "Pets", "layer": 1} and snap["layers"] == {"1": ["c1", "c2"]}


def test_tree_and_what_system2_brought_in_headless_chromium(tmp_path):
    page = write_html(_with_walk(tmp_path))
    browser = headless_browser()
    try:
        browser.get(page.as_uri())
        group = browser.find_element("css selector", "#hierarchy details.group")
        group.find_element("css selector", "summary").click()
        layers = [r.text for r in group.find_elements("css selector", "table.layers tr")][1:]
        assert layers == ["2 1 0", "1 2 1"]  # layer, nodes, promoted (top layer first)
        top = group.find_element("css selector", ".tree details.cat > summary")
        assert "Life" in top.text and "L2" in top.text
        top.click()
        trips = group.find_element("xpath", ".//li[contains(., 'Trips')]")
        assert trips.is_displayed() and "promoted" in trips.text and "L1" in trips.text
        browser.find_elements("css selector", "tr.q")[0].click()  # q0
        detail = browser.find_elements("css selector", "tr.detail")[0]
        picked = detail.find_element("css selector", ".picked").text
        assert "picked (4)" in picked and "Pets" in picked and "Miso" in picked
        ents = detail.find_element("css selector", ".brought.entities").text
        assert "2 kept, 1 only from System-2" in ents and "Pets L1 only System-2" in ents
        eps = detail.find_element("css selector", ".brought.episodes").text
        assert "conv-1:D1:1 only System-2 evidence" in eps
        assert [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        browser.quit()
