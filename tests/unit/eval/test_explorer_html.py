"""``report.html``: the data read from a run dir, and the page itself in headless Chromium (no console
errors, filters change the visible rows, a System-2 tree expands). The browser test skips where Debian's
``chromium`` + ``chromium-driver`` (or selenium) are missing; CI installs them (.ci/run)."""

from __future__ import annotations

import json

from mnemis.eval.explorer import explorer_data, render_html, write_html
from mnemis.eval.run_dir import HTML_FILE
from mnemis.eval.report import write_report
from tests.helpers.eval import browser as headless_browser
from tests.helpers.explorer_run import G, LINE2, _run_dir

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
