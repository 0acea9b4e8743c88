"""A judge that accepts most known-wrong answers of the stress set: its accuracy is not meaningful, so the report's
accuracy section and the CLI's closing lines say so and put token F1 first."""

from __future__ import annotations

import json

from mnemis.app.jobs import print_summary
from mnemis.eval.report import write_report
from mnemis.eval.run_health import not_meaningful, run_health
from mnemis.eval.run_dir import HEALTH_FILE


def _rates(specific: tuple[int, int], vague: tuple[int, int]) -> dict:
    return {kind: {"accepted": a, "judged": n, "failures": 0, "rate": a / n}
            for kind, (a, n) in (("wrong_specific", specific), ("wrong_vague", vague))}


def _run(tmp_path, rates: dict):
    run = tmp_path / "run"
    run.mkdir()
    (run / "leniency.json").write_text(json.dumps({"judges": {"main": rates}, "criteria": {"main": "strict"}}))
    rows = [{"method": "mnemis", "question_id": f"q{i}", "group_id": "g", "category": "single-hop",
             "question": "What colour is the cat?", "gold": "a black cat", "answer": "a black cat" if i else "no idea",
             "labels": {"main": True}} for i in range(4)]
    (run / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_a_judge_that_accepts_most_known_wrong_answers_is_named():
    health = {"judges": {"main": {"rates": {"wrong_specific": 1.0, "wrong_vague": 1.0}, "accepts": 1.0},
                         "strict": {"rates": {"wrong_specific": 0.1, "wrong_vague": 0.6}, "accepts": 0.35},
                         "vague": {"rates": {"wrong_specific": 0.0, "wrong_vague": 0.9}, "accepts": 0.45}}}
    lines = not_meaningful(health)
    assert sorted(lines) == ["main", "vague"]  # above 0.8 on a kind; 0.6 is not
    assert lines["main"] == ("accuracy not meaningful: judge main accepts 100% of known-wrong answers "
                             "(wrong_specific 100%, wrong_vague 100%)")
    assert "accepts 45% of known-wrong answers (wrong_specific 0%, wrong_vague 90%)" in lines["vague"]
    assert not_meaningful({}) == {}


def test_the_report_puts_token_f1_first_for_a_lenient_judge(tmp_path):
    run = _run(tmp_path, _rates((5, 5), (4, 5)))
    assert run_health(run)["judges"]["main"]["accepts"] == 0.9  # 9 of the 10 known-wrong answers
    report = write_report(run).read_text()
    scores, accuracy = report.index("## Answer scores without a judge"), report.index("## Accuracy")
    assert scores < accuracy
    assert ("- **accuracy not meaningful: judge main accepts 90% of known-wrong answers (wrong_specific 100%, "
            "wrong_vague 80%)**") in report[accuracy:]


def test_the_report_keeps_accuracy_first_for_a_strict_judge(tmp_path):
    run = _run(tmp_path, _rates((0, 5), (1, 5)))
    report = write_report(run).read_text()
    assert report.index("## Accuracy") < report.index("## Answer scores without a judge")
    assert "not meaningful" not in report


def _result(run, judged_by: str = "main") -> dict:
    overall = {"accuracy": 1.0, "total": 4}
    metrics = {"mnemis": {"headline_judge": judged_by, "judges": {judged_by: {"raw": {"overall": overall}}},
                          "answer_scores": {"overall": {"f1": 0.25}}}}
    return {"eval": {"metrics": metrics, "report": str(run / "report.md")}}


def test_the_closing_lines_put_token_f1_first_for_a_lenient_judge(tmp_path, capsys):
    run = _run(tmp_path, _rates((5, 5), (5, 5)))
    write_report(run)  # writes health.json, as a run does
    assert (run / HEALTH_FILE).is_file()
    print_summary(_result(run))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("mnemis: token F1 0.250 on 4 questions; accuracy not meaningful: judge main accepts 100% of "
                      "known-wrong answers (wrong_specific 100%, wrong_vague 100%) (its accuracy 1.000)")
    assert any(line.startswith("run health: judge main accepts") for line in out)


def test_the_closing_lines_keep_accuracy_first_for_a_strict_judge(tmp_path, capsys):
    run = _run(tmp_path, _rates((0, 5), (1, 5)))
    write_report(run)
    print_summary(_result(run))
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "mnemis: accuracy 1.000 on 4 questions (judge main), token F1 0.250"
