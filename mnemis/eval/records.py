"""Per-question result rows (``questions.jsonl`` in a run dir): everything metrics and reports need."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mnemis.eval.answer import AnswerRecord
from mnemis.eval.answer_scores import answer_scores
from mnemis.types import Question, RetrievedContext


class QuestionRecord(BaseModel):
    """One question answered by one method (and seed), with the label of every judge."""

    method: str = "mnemis"
    seed: int = 0
    question_id: str
    group_id: str
    category: str
    abstention: bool = False
    question: str
    gold: str
    answer: str = ""
    reply: str | None = Field(None, description="the whole reply")
    answer_span: str = Field("whole", description="where the short answer was read: whole | answer_line | "
                                                  "first_sentence (the lexical scores compare it with the gold)")
    graded: str = Field("answer", description="what the judges graded: the short answer or the whole reply")
    answer_error: str | None = None
    answer_scores: dict[str, float] = Field(default_factory=dict, description="f1, bleu1, locomo_f1 vs the gold")
    labels: dict[str, bool | None] = Field(default_factory=dict, description="judge name -> CORRECT?")
    scores: dict[str, float | None] = Field(
        default_factory=dict, description="judge name -> graded score in [0, 1] (BEAM, LoCoMo-Plus cognitive); "
                                          "when present it is the score, and the label is score >= 0.5")
    score_details: dict[str, Any] = Field(default_factory=dict, description="judge name -> how the score was made")
    audited_gold: str | None = Field(None, description="corrected gold answer when the audit changed it")
    audited_labels: dict[str, bool | None] = Field(default_factory=dict, description="labels under the audit")
    context_ids: list[str] = Field(default_factory=list)
    recall: dict[str, float | None] = Field(default_factory=dict, description="e.g. {'episodes@10': 0.5}")
    flags: list[str] = Field(default_factory=list)


def _context_ids(ctx: RetrievedContext | Sequence[str] | None) -> list[str]:
    if ctx is None:
        return []
    if isinstance(ctx, RetrievedContext):
        return [h.id for h in (*ctx.episodes, *ctx.entities, *ctx.facts)]
    return [str(x) for x in ctx]


def build_records(
    questions: Sequence[Question],
    answers: Sequence[AnswerRecord],
    labels: Mapping[str, Sequence[bool | None]],
    *,
    method: str = "mnemis",
    seed: int = 0,
    audited_labels: Mapping[str, Sequence[bool | None]] | None = None,
    audited_questions: Sequence[Question] | None = None,
    contexts: Sequence[RetrievedContext | Sequence[str] | None] | None = None,
    recall: Sequence[Mapping[str, float | None]] | None = None,
    flags: Sequence[Sequence[str]] | None = None,
    graded_scores: Mapping[str, Sequence[Mapping[str, Any] | None]] | None = None,
) -> list[QuestionRecord]:
    """Zip the per-question outputs of one method into records (all sequences in question order)."""
    n = len(questions)
    for name, seq in [("answers", answers), *((f"labels[{k}]", v) for k, v in labels.items()),
                      ("audited_questions", audited_questions), ("contexts", contexts), ("recall", recall),
                      ("flags", flags), *((f"graded_scores[{k}]", v) for k, v in (graded_scores or {}).items())]:
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} items for {n} questions")
    out = []
    for i, q in enumerate(questions):
        a = answers[i]
        ctx = contexts[i] if contexts is not None else None
        row_flags = list(flags[i]) if flags is not None else []
        if isinstance(ctx, RetrievedContext):
            row_flags += [f for f in ctx.flags if f not in row_flags]
        if not a.ok:
            row_flags.append("answer_failed")
        aq = audited_questions[i] if audited_questions is not None else None
        out.append(QuestionRecord(
            method=method, seed=seed, question_id=q.id, group_id=q.group_id, category=q.category,
            abstention=q.abstention, question=q.question, gold=q.answer, answer=a.answer, reply=a.reply,
            answer_span=a.span, graded=a.graded,
            answer_error=a.error, answer_scores=answer_scores(a.answer if a.ok else "", q.answer, q.category),
            labels={k: v[i] for k, v in labels.items()},
            scores={k: g[i]["score"] for k, g in (graded_scores or {}).items() if g[i] is not None},
            score_details={k: g[i]["details"] for k, g in (graded_scores or {}).items() if g[i] is not None},
            audited_gold=aq.answer if aq is not None and aq.answer != q.answer else None,
            audited_labels={k: v[i] for k, v in (audited_labels or {}).items()},
            context_ids=_context_ids(ctx), recall=dict(recall[i]) if recall is not None else {},
            flags=row_flags,
        ))
    return out


def write_records(path: str | Path, records: Iterable[QuestionRecord], *, append: bool = False) -> Path:
    """Write records as JSON lines (``append=True`` adds to an existing file, e.g. another method)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for r in records:
            f.write(r.model_dump_json() + "\n")
    return path


def read_records(path: str | Path) -> list[QuestionRecord]:
    """Records of a ``questions.jsonl`` file (blank lines ignored); a damaged record raises
    :class:`~mnemis.eval.run_files.RunFileError` naming the file, its line and the field."""
    from mnemis.eval.run_files import RunFileError, read_jsonl

    if not Path(path).is_file():
        raise RunFileError(f"{path}: no such file")
    return read_jsonl(path, QuestionRecord)


def as_record(row: QuestionRecord | Mapping[str, Any]) -> QuestionRecord:
    return row if isinstance(row, QuestionRecord) else QuestionRecord.model_validate(dict(row))


def dump_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (NaN-free: non-finite floats become null)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(obj), indent=2, sort_keys=False), encoding="utf-8")
    return path


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
