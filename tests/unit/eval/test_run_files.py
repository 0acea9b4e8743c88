"""Every reader of a run directory checks what it reads and names the file, the record (line) and the field of a
damaged value (mnemis.eval.run_files); the explorer still renders what is valid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.eval.explorer import explorer_data
from mnemis.eval.graded_report import _leniency_lines
from mnemis.eval.records import read_records
from mnemis.eval.report import write_report
from mnemis.eval.run_files import RunFileError, read_jsonl
from mnemis.eval.run_dir import read_checked
from mnemis.eval.run_health import run_health
from mnemis.eval.tracking import JsonlTracker
from mnemis.retrieve.system2_records import Traversal

REPO = Path(__file__).resolve().parents[3]


def _question(i: int, **kw) -> dict:
    return {"method": "mnemis", "question_id": f"g:q{i}", "group_id": "g", "category": "single-hop",
            "question": f"Where did person {i} go?", "gold": "Paris", "answer": "Paris", "labels": {"j": True}, **kw}


def _round(invented) -> dict:
    return {"round": 0, "layer": 1, "candidates": ["c1"], "prompts": 1, "selected": ["c1"], "invented": invented}


def _run(tmp_path: Path) -> Path:
    """A small valid run dir: two questions, their walks, recall, ledger, leniency, roles, hierarchy."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "questions.jsonl").write_text("".join(json.dumps(_question(i)) + "\n" for i in range(2)))
    (run / "traversal.jsonl").write_text("".join(json.dumps({"question_id": f"g:q{i}", "group_id": "g",
                                                             "rounds": [_round(i)]}) + "\n" for i in range(2)))
    (run / "recall.json").write_text(json.dumps({"mnemis/system1": {"overall": {"direct": 0.5, "n": 2}}}))
    (run / "ledger.json").write_text(json.dumps({"stages": {"answer": {"calls": 2, "prompt_tokens": 10}},
                                                 "total": {"calls": 2}}))
    (run / "leniency.json").write_text(json.dumps({"judges": {"j": {"wrong_specific": {"rate": 0.1, "judged": 10}}},
                                                   "criteria": {"j": "generous"}}))
    (run / "roles.json").write_text(json.dumps({"roles": {"answer": "m"}, "judges": [
        {"name": "j", "criterion": "generous", "model": "m", "slot": "judge_llms.j"}]}))
    (run / "hierarchy_metrics.json").write_text(json.dumps({"g": {"entities": 3, "layers": 1,
                                                                  "nodes_per_layer": [3, 1], "coverage": 1.0}}))
    return run


def _damage(path: Path, line: int, change: dict) -> None:
    rows = path.read_text().splitlines()
    rows[line - 1] = json.dumps({**json.loads(rows[line - 1]), **change})
    path.write_text("\n".join(rows) + "\n")


def test_a_valid_run_dir_reads_through_every_reader(tmp_path):
    run = _run(tmp_path)
    health = run_health(run)
    assert health["system2"]["invented_selections"] == 1 and health["recall"] == {"mnemis/system1": 0.5}
    assert write_report(run).is_file() and explorer_data(run)["problems"] == []


def test_run_health_names_the_record_and_field_of_a_non_number(tmp_path):
    """The reported failure: ``invented`` holding text stopped ``mnemis report`` with a TypeError in the sum."""
    run = _run(tmp_path)
    _damage(run / "traversal.jsonl", 2, {"rounds": [_round("three")]})
    with pytest.raises(RunFileError, match=r"traversal\.jsonl: line 2: field rounds\.0\.invented: .*integer"):
        run_health(run)


@pytest.mark.parametrize("name, content, named", [
    ("recall.json", {"mnemis/system1": {"overall": {"direct": "high"}}}, r"recall\.json: field mnemis/system1"
                                                                         r"\.overall\.direct: expected a number"),
    ("leniency.json", {"judges": {"j": {"wrong_vague": {"rate": "lots"}}}},
     r"leniency\.json: field judges\.j\.wrong_vague\.rate"),
    ("hierarchy_metrics.json", {"g": {"entities": "three"}}, r"hierarchy_metrics\.json: group 'g': field entities"),
    ("build_summary.json", {"ingest_totals": {"extracted.facts": "many"}},
     r"build_summary\.json: field ingest_totals\.extracted\.facts"),
    ("config.json", "{not json", r"config\.json: not readable as JSON"),
])
def test_run_health_names_each_damaged_file(tmp_path, name, content, named):
    run = _run(tmp_path)
    (run / name).write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(RunFileError, match=named):
        run_health(run)


