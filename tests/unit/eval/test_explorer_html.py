"""``report.html``: the data read from a run dir, and the page itself in headless Chromium (no console
errors, filters change the visible rows, a System-2 tree expands). The browser test skips where Debian's
``chromium`` + ``chromium-driver`` (or selenium) are missing; CI installs them (.ci/run)."""

from __future__ import annotations

import json
from pathlib import Path

from mnemis.eval.explorer import HTML_FILE, explorer_data, render_html, write_html
from mnemis.eval.report import write_report
from tests.helpers.eval import browser as headless_browser

G = "conv-1"
NODES = {"cat_top": ("Life", 2), "cat_pets": ("Pets", 1), "cat_trips": ("Trips", 1),
         "ent_miso": ("Miso", 0), "ent_alice": ("Alice", 0), "ent_oslo": ("Oslo", 0)}
CHILDREN = {"cat_top": ["cat_pets", "cat_trips"], "cat_pets": ["ent_miso", "ent_alice"], "cat_trips": ["ent_oslo"]}
LINE1 = "[2024/05/01 (Wed) 10:00] Alice: I adopted a cat named Miso."
LINE2 = "[2024/05/02 (Thu) 09:00] Alice: Off to Oslo </script> tomorrow."
QUESTIONS = [  # id, category, question, gold, evidence, {method: (answer, correct, context ids)}
    ("q0", "single-hop", "What is the cat's name?", "Miso", [("conv-1:D1:1", LINE1)],
     {"mnemis": ("Miso", True, ["conv-1:D1:1"]), "rag": ("Miso", True, ["conv-1:D1:1"])}),
    ("q1", "temporal", "When did Alice go to Oslo?", "2 May 2024", [("conv-1:D1:2", LINE2)],
     {"mnemis": ("in June", False, ["conv-1:D1:1"]), "rag": ("2 May", True, ["conv-1:D1:2"])}),
    ("q2", "temporal", "When was Miso adopted?", "1 May 2024", [("conv-1:D1:1", LINE1)],
     {"mnemis": ("1 May 2024", True, ["conv-1:D1:1"]), "rag": ("unknown", False, ["conv-1:D1:2"])}),
]


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "progress").mkdir(parents=True)
    rows, reasons = [], {"mnemis": [], "rag": []}
    for qid, cat, question, gold, ev, methods in QUESTIONS:
        for method, (answer, ok, ctx) in methods.items():
            rows.append({"method": method, "seed": 0, "question_id": f"{G}:{qid}", "group_id": G, "category": cat,
                         "question": question, "gold": gold, "answer": answer, "labels": {"generous": ok},
                         "context_ids": ctx})
            reasons[method].append({"key": qid, "question_id": f"{G}:{qid}", "label": ok,
                                    "reasoning": f"{method} {qid}: {'matches' if ok else 'differs from'} the gold"})
    (run / "questions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for method, rs in reasons.items():
        (run / "progress" / f"judge.{method}.0.generous.jsonl").write_text("\n".join(json.dumps(r) for r in rs))
    metrics = {m: {"headline_judge": "generous", "n_questions": 3, "judges": {"generous": {"raw": {"overall": {
        "accuracy": acc, "correct": round(acc * 3), "total": 3, "ci": [0.0, 1.0]}}}}} for m, acc in
        (("mnemis", 2 / 3), ("rag", 2 / 3))}
    (run / "metrics.json").write_text(json.dumps(metrics))
    graph = {"groups": {G: {"nodes": {k: {"name": n, "layer": lay} for k, (n, lay) in NODES.items()},
                            "children": CHILDREN, "layers": {"1": ["cat_pets", "cat_trips"], "2": ["cat_top"]}}},
             "evidence": {f"{G}:{q[0]}": [{"id": i, "line": line} for i, line in q[4]] for q in QUESTIONS}}
    (run / "explorer_graph.json").write_text(json.dumps(graph))
    (run / "hierarchy_metrics.json").write_text(json.dumps({G: {"entities": 3, "layers": 2,
                                                                "nodes_per_layer": [3, 2, 1], "coverage": 1.0}}))
    rounds = [
        {"round": 0, "layer": 2, "candidates": ["cat_top"], "prompts": 1, "selected": ["cat_top"]},
        {"round": 1, "layer": 1, "candidates": ["cat_pets", "cat_trips"], "prompts": 1, "selected": ["cat_pets"],
         "flagged": ["cat_trips"]},
        {"round": 2, "layer": 0, "candidates": ["ent_miso", "ent_alice"], "prompts": 1, "selected": ["ent_miso"],
         "invented": 1},
    ]
    (run / "traversal.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "rounds": rounds, "selected_nodes": 3}) for q in QUESTIONS))
    (run / "contexts.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "text": f"## Conversation messages\n{LINE1}\n{LINE2}"})
        for q in QUESTIONS))
    (run / "system1.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "episodes": ["conv-1:D1:2", "conv-1:D1:1"], "entities": [],
         "facts": []}) for q in QUESTIONS))
    return run


