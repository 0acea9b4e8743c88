"""Graded judging: scores in [0, 1] for the questions whose ``meta["scorer"]`` asks for one.

* ``beam_rubric`` (BEAM, nine abilities): each rubric item is judged 1 / 0.5 / 0 (``JUDGE_BEAM_RUBRIC``); the
  question's score is their mean. ``partial="floor"`` scores a 0.5 as 0, as the benchmark's script does (it
  reads the judge's score with ``int()``); ``"keep"`` (default) keeps the judge's scale.
* ``beam_event_ordering``: the reply's non-blank lines (at most ``max_lines``) are aligned with the
  reference items by asking the judge about every (line, item) pair (``JUDGE_BEAM_SAME_EVENT``); the score is
  normalised Kendall tau-b times the F1 of the aligned items (``mnemis.eval.kendall``). The rubric mean is
  kept beside it in the details.
* ``locomo_plus_cognitive``: one verdict, correct 1 / partial 0.5 / wrong 0 (``JUDGE_LOCOMO_PLUS``).

Every request of every graded question goes to a judge in one ``generate`` per chunk. An empty or failed
answer scores 0 without asking; a question with an unusable judge reply gets score None (a counted failure).
A question whose ``meta["scorer"]`` is None is *unscored* (an ability no scorer knows): it is recorded and
counted, never judged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.kendall import align, event_ordering_score
from mnemis.eval.progress import JsonlProgress, item_key
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.chunks import chunk_size, chunked
from mnemis.prompts.judge_beam import JUDGE_BEAM_RUBRIC, JUDGE_BEAM_SAME_EVENT
from mnemis.prompts.judge_locomo_plus import JUDGE_LOCOMO_PLUS, JUDGE_LOCOMO_PLUS_PARTIAL, LABEL_SCORE
from mnemis.settings import GradedSettings
from mnemis.types import Question

log = logging.getLogger(__name__)
GRADED = frozenset({"beam_rubric", "beam_event_ordering", "locomo_plus_cognitive"})


def is_graded(q: Question) -> bool:
    return q.meta.get("scorer") in GRADED


def is_unscored(q: Question) -> bool:
    """A question that names no scorer (``meta["scorer"]`` None): counted and reported, never judged."""
    return "scorer" in q.meta and q.meta["scorer"] is None


def reply_lines(text: str, max_lines: int) -> list[str]:
    """The non-blank lines of a reply, stripped, at most ``max_lines``."""
    return [ln.strip() for ln in text.splitlines() if ln.strip()][:max_lines]


def _answer_text(a: AnswerRecord | str | None) -> str:
    if a is None:
        return ""
    if isinstance(a, AnswerRecord):
        return a.graded_text  # what the run's judges grade: the short answer or the whole reply (paper mode)
    return str(a)


class _Plan:
    """The requests of one judge over all graded questions, and where each question's replies are."""

    def __init__(self, questions: Sequence[Question], texts: Sequence[str], sampling: Sampling, stage: str,
                 settings: GradedSettings) -> None:
        self.requests: list[LLMRequest] = []
        self.slots: list[dict[str, Any]] = []
        cog = JUDGE_LOCOMO_PLUS_PARTIAL if settings.cognitive_partial else JUDGE_LOCOMO_PLUS
        for q, text in zip(questions, texts):
            slot: dict[str, Any] = {"scorer": q.meta["scorer"], "empty": not text.strip()}
            self.slots.append(slot)
            if slot["empty"]:
                continue
            if slot["scorer"] in ("beam_rubric", "beam_event_ordering"):
                slot["rubric"] = [self._add(JUDGE_BEAM_RUBRIC, sampling, stage, q.question, item, text)
                                  for item in q.meta["rubric"]]
            if slot["scorer"] == "beam_event_ordering":
                lines = reply_lines(text, settings.max_lines)
                slot["lines"] = lines
                slot["pairs"] = [[self._add(JUDGE_BEAM_SAME_EVENT, sampling, stage, ref, line)
                                  for ref in q.meta["rubric"]] for line in lines]
            if slot["scorer"] == "locomo_plus_cognitive":
                slot["verdict"] = self._add(cog, sampling, stage, q.meta["cue"], q.meta["trigger"], text)

    def _add(self, prompt, sampling: Sampling, stage: str, *args: str) -> int:
        self.requests.append(LLMRequest(messages=prompt.render(*args), schema=prompt.schema, sampling=sampling,
                                        stage=stage))
        return len(self.requests) - 1


def ask_all(llm, requests: Sequence[LLMRequest], progress: str | Path | None = None) -> list[dict | None]:
    """The parsed reply (a dict) of every request, None where unusable; one ``generate`` per chunk, finished
    chunks appended to ``progress`` (a JSONL) and read back on a rerun."""
    out: list[dict | None] = [None] * len(requests)
    log_ = JsonlProgress(progress) if progress is not None else None
    done = log_.load() if log_ is not None else {}
    keys = [item_key(r) for r in requests]
    retry = bool(getattr(llm, "retry_failed", False))
    pending = []
    for i, k in enumerate(keys):
        if k in done and not (done[k].get("reply") is None and retry):
            out[i] = done[k].get("reply")
        else:
            pending.append(i)
    for chunk in chunked(pending, chunk_size(llm)):
        try:
            results = llm.generate([requests[i] for i in chunk])
        except EngineFailure:  # no reply is not a verdict: the stage stops, a rerun asks this chunk again
            raise
        except Exception:  # noqa: BLE001 - judge failures are counted, never raised (nor recorded)
            log.exception("graded judge failed for a whole batch")
            continue
        for i, res in zip(chunk, results):
            parsed = getattr(res, "parsed", None)
            out[i] = parsed.model_dump() if res.error is None and parsed is not None else None
        if log_ is not None:
            log_.append({"key": keys[i], "reply": out[i]} for i in chunk)
    return out


