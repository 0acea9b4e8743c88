"""Answering and judging record finished chunks in the run dir: a crash after N requests, then a rerun with
an EMPTY response cache, sends at most one chunk more than an uninterrupted run and gives the same records."""

from __future__ import annotations

import random

import pytest

from mnemis.eval.harness import evaluate_method
from mnemis.eval.records import read_records
from mnemis.eval.run_dir import QUESTIONS_FILE
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import CountingBackend, Killed
from tests.helpers.eval import make_question, verdict

CHUNK = 3
N = 11


def respond(req):
    text = req.messages[-1]["content"]
    if req.stage == "answer":
        return f"Paris, said {len(text) % 7}"
    return verdict("CORRECT" if "said 3" in text or "said 5" in text else "WRONG")


def Counting(crash_after: int | None = None) -> CountingBackend:  # noqa: N802
    return CountingBackend(respond, crash_after=crash_after)


def _evaluate(run_dir, backend, questions):
    llm = LLM(backend, chunk_size=CHUNK)  # no response cache at all
    return evaluate_method(method="m", questions=questions, contexts=[f"ctx {i} " * (i + 1) for i in range(N)],
                           answer_llm=llm, judges={"main": llm}, run_dir=run_dir)


@pytest.mark.parametrize("seed", range(4))
def test_crashed_evaluation_resumes_without_redoing_chunks(tmp_path, seed):
    questions = [make_question(i) for i in range(N)]
    ref_backend = Counting()
    ref = _evaluate(tmp_path / "ref", ref_backend, questions)
    ref_calls = ref_backend.total  # N answers + N judge calls
    assert ref_calls == 2 * N and {r.labels["main"] for r in ref} == {True, False}
    crash_at = random.Random(seed).randint(1, ref_calls - 1)
    first = Counting(crash_after=crash_at)
    with pytest.raises(Killed):
        _evaluate(tmp_path / "run", first, questions)
    second = Counting()
    got = _evaluate(tmp_path / "run", second, questions)
    assert first.total + second.total <= ref_calls + CHUNK
    assert second.total < ref_calls or crash_at < CHUNK  # committed chunks were not asked again
    strip = lambda rs: [r.model_dump(exclude={"cached"}) for r in rs]  # noqa: E731
    assert strip(got) == strip(ref)
    assert strip(read_records(tmp_path / "run" / QUESTIONS_FILE)) == strip(read_records(tmp_path / "ref" / QUESTIONS_FILE))


def test_torn_progress_line_is_redone(tmp_path):
    questions = [make_question(i) for i in range(N)]
    _evaluate(tmp_path, Counting(), questions)
    answers = tmp_path / "progress" / "answer.m.0.jsonl"
    answers.write_text(answers.read_text()[:-20])  # a kill in the middle of the last write
    again = Counting()
    _evaluate(tmp_path, again, questions)
    assert again.total == 1  # the one torn answer; its judge label is unchanged (same request)
