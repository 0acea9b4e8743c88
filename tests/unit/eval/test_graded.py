"""Graded scoring (BEAM rubric and event ordering, LoCoMo-Plus cue) with scripted judge replies, through the
harness, the metrics and the report."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from mnemis.eval.graded import judge_mixed, reply_lines, score_graded
from mnemis.eval.graded_leniency import VAGUE, control_items, graded_leniency
from mnemis.eval.harness import evaluate_method, finalize_run
from mnemis.eval.records import read_records
from mnemis.prompts.judge_beam import RUBRIC_SYSTEM, SAME_SYSTEM
from mnemis.types import Question
from mnemis.settings import GradedSettings
from tests.helpers.eval import make_question, scripted_llm, verdict

RUBRIC_SCORES = {"states the date": 1.0, "names the place": 0.5, "avoids jargon": 0.0}
SAME = {("plan", "1. I planned it"), ("buy", "3. then I bought pots"), ("move", "2. I moved them")}


def beam_q(i: int, group: str, category: str = "information_extraction", rubric=None, scorer="beam_rubric",
           answer: str = "ref") -> Question:
    return Question(id=f"{group}:{category}:{i}", group_id=group, question=f"question {i}?", answer=answer,
                    category=category, question_date=datetime(2024, 5, 1), index=i,
                    meta={"scorer": scorer, "rubric": rubric or list(RUBRIC_SCORES), "reference_key": "answer"})


def cue_q(i: int, group: str) -> Question:
    return Question(id=f"{group}:q0", group_id=group, question="Nora says: ...", answer="Nora: I walk now.",
                    category="cognitive", index=0, meta={"scorer": "locomo_plus_cognitive", "cue": "Nora: I walk now.",
                                                         "trigger": "Nora: my legs hurt", "relation_type": "causal"})


def judge_reply(req):
    system, body = req.messages[0]["content"], req.messages[-1]["content"]
    if system == RUBRIC_SYSTEM:
        item = re.search(r"^Requirement: (.*)$", body, re.MULTILINE).group(1)
        if item == "broken":
            return "not json at all"
        return {"reasoning": "checked", "score": RUBRIC_SCORES.get(item, 1.0)}
    if system == SAME_SYSTEM:
        first = re.search(r"^First text: (.*)$", body, re.MULTILINE).group(1)
        second = re.search(r"^Second text: (.*)$", body, re.MULTILINE).group(1)
        return {"same": (first, second) in SAME}
    if "Earlier exchange" in body:
        return verdict("correct" if "walk" in body.split("Reply to check:")[1] else "wrong").lower()
    return verdict("CORRECT")  # the LoCoMo judge


def test_rubric_mean_and_the_floor_rule():
    llm, backend = scripted_llm(judge_reply)
    qs = [beam_q(0, "g1"), beam_q(1, "g1", rubric=["states the date", "broken"])]
    res = score_graded({"main": llm}, qs, ["an answer", "another"])["main"]
    assert res[0]["score"] == pytest.approx(0.5) and res[0]["details"]["rubric_items"] == [1.0, 0.5, 0.0]
    assert res[0]["details"]["rubric_mean_floor"] == pytest.approx(1 / 3)  # BEAM's int(): the 0.5 counts 0
    assert res[1]["score"] is None and res[1]["details"]["rubric_items"] == [1.0, None]  # unusable reply
    assert len(backend.batches) == 1  # every item of every question in one generate
    floor = score_graded({"main": scripted_llm(judge_reply)[0]}, qs[:1], ["x"], settings=GradedSettings(partial="floor"))
    assert floor["main"][0]["score"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="partial"):
        score_graded({"main": llm}, qs[:1], ["x"], settings=GradedSettings(partial="round"))


def test_event_ordering_by_hand():
    llm, backend = scripted_llm(judge_reply)
    q = beam_q(0, "g1", "event_ordering", rubric=["plan", "buy", "move"], scorer="beam_event_ordering")
    answer = "1. I planned it\n\n2. I moved them\n3. then I bought pots\n"
    assert reply_lines(answer, 40) == ["1. I planned it", "2. I moved them", "3. then I bought pots"]
    d = score_graded({"main": llm}, [q], [answer])["main"][0]
    # aligned (plan, move, buy) against (plan, buy, move): F1 1, tau-b 1/3 -> score (1/3 + 1) / 2
    assert d["details"]["f1"] == 1.0 and d["details"]["tau_b"] == pytest.approx(1 / 3)
    assert d["score"] == pytest.approx(2 / 3) and d["details"]["lines"] == 3
    pairs = [r for r in backend.requests if r.messages[0]["content"] == SAME_SYSTEM]
    assert len(pairs) == 9  # every (line, item) pair, as upstream asks them
    assert d["details"]["rubric_mean"] == 1.0  # the rubric judge's mean is kept beside it


def test_cognitive_labels_empty_answers_and_partial():
    llm, backend = scripted_llm(judge_reply)
    res = score_graded({"j": llm}, [cue_q(0, "p0"), cue_q(1, "p1"), cue_q(2, "p2")],
                       ["Keep walking, it helps", "Try yoga", ""])["j"]
    assert [r["score"] for r in res] == [1.0, 0.0, 0.0]
    assert res[0]["details"]["label"] == "correct" and res[2]["details"] == {"reason": "no answer"}
    assert len(backend.requests) == 2  # the empty answer is never sent
    partial = scripted_llm(lambda r: {"reasoning": "vague link", "label": "partial"})[0]
    assert score_graded({"j": partial}, [cue_q(0, "p0")], ["hm"], settings=GradedSettings(cognitive_partial=True)
                        )["j"][0]["score"] == 0.5
    binary = score_graded({"j": partial}, [cue_q(0, "p0")], ["hm"])["j"][0]
    assert binary["score"] is None  # the binary schema refuses "partial": a counted failure


def test_judge_mixed_keeps_plain_questions_on_the_plain_judge():
    llm, _ = scripted_llm(judge_reply)
    unscored = beam_q(5, "g1", "humour", rubric=["funny"], scorer=None)
    qs = [make_question(0, category="single-hop"), beam_q(0, "g1"), unscored, cue_q(0, "p0")]
    labels, graded, flags = judge_mixed({"main": llm}, qs, ["Paris", "x", "a joke", "walk more"])
    assert labels["main"] == [True, True, None, True]  # a graded label is score >= 0.5
    assert graded["main"][0] is None and graded["main"][1]["score"] == 0.5 and graded["main"][2] is None
    assert flags == [[], [], ["unscored"], []]
    only_plain = judge_mixed({"main": llm}, qs[:1], ["Paris"])
    assert only_plain[1] is None and only_plain[0] == {"main": [True]}


def test_harness_metrics_and_report(tmp_path):
    judge, _ = scripted_llm(judge_reply)
    answerer, _ = scripted_llm(lambda r: "an answer")
    qs = [beam_q(0, "g1"), beam_q(1, "g1", rubric=["states the date"]), beam_q(0, "g2", rubric=["avoids jargon"]),
          beam_q(1, "g2", "summarization", rubric=["names the place"]),
          beam_q(9, "g2", "humour", rubric=["funny"], scorer=None)]
    recs = evaluate_method(method="mnemis", questions=qs, contexts=["ctx"] * len(qs), answer_llm=answerer,
                           judges={"main": judge}, run_dir=tmp_path)
    assert [r.scores.get("main") for r in recs] == [0.5, 1.0, 0.0, 0.5, None]
    assert recs[-1].flags == ["unscored"] and recs[-1].labels == {"main": None}
    assert read_records(tmp_path / "questions.jsonl")[0].score_details["main"]["rubric_items"] == [1.0, 0.5, 0.0]
    metrics = finalize_run(tmp_path, n_boot=200, separate=())["mnemis"]
    t = metrics["judges"]["main"]["raw"]
    assert t["by_category"]["information_extraction"]["accuracy"] == pytest.approx(0.5)  # (0.5 + 1 + 0) / 3
    assert t["overall"]["total"] == 4 and t["overall"]["accuracy"] == pytest.approx(0.5)
    assert t["overall"]["ci_unit"] == "group" and "humour" not in t["by_category"]  # unscored: not a wrong answer
    assert metrics["unscored"] == {"humour": 1} and t["judge_failures"] == 0
    g = metrics["judges"]["main"]["graded"]["by_category"]["information_extraction"]
    # BEAM's report: per conversation the mean of int()-read rubric means (g1: (1/3 + 1) / 2, g2: 0), then the mean
    assert g["upstream"] == pytest.approx(1 / 3) and g["rubric_mean"] == pytest.approx(0.5)
    report = (tmp_path / "report.md").read_text()
    assert "## Graded scores: parts per category" in report and "| mnemis | main | information_extraction | 3 |" in report
    assert "## Unscored questions" in report and "| mnemis | humour | 1 |" in report


def test_graded_leniency_controls(tmp_path):
    qs = [beam_q(0, "g1", answer="ref one"), beam_q(1, "g2", answer="ref two"), cue_q(0, "p0"),
          beam_q(0, "g1", "event_ordering", rubric=["plan", "buy"], scorer="beam_event_ordering")]
    items = control_items(qs, n=None)
    kinds = [(q.id, k) for q, k, _ in items]
    assert ("g1:information_extraction:0", "swapped") in kinds and ("p0:q0", "swapped") not in kinds
    swapped = next(r for q, k, r in items if q.id == "g1:information_extraction:0" and k == "swapped")
    assert swapped == "ref two"  # another conversation's reference for the same category
    assert next(r for q, k, r in items if k == "reference" and q.category == "event_ordering") == "plan\nbuy"
    assert all(r == VAGUE for _, k, r in items if k == "vague")
    judge, _ = scripted_llm(judge_reply)
    res = graded_leniency({"main": judge}, qs, n=None)
    assert set(res["judges"]["main"]) == {"reference", "swapped", "vague"} and res["n_questions"] == 4
    assert res["judges"]["main"]["reference"]["n"] == 4
    json.dumps(res)