def test_explorer_data_lines_up_answers_rationales_evidence_and_walks(tmp_path):
    data = explorer_data(_run_dir(tmp_path))
    assert data["methods"] == ["mnemis", "rag"] and len(data["questions"]) == 3
    q1 = next(q for q in data["questions"] if q["id"] == f"{G}:q1")
    assert q1["methods"]["mnemis"]["reached"] is False and q1["methods"]["rag"]["reached"] is True
    assert q1["methods"]["mnemis"]["rationales"] == {"generous": "mnemis q1: differs from the gold"}
    assert q1["evidence"] == [{"id": "conv-1:D1:2", "line": LINE2}]
    assert [r["round"] for r in q1["traversal"]["rounds"]] == [0, 1, 2]
    assert q1["system1"]["episodes"][0] == "conv-1:D1:2"
    assert {s["method"]: s["judge"] for s in data["summary"]} == {"mnemis": "generous", "rag": "generous"}
    assert data["groups"][G]["metrics"]["coverage"] == 1.0


def test_page_is_self_contained_and_survives_a_script_tag_in_the_data(tmp_path):
    page = render_html(explorer_data(_run_dir(tmp_path)))
    assert "http://" not in page and "https://" not in page  # no CDN, no server
    assert page.count("</script>") == 2  # the one in a turn's text is escaped inside the JSON


def test_missing_files_still_give_a_page(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "questions.jsonl").write_text(json.dumps({"method": "rag", "question_id": "g:q0", "group_id": "g",
                                                     "category": "x", "question": "?", "gold": "y"}) + "\n{cut")
    path = write_html(run)
    assert path.name == HTML_FILE and "g:q0" in path.read_text()


def test_mnemis_report_regenerates_the_page(tmp_path):
    run = _run_dir(tmp_path)
    (run / "metrics.json").unlink()  # the report computes them from questions.jsonl
    write_report(run)
    assert (run / HTML_FILE).is_file() and "report.html" in (run / "report.md").read_text()


def test_page_in_headless_chromium(tmp_path):
    from selenium.webdriver.support.ui import Select

    page = write_html(_run_dir(tmp_path))
    browser = headless_browser()
    try:
        browser.get(page.as_uri())
        rows = lambda: [r for r in browser.find_elements("css selector", "tr.q") if r.is_displayed()]
        assert len(rows()) == 3
        assert "3 of 3 questions" in browser.find_element("id", "shown").text
        Select(browser.find_element("id", "f-cat")).select_by_visible_text("temporal")
        assert len(rows()) == 2
        Select(browser.find_element("id", "f-correct")).select_by_value("wrong")
        assert [r.text.split("\n")[0] for r in rows()] == ["When did Alice go to Oslo? temporal ✗ ✓"]
        Select(browser.find_element("id", "f-method")).select_by_visible_text("rag")
        assert [r.text for r in rows()] == ["When was Miso adopted? temporal ✓ ✗"]
        Select(browser.find_element("id", "f-correct")).select_by_value("")
        Select(browser.find_element("id", "f-reached")).select_by_value("no")
        assert len(rows()) == 1  # rag missed q2's evidence
        Select(browser.find_element("id", "f-reached")).select_by_value("")
        Select(browser.find_element("id", "f-cat")).select_by_value("")
        rows()[1].click()  # q1: the drill-down opens
        detail = browser.find_elements("css selector", "tr.detail")[1]
        assert detail.is_displayed()
        text = detail.text
        assert "mnemis q1: differs from the gold" in text and "rank 1 of 2" in text
        assert detail.find_element("css selector", "mark.ev").text == LINE2
        top = detail.find_element("css selector", ".tree details.node > summary")
        assert "Life" in top.text and not detail.find_element("xpath", ".//*[text()='Pets']").is_displayed()
        top.click()  # the walk's tree expands: the selected and the shortcut categories show
        assert detail.find_element("xpath", ".//*[text()='Pets']").is_displayed()
        assert "shortcut" in detail.find_element("css selector", ".short").find_element("xpath", "..").text
        assert "1 invented id(s) dropped" in text
        hier = browser.find_element("css selector", "#hierarchy details.group > summary")
        assert "coverage 100.0%" in hier.text
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == []
    finally:
        browser.quit()
