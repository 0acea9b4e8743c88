"""The explorer and ``mnemis report`` are safe with any run directory: the embedded JSON escapes every character
that could end or comment out the data script, every value put into the page is escaped (numbers included), a
record holding markup where a number belongs is left out and named (escaped) at the top of the page, and the
report opens the store a run dir names read-only, refusing a file that is not a store unchanged."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.eval.explorer import render_html, write_html
from mnemis.store import GraphStore, StoreError
from mnemis.types import Question
from tests.helpers.eval import browser as headless_browser
from tests.helpers.eval import make_question, scripted_llm, verdict

REPO = Path(__file__).resolve().parents[3]
G = "conv-1"
EVIL = '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">'
QUESTION = "What did Alice say <!--<script> about </script> Miso & co\u2028?"


def _hostile_run(tmp_path: Path) -> Path:
    """A tampered run dir: the question opens an HTML comment and a script, number fields hold markup."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"method": "mnemis", "seed": 0, "question_id": f"{G}:q{i}", "group_id": G, "category": EVIL,
             "question": QUESTION if i == 0 else f"Question {i}?", "gold": EVIL, "answer": EVIL,
             "labels": {"generous": i == 0}, "context_ids": [f"{G}:D1:1"]} for i in range(2)]
    (run / "questions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    overall = {"accuracy": EVIL, "total": EVIL, "ci": EVIL}
    (run / "metrics.json").write_text(json.dumps({"mnemis": {"headline_judge": "generous", "judges": {
        "generous": {"raw": {"overall": overall}}}, "answer_scores": {"overall": {"f1": EVIL}}}}))
    (run / "recall.json").write_text(json.dumps({"mnemis/fused": {"overall": {"direct": EVIL}}}))
    rounds = [{"round": 0, "layer": 1, "prompts": 1, "candidates": ["cat_top"], "selected": ["cat_top"],
               "invented": EVIL},
              {"round": 1, "layer": 0, "prompts": 1, "candidates": ["ent_miso"], "selected": ["ent_miso"],
               "invented": 2}]
    (run / "traversal.jsonl").write_text(json.dumps({"question_id": f"{G}:q0", "group_id": G, "rounds": rounds,
                                                     "selected_nodes": EVIL, "fallback": EVIL}) + "\n")
    (run / "system1.jsonl").write_text(json.dumps({"question_id": f"{G}:q0", "episodes": EVIL}) + "\n")
    (run / "contexts.jsonl").write_text(json.dumps({"question_id": f"{G}:q0", "text": f"line {EVIL}"}) + "\n")
    graph = {"groups": {G: {"nodes": {"cat_top": {"name": EVIL, "layer": 1}, "ent_miso": {"name": "Miso", "layer": 0}},
                            "children": {"cat_top": ["ent_miso"]}, "layers": {"1": ["cat_top"]}}},
             "evidence": {f"{G}:q0": [{"id": f"{G}:D1:1", "line": EVIL}]}}
    (run / "explorer_graph.json").write_text(json.dumps(graph))
    (run / "hierarchy_metrics.json").write_text(json.dumps({G: {"entities": EVIL, "layers": EVIL, "coverage": EVIL,
                                                                "nodes_per_layer": EVIL}}))
    return run


def test_the_embedded_json_has_no_markup_characters_and_reads_back_the_same():
    data = {"questions": [{"question": QUESTION, "n": EVIL}], "run": "r"}
    page = render_html(data)
    payload = page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    assert not re.search("[<>&\u2028\u2029]", payload)
    assert "\\u003c!--\\u003cscript\\u003e" in payload and "\\u2028" in payload
    assert json.loads(payload) == data
    assert page.count("<script") == 2 and page.count("</script>") == 2


def test_a_tampered_run_dir_renders_and_runs_no_script_in_headless_chromium(tmp_path):
    page = write_html(_hostile_run(tmp_path))
    browser = headless_browser()
    try:
        browser.get(page.as_uri())
        rows = browser.find_elements("css selector", "tr.q")
        assert len(rows) == 2 and "<!--<script> about </script> Miso & co" in rows[0].text  # shown as text
        assert "2 of 2 questions" in browser.find_element("id", "shown").text
        assert EVIL in browser.find_element("id", "summary").text  # the "number" shown as text
        rows[0].click()  # the drill-down: evidence, context (the damaged walk and ranks are left out)
        detail = browser.find_elements("css selector", "tr.detail")[0]
        assert detail.is_displayed() and EVIL in detail.text
        problems = browser.find_element("id", "problems").text  # damaged records named, their values as text
        for where in ("traversal.jsonl: line 1: field rounds.0.invented", "system1.jsonl: line 1: field episodes",
                      "recall.json: field mnemis/fused.overall.direct", "hierarchy_metrics.json: group 'conv-1'"):
            assert where in problems, (where, problems)
        assert EVIL[:20] in problems
        hier = browser.find_element("css selector", "#hierarchy details.group > summary")
        assert "? entities" in hier.text
        assert browser.execute_script("return window.__pwned") is None
        assert browser.find_elements("css selector", "img") == []
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == []
    finally:
        browser.quit()


def _report(tmp_path: Path, run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mnemis.app.cli", "report", f"run_dir={run}",
                           f"hydra.run.dir={tmp_path}/hydra"], check=False, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def _run_naming(tmp_path: Path, store: object) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "questions.jsonl").write_text(json.dumps({"method": "rag", "question_id": "g:q0", "group_id": "g",
                                                     "category": "x", "question": "?", "gold": "y"}) + "\n")
    (run / "build_summary.json").write_text(json.dumps({"store": store}))
    return run