def test_read_records_names_line_and_field(tmp_path):
    run = _run(tmp_path)
    _damage(run / "questions.jsonl", 2, {"labels": {"j": "maybe"}})
    with pytest.raises(RunFileError, match=r"questions\.jsonl: line 2: field labels\.j: .*boolean"):
        read_records(run / "questions.jsonl")
    (run / "questions.jsonl").write_text('{"method": "mnemis", "question_id": "g:q0"\n')  # cut by a kill
    with pytest.raises(RunFileError, match=r"questions\.jsonl: line 1: not a JSON record"):
        read_records(run / "questions.jsonl")
    with pytest.raises(RunFileError, match="no such file"):
        read_records(run / "missing.jsonl")


@pytest.mark.parametrize("name, content, named", [
    ("ledger.json", {"stages": {"answer": {"calls": "two"}}}, r"ledger\.json: field stages\.answer\.calls"),
    ("roles.json", {"judges": [{"criterion": "generous"}]}, r"roles\.json: field judges\.0\.name: Field required"),
    ("metrics.json", {"mnemis": {"answer_failures": "none"}}, r"metrics\.json: method 'mnemis': field answer_failures"),
])
def test_the_report_names_the_damaged_file_and_the_explorer_renders_the_rest(tmp_path, name, content, named):
    run = _run(tmp_path)
    (run / name).write_text(json.dumps(content))
    with pytest.raises(RunFileError, match=named) as info:
        write_report(run)
    assert "report.html shows the valid records" in str(info.value) and not (run / "report.md").exists()
    data = explorer_data(run)
    assert len(data["questions"]) == 2  # the questions still render
    assert (run / "report.html").is_file()


def test_the_explorer_leaves_out_damaged_records_and_names_them(tmp_path):
    run = _run(tmp_path)
    _damage(run / "questions.jsonl", 1, {"labels": {"j": "maybe"}})
    _damage(run / "traversal.jsonl", 2, {"rounds": [_round("three")]})
    data = explorer_data(run)
    assert [q["id"] for q in data["questions"]] == ["g:q1"]  # the valid record
    assert data["questions"][0]["traversal"] is None  # its walk was damaged: left out
    assert any("questions.jsonl: line 1: field labels.j" in p for p in data["problems"])
    assert any("traversal.jsonl: line 2: field rounds.0.invented" in p for p in data["problems"])
    page = (run / "report.html")
    from mnemis.eval.explorer import write_html

    write_html(run)
    assert "Damaged records, left out of this page (2)" in page.read_text()


def test_judge_progress_rows_are_checked(tmp_path):
    from mnemis.eval.run_files import JudgeProgressRow

    f = tmp_path / "judge.mnemis.0.j.jsonl"
    f.write_text(json.dumps({"key": "k", "question_id": "g:q0", "label": "sometimes"}) + "\n")
    problems: list[str] = []
    assert read_jsonl(f, JudgeProgressRow, problems=problems) == []
    assert problems and "line 1: field label" in problems[0]


def test_tracking_and_graded_report_name_the_damaged_file(tmp_path):
    run = _run(tmp_path)
    (run / "ledger.json").write_text(json.dumps({"stages": {"answer": {"wall_s": "slow"}}}))
    with pytest.raises(RunFileError, match=r"ledger\.json: field stages\.answer\.wall_s"):
        JsonlTracker(tmp_path / "track").log_run_dir(run)
    (run / "graded_leniency.json").write_text(json.dumps({"judges": {"j": {"reference": {"mean": "high"}}}}))
    with pytest.raises(RunFileError, match=r"graded_leniency\.json: field judges\.j\.reference\.mean"):
        _leniency_lines(run)
    assert read_checked(run / "absent.json") is None


def test_mnemis_report_exits_with_the_sentence_not_a_traceback(tmp_path):
    run = _run(tmp_path)
    _damage(run / "traversal.jsonl", 1, {"rounds": [_round("three")]})
    proc = subprocess.run([sys.executable, "-m", "mnemis.app.cli", "report", f"run_dir={run}",
                           f"hydra.run.dir={tmp_path}/hydra"], check=False, capture_output=True, text=True,
                          cwd=tmp_path, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "traversal.jsonl: line 1: field rounds.0.invented" in proc.stderr
    assert (run / "report.html").is_file()


def test_traversal_records_are_the_system2_records():
    row = {"question_id": "q", "group_id": "g", "rounds": [_round(0)]}
    assert Traversal.model_validate(row).rounds[0].invented == 0