def _rubric_mean(replies: list[dict | None], idx: list[int], partial: str) -> tuple[float | None, list]:
    items = [None if replies[i] is None else float(replies[i]["score"]) for i in idx]
    if any(s is None for s in items) or not items:
        return None, items
    vals = [float(int(s)) if partial == "floor" else s for s in items]
    return sum(vals) / len(vals), items


def _assemble(q: Question, slot: dict[str, Any], replies: list[dict | None], settings: GradedSettings
              ) -> dict[str, Any]:
    if slot["empty"]:
        return {"score": 0.0, "details": {"reason": "no answer"}}
    details: dict[str, Any] = {}
    score: float | None = None
    if "rubric" in slot:
        mean, items = _rubric_mean(replies, slot["rubric"], settings.partial)
        details.update(rubric_mean=mean, rubric_items=items,
                       rubric_mean_floor=_rubric_mean(replies, slot["rubric"], "floor")[0])
        score = mean
    if slot["scorer"] == "beam_event_ordering":
        pairs = slot["pairs"]
        answers = [[None if replies[k] is None else bool(replies[k]["same"]) for k in row] for row in pairs]
        failed = sum(a is None for row in answers for a in row)
        aligned = align(q.meta["rubric"], slot["lines"], lambda i, j: answers[i][j])
        eo = event_ordering_score(q.meta["rubric"], aligned)
        details.update({k: eo[k] for k in ("precision", "recall", "f1", "tau_b", "tau_norm", "matched")},
                       lines=len(slot["lines"]), alignment_failures=failed)
        score = None if failed else eo["score"]
    if slot["scorer"] == "locomo_plus_cognitive":
        reply = replies[slot["verdict"]]
        label = None if reply is None else str(reply["label"])
        details.update(label=label, reasoning=None if reply is None else reply.get("reasoning"))
        score = None if label is None else LABEL_SCORE[label]
    return {"score": score, "details": details}


def score_graded(
    judges: Mapping[str, Any],
    questions: Sequence[Question],
    answers: Sequence[AnswerRecord | str | None],
    *,
    max_tokens: int | str = 200,
    progress: str | Path | None = None,
    settings: GradedSettings | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``{judge name: [{"score": float | None, "details": {...}}, ...]}`` in question order (every question
    must be graded, ``is_graded``). ``progress``: a JSONL path; each judge appends to ``<stem>.<name>.jsonl``."""
    from mnemis.eval.judge import as_judge

    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    bad = [q.id for q in questions if not is_graded(q)]
    if bad:
        raise ValueError(f"score_graded: questions without a graded scorer: {bad[:3]}")
    cfg = GradedSettings() if settings is None else settings  # its defaults equal conf/judge/beam.yaml's
    texts = [_answer_text(a) for a in answers]
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, judge in judges.items():
        plan = _Plan(questions, texts, sampling, f"judge:{name}", cfg)
        path = None if progress is None else Path(progress).with_name(f"{Path(progress).stem}.{name}.jsonl")
        replies = ask_all(as_judge(judge).llm, plan.requests, path) if plan.requests else []
        out[name] = [_assemble(q, slot, replies, cfg) for q, slot in zip(questions, plan.slots)]
        failures = sum(r["score"] is None for r in out[name])
        if failures:
            log.warning("graded judge %s: %d of %d questions without a usable score", name, failures, len(questions))
    return out


def judge_mixed(
    judges: Mapping[str, Any],
    questions: Sequence[Question],
    answers: Sequence[AnswerRecord | str | None],
    *,
    max_tokens: int | str = 200,
    progress: str | Path | None = None,
    graded_progress: str | Path | None = None,
    settings: GradedSettings | None = None,
) -> tuple[dict[str, list[bool | None]], dict[str, list[dict[str, Any] | None]] | None, list[list[str]]]:
    """Judge a run whose questions may mix CORRECT/WRONG judging and graded scoring.

    Returns ``(labels, graded, flags)`` in question order: ``labels`` per judge (a graded question's label is
    ``score >= 0.5``, None when it has no score), ``graded`` per judge (None entries for the other
    questions; ``graded`` is None when no question is graded) and per-question flags (``unscored``). When
    every question is a plain one this is exactly ``judge_answers``.
    """
    from mnemis.eval.judge import judge_answers

    flags = [["unscored"] if is_unscored(q) else [] for q in questions]
    plain = [i for i, q in enumerate(questions) if not is_graded(q) and not is_unscored(q)]
    if len(plain) == len(questions):
        return judge_answers(judges, questions, answers, max_tokens=max_tokens, progress=progress), None, flags
    unscored = sum(bool(f) for f in flags)
    if unscored:
        log.warning("%d questions have a type no scorer knows: recorded as unscored, counted in the report", unscored)
    labels: dict[str, list[bool | None]] = {name: [None] * len(questions) for name in judges}
    if plain:
        sub = judge_answers(judges, [questions[i] for i in plain], [answers[i] for i in plain],
                            max_tokens=max_tokens, progress=progress)
        for name, labs in sub.items():
            for i, lab in zip(plain, labs):
                labels[name][i] = lab
    idx = [i for i, q in enumerate(questions) if is_graded(q)]
    graded: dict[str, list[dict[str, Any] | None]] = {name: [None] * len(questions) for name in judges}
    if idx:
        res = score_graded(judges, [questions[i] for i in idx], [answers[i] for i in idx], max_tokens=max_tokens,
                           progress=graded_progress, settings=settings)
        for name, rows in res.items():
            for i, row in zip(idx, rows):
                graded[name][i] = row
                labels[name][i] = None if row["score"] is None else row["score"] >= 0.5
    return labels, graded, flags