def test_report_refuses_a_run_dir_whose_store_is_not_a_store_and_leaves_it_unchanged(tmp_path):
    foreign = tmp_path / "thesis.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('chapter 1')")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    res = _report(tmp_path, _run_naming(tmp_path, str(foreign)))
    assert res.returncode != 0 and "mnemis report:" in res.stderr and str(foreign) in res.stderr, res.stderr
    assert "not a mnemis store" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert foreign.read_bytes() == before and not Path(f"{foreign}-wal").exists()  # no schema, no WAL


def test_report_reads_a_real_store_without_writing_to_it(tmp_path):
    from mnemis.eval.explorer import snapshot_from_build

    path = tmp_path / "memory.sqlite"
    with GraphStore(path) as store:
        store.upsert_questions([Question(group_id="g", id="g:q0", question="?", answer="y", category="x")])
    before = path.read_bytes()
    run = _run_naming(tmp_path, str(path))
    assert snapshot_from_build(run) == run / "explorer_graph.json"
    assert path.read_bytes() == before
    (run / "explorer_graph.json").unlink()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    _run_naming(tmp_path, str(empty))
    with pytest.raises(StoreError, match=r"build_summary.json names the store .*empty.db: store .* is empty"):
        snapshot_from_build(run)
    assert empty.read_bytes() == b""  # no schema written into whatever file is there
    for store in (str(tmp_path / "nope.db"), 42):
        _run_naming(tmp_path, store)
        assert snapshot_from_build(run) is None and not (tmp_path / "nope.db").exists()


def test_a_judge_name_is_a_file_name_only_after_cleaning_and_the_explorer_still_finds_its_rationales(tmp_path):
    """Judge names come from the config (often model names: ``Qwen/Qwen2.5-7B``); their progress files stay
    inside the run's progress folder and the page shows their rationales."""
    from mnemis.eval.explorer import explorer_data
    from mnemis.eval.judge import judge_answers

    run = tmp_path / "run"
    progress = run / "progress" / "judge.mnemis.0.jsonl"
    progress.parent.mkdir(parents=True)
    names = ["Qwen/Qwen2.5-7B", "../../escape", "plain"]
    judges = {n: scripted_llm(lambda r: verdict("CORRECT"))[0] for n in names}
    q = make_question(0)
    labels = judge_answers(judges, [q], ["Paris"], progress=progress)
    assert all(labels[n] == [True] for n in names)
    files = sorted(p.name for p in progress.parent.iterdir())
    assert len(files) == 3 and "judge.mnemis.0.plain.jsonl" in files and not (tmp_path / "escape.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    (run / "questions.jsonl").write_text(json.dumps({"method": "mnemis", "question_id": q.id, "group_id": q.group_id,
                                                     "category": q.category, "question": q.question,
                                                     "gold": q.answer, "labels": {n: True for n in names}}))
    why = explorer_data(run)["questions"][0]["methods"]["mnemis"]["rationales"]
    assert why == {n: "compared with the gold answer" for n in names}
