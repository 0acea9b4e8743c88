"""Answer every question from its rendered memory context: one batched ``generate()`` per chunk of
``llm.chunk_size`` questions (one call for a run that fits a chunk), each chunk recorded in ``progress``.

The prompt is one of the registered answer prompts (``mnemis.prompts.answer``). Every reply is kept whole
in ``reply``; ``answer`` is its short answer, read where the prompt says (``read_answer``: the whole reply,
the last "Answer:" line or the first sentence; ``span`` records which), and ``graded`` says what the judges
see (the whole reply for the paper's answer prompt, as the paper's judge graded it). A request carries the
question's text and date only: no gold label of the question reaches the prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from mnemis.eval.progress import JsonlProgress, item_key
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.chunks import chunk_size, chunked
from mnemis.prompts.answer import ANSWER, AnswerPrompt, read_answer
from mnemis.types import Question

log = logging.getLogger(__name__)
STAGE = "answer"


class AnswerRecord(BaseModel):
    """The answer to one question; ``error`` is set (and ``answer`` may be empty) when the item failed."""

    question_id: str
    group_id: str
    answer: str = ""
    reply: str | None = None  # the whole reply
    span: str = "whole"  # where ``answer`` was read in the reply: whole | answer_line | first_sentence
    graded: str = "answer"  # what the judges grade: the short answer or the whole reply
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def graded_text(self) -> str:
        """What a judge grades: the whole reply or the short answer (empty for a failed item)."""
        if not self.ok:
            return ""
        return (self.reply or self.answer) if self.graded == "reply" else self.answer


def answer_questions(
    llm,
    questions: Sequence[Question],
    contexts: Sequence[str],
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    seed: int = 0,
    prompt: AnswerPrompt = ANSWER,
    progress: str | Path | None = None,
) -> list[AnswerRecord]:
    """Answers for ``questions`` (same order); ``contexts[i]`` is the rendered memory of question i.

    One ``llm.generate`` per chunk of ``llm.chunk_size`` questions. Failed replies (and even a crashing
    ``generate``) are recorded in ``AnswerRecord.error``; only mismatched argument lengths and an engine that
    gives no reply (``EngineFailure``, which stops the stage) raise. ``progress``: a JSONL file (:mod:`mnemis.eval.progress`) of finished answers, appended per
    chunk and read back on a rerun (a crashed chunk is not recorded, so it is asked again).
    """
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    if not questions:
        return []
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed)
    requests = [
        LLMRequest(messages=prompt.render(ctx, q.question, q.question_date),
                   schema=prompt.schema, sampling=sampling, stage=STAGE)
        for q, ctx in zip(questions, contexts)
    ]
    log_ = JsonlProgress(progress) if progress is not None else None
    done = log_.load() if log_ is not None else {}
    keys = [item_key(r) for r in requests]
    retry = bool(getattr(llm, "retry_failed", False))
    out: list[AnswerRecord | None] = [
        AnswerRecord.model_validate(done[k]["record"])
        if k in done and not (retry and done[k]["record"].get("error")) else None for k in keys]
    for chunk in chunked([i for i, r in enumerate(out) if r is None], chunk_size(llm)):
        recs = _answer_chunk(llm, [questions[i] for i in chunk], [requests[i] for i in chunk], prompt)
        for i, rec in zip(chunk, recs):
            out[i] = rec
        if log_ is not None and not any(r.error and r.error.startswith(CRASH) for r in recs):
            log_.append({"key": keys[i], "record": rec.model_dump()} for i, rec in zip(chunk, recs))
    answers = [r for r in out if r is not None]
    failed = sum(not a.ok for a in answers)
    if failed:
        log.warning("%d of %d answers failed", failed, len(answers))
    return answers


CRASH = "generate crashed: "


def _answer_chunk(llm, questions: Sequence[Question], requests: list[LLMRequest],
                  prompt: AnswerPrompt) -> list[AnswerRecord]:
    try:
        results = llm.generate(requests)
    except EngineFailure:  # no reply is not an answer: the stage stops, a rerun asks this chunk again
        raise
    except Exception as exc:  # noqa: BLE001 - the harness records failures, never raises
        log.exception("answer generation failed for the whole batch")
        msg = f"{CRASH}{type(exc).__name__}: {exc}"[:500]
        return [AnswerRecord(question_id=q.id, group_id=q.group_id, error=msg) for q in questions]
    out = []
    for q, res in zip(questions, results):
        text, span = read_answer(res.text, prompt.span)
        parsed = getattr(res, "parsed", None)
        if parsed is not None and hasattr(parsed, "answer"):
            text, span = str(parsed.answer).strip(), "whole"
        error = res.error
        if error is None and not text:
            error = "empty answer"
        out.append(AnswerRecord(question_id=q.id, group_id=q.group_id, answer=text, error=error,
                                reply=res.text, span=span, graded=prompt.graded,
                                prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens,
                                cached=res.cached))
    return out
