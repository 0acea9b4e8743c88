"""LLM judges: one batched ``generate()`` per judge, several judges per run, and their agreement.

A judge is a model plus a LoCoMo criterion (``Judge``; a bare LLM means the ``strict`` criterion).
The prompt per question is chosen from its category: LoCoMo categories use the LoCoMo judge with the
judge's criterion (``generous`` | ``strict``), every other category (the LongMemEval question types) the
LongMemEval judge. An empty or failed answer is WRONG without asking the judge; a judge reply that
cannot be parsed gives ``None`` (a counted failure).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.progress import JsonlProgress, item_key
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.chunks import chunk_size, chunked
from mnemis.paths import safe_name
from mnemis.prompts.judge_locomo import LOCOMO_CRITERIA
from mnemis.prompts.judge_longmemeval import (
    JUDGE_LONGMEMEVAL,
    JUDGE_LONGMEMEVAL_YES_NO,
    YES_NO_MAX_TOKENS,
    parse_yes_no,
)
from mnemis.types import Question

log = logging.getLogger(__name__)
LOCOMO_CATEGORIES = frozenset({"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"})
Label = bool | None
DEFAULT_CRITERION = "strict"
LME_FORMATS = ("reasoned", "yes_no")  # LongMemEval verdicts: JSON with a reason (ours) | yes or no (official)


@dataclass(frozen=True)
class Judge:
    """One judge: its model, its LoCoMo grading criterion (a key of ``LOCOMO_CRITERIA``) and the form of its
    LongMemEval verdict (``reasoned`` JSON, or the official ``yes_no``)."""

    llm: Any
    criterion: str = DEFAULT_CRITERION
    lme_format: str = "reasoned"

    def __post_init__(self) -> None:
        if self.criterion not in LOCOMO_CRITERIA:
            raise ValueError(f"judge criterion {self.criterion!r}: choose one of {sorted(LOCOMO_CRITERIA)}")
        if self.lme_format not in LME_FORMATS:
            raise ValueError(f"judge.longmemeval_format={self.lme_format!r}: choose one of {LME_FORMATS}")


def as_judge(obj: Any) -> Judge:
    """A ``Judge`` from a judge or a bare LLM (strict criterion)."""
    return obj if isinstance(obj, Judge) else Judge(obj)


def _answer_text(answer: AnswerRecord | str | None) -> str:
    if answer is None:
        return ""
    if isinstance(answer, AnswerRecord):
        return answer.graded_text  # the whole reply when the answer prompt says so (the paper's judge)
    return str(answer)


def judge_prompt(question: Question, *, criterion: str = DEFAULT_CRITERION, lme_format: str = "reasoned"):
    """The judge prompt of one question: LoCoMo with ``criterion``, or LongMemEval in ``lme_format``."""
    if question.category in LOCOMO_CATEGORIES:
        return LOCOMO_CRITERIA[criterion]
    return JUDGE_LONGMEMEVAL_YES_NO if lme_format == "yes_no" else JUDGE_LONGMEMEVAL


def judge_messages(question: Question, answer: str, *, gold: str | None = None,
                   criterion: str = DEFAULT_CRITERION, lme_format: str = "reasoned") -> list[dict[str, str]]:
    """The judge prompt for one question (LoCoMo with ``criterion``, or LongMemEval, by category);
    ``gold`` overrides the answer key."""
    gold = question.answer if gold is None else gold
    prompt = judge_prompt(question, criterion=criterion, lme_format=lme_format)
    if question.category in LOCOMO_CATEGORIES:
        return prompt.render(question.question, gold, answer, question.category)
    return prompt.render(question.question, gold, answer, question.category, question.abstention)


def judge_one_llm(
    judge,
    questions: Sequence[Question],
    answers: Sequence[AnswerRecord | str | None],
    *,
    golds: Sequence[str] | None = None,
    max_tokens: int | str = 200,
    stage: str = "judge",
    progress: str | Path | None = None,
) -> list[Label]:
    """Labels from one judge (a ``Judge`` or a bare LLM): True (CORRECT), False (WRONG) or None (failure).

    One ``generate`` per chunk of ``llm.chunk_size`` answers; ``progress``: a JSONL of finished labels,
    appended per chunk and read back on a rerun (:mod:`mnemis.eval.progress`)."""
    judge = as_judge(judge)
    llm = judge.llm
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    labels: list[Label] = [None] * len(questions)
    todo: list[int] = []
    texts = [_answer_text(a) for a in answers]
    for i, t in enumerate(texts):
        if t.strip():
            todo.append(i)
        else:
            labels[i] = False  # no answer cannot be correct
    if not todo:
        return labels
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)
    yes_no = Sampling(temperature=0.0, max_tokens=YES_NO_MAX_TOKENS, seed=0)
    requests = []
    for i in todo:
        prompt = judge_prompt(questions[i], criterion=judge.criterion, lme_format=judge.lme_format)
        requests.append(LLMRequest(
            messages=judge_messages(questions[i], texts[i], gold=None if golds is None else golds[i],
                                    criterion=judge.criterion, lme_format=judge.lme_format),
            schema=prompt.schema, sampling=sampling if prompt.schema is not None else yes_no, stage=stage))
    log_ = JsonlProgress(progress) if progress is not None else None
    done = log_.load() if log_ is not None else {}
    keys = [item_key(r) for r in requests]
    pending = []
    for j, (i, k) in enumerate(zip(todo, keys)):
        if k in done and not (done[k]["label"] is None and getattr(llm, "retry_failed", False)):
            labels[i] = done[k]["label"]
        else:
            pending.append(j)
    for chunk in chunked(pending, chunk_size(llm)):
        try:
            results = llm.generate([requests[j] for j in chunk])
        except EngineFailure:  # no reply is not a verdict: the stage stops, a rerun asks this chunk again
            raise
        except Exception:  # noqa: BLE001 - judge failures are counted, never raised (nor recorded)
            log.exception("judge %s failed for the whole batch", stage)
            continue
        reasons: dict[int, str] = {}
        for j, res in zip(chunk, results):
            parsed = getattr(res, "parsed", None)
            if res.error is None and requests[j].schema_ is None:  # a yes/no verdict
                labels[todo[j]] = parse_yes_no(res.text)
                reasons[j] = res.text.strip() if labels[todo[j]] is not None else f"(not yes or no: {res.text!r})"
            elif res.error is None and parsed is not None:
                labels[todo[j]] = parsed.label == "CORRECT"
                reasons[j] = str(getattr(parsed, "reasoning", "") or "")
            else:
                reasons[j] = f"(no usable reply: {res.error})"
        if log_ is not None:  # the rationale is kept for the run's explorer (report.html)
            log_.append({"key": keys[j], "question_id": questions[todo[j]].id, "label": labels[todo[j]],
                         "reasoning": reasons.get(j, "")} for j in chunk)
    failures = sum(labels[i] is None for i in todo)
    if failures:
        log.warning("judge %s: %d of %d replies unusable (label None)", stage, failures, len(todo))
    return labels


def judge_answers(
    judges: Mapping[str, object],
    questions: Sequence[Question],
    answers: Sequence[AnswerRecord | str | None],
    *,
    golds: Sequence[str] | None = None,
    max_tokens: int | str = 200,
    progress: str | Path | None = None,
) -> dict[str, list[Label]]:
    """Labels per judge name (values: ``Judge`` or bare LLMs), in question order; one batched ``generate``
    per judge and chunk (stage ``judge:<name>``). ``progress``: a JSONL path; each judge appends to
    ``<stem>.<name>.jsonl`` beside it."""
    def log_path(name: str) -> Path | None:
        if progress is None:
            return None
        return Path(progress).with_name(f"{Path(progress).stem}.{safe_name(name)}.jsonl")  # a name, not a path

    return {name: judge_one_llm(llm, questions, answers, golds=golds, max_tokens=max_tokens,
                                stage=f"judge:{name}", progress=log_path(name))
            for name, llm in judges.items()}


def _kappa(a: list[bool], b: list[bool]) -> float | None:
    from sklearn.metrics import cohen_kappa_score

    if len(set(a) | set(b)) < 2:  # both constant and equal: chance agreement is 1, kappa undefined
        return None
    k = float(cohen_kappa_score(a, b))
    return None if math.isnan(k) else k


def judge_agreement(labels: Mapping[str, Sequence[Label]]) -> dict[str, dict[str, float | int | None]]:
    """Raw agreement and Cohen's kappa for every judge pair (``"a|b"``), over items both judged."""
    out: dict[str, dict[str, float | int | None]] = {}
    for a, b in combinations(sorted(labels), 2):
        pairs = [(x, y) for x, y in zip(labels[a], labels[b]) if x is not None and y is not None]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        n = len(pairs)
        out[f"{a}|{b}"] = {
            "n": n,
            "agreement": (sum(x == y for x, y in pairs) / n) if n else None,
            "kappa": _kappa(xs, ys) if n else None,
        }
    return out
