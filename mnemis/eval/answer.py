"""Answer every question from its rendered memory context in ONE batched ``generate()`` call.

The prompt is one of the registered answer prompts (``mnemis.prompts.answer``); a reasoning-first reply
is cut to its final "Answer:" line (``extract_answer``) and the whole reply is kept in ``reply``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import BaseModel

from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.prompts.answer import ANSWER, extract_answer
from mnemis.prompts.base import Prompt
from mnemis.types import Question

log = logging.getLogger(__name__)
STAGE = "answer"


class AnswerRecord(BaseModel):
    """The answer to one question; ``error`` is set (and ``answer`` may be empty) when the item failed."""

    question_id: str
    group_id: str
    answer: str = ""
    reply: str | None = None  # the whole reply when the answer was cut from it (reasoning first)
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def answer_questions(
    llm,
    questions: Sequence[Question],
    contexts: Sequence[str],
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    seed: int = 0,
    prompt: Prompt = ANSWER,
) -> list[AnswerRecord]:
    """Answers for ``questions`` (same order); ``contexts[i]`` is the rendered memory of question i.

    One ``llm.generate`` for the whole batch. Item failures (and even a crashing ``generate``) are
    recorded in ``AnswerRecord.error``; nothing raises except mismatched argument lengths.
    """
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    if not questions:
        return []
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed)
    requests = [
        LLMRequest(messages=prompt.render(ctx, q.question, q.question_date, category=q.category),
                   schema=prompt.schema, sampling=sampling, stage=STAGE)
        for q, ctx in zip(questions, contexts)
    ]
    try:
        results = llm.generate(requests)
    except Exception as exc:  # noqa: BLE001 - the harness records failures, never raises
        log.exception("answer generation failed for the whole batch")
        msg = f"{type(exc).__name__}: {exc}"[:500]
        return [AnswerRecord(question_id=q.id, group_id=q.group_id, error=msg) for q in questions]
    out = []
    for q, res in zip(questions, results):
        text, found = extract_answer(res.text)
        parsed = getattr(res, "parsed", None)
        if parsed is not None and hasattr(parsed, "answer"):
            text, found = str(parsed.answer).strip(), False
        error = res.error
        if error is None and not text:
            error = "empty answer"
        out.append(AnswerRecord(question_id=q.id, group_id=q.group_id, answer=text, error=error,
                                reply=res.text if found else None,
                                prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens,
                                cached=res.cached))
    failed = sum(not a.ok for a in out)
    if failed:
        log.warning("%d of %d answers failed", failed, len(out))
    return out
