"""Audited LoCoMo scoring: apply the corrections of ``locomo_audit_errors.json`` (mnemis data fetch).

Audit ids are ``locomo_<conversation index>_qa<index into that conversation's full qa list>``, the
conversation index being the position in ``locomo10.json`` (conv-26 = 0). Five error types change the
gold answer (``ANSWER_ERRORS``); every entry's ``correct_evidence`` replaces the question's evidence
(used by recall). Entries whose question text does not match the loaded question are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemis.data.shared import load_json_list
from mnemis.data.sources import DataDirs, locate
from mnemis.types import Episode, Question

log = logging.getLogger(__name__)

LOCOMO_GROUPS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47", "conv-48",
                 "conv-49", "conv-50")
ANSWER_ERRORS = frozenset({"HALLUCINATION", "TEMPORAL_ERROR", "ATTRIBUTION_ERROR", "AMBIGUOUS", "INCOMPLETE"})


def default_audit_path(dirs: DataDirs | None = None, *, fetch_missing: bool = False) -> Path:
    """``locomo_audit_errors.json`` in the data dirs (``mnemis.data.sources``), fetched when asked and missing."""
    return locate("locomo_audit", dirs, fetch_missing=fetch_missing)


def load_audit(path: str | Path | None = None) -> list[dict[str, Any]]:
    return load_json_list(path or default_audit_path(fetch_missing=True), "LoCoMo audit")


def audit_id(question: Question, groups: Sequence[str] = LOCOMO_GROUPS) -> str | None:
    """The audit id of a LoCoMo question, or None if its group is not a LoCoMo conversation."""
    try:
        return f"locomo_{list(groups).index(question.group_id)}_qa{question.index}"
    except ValueError:
        return None


@dataclass
class AuditResult:
    """Corrected copies of the questions, and which ones changed."""

    questions: list[Question]
    answer_changed: set[str] = field(default_factory=set)
    evidence_changed: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)


def _evidence_ids(group_id: str, raw: Sequence[Any]) -> list[str]:
    from mnemis.data.locomo import normalize_evidence

    return [Episode.make_id(group_id, f"D{s}:{t}") for s, t in normalize_evidence(list(raw))]


def apply_audit(
    questions: Sequence[Question],
    audit: Sequence[Mapping[str, Any]] | str | Path | None = None,
    *,
    groups: Sequence[str] = LOCOMO_GROUPS,
    known_episodes: set[str] | None = None,
) -> AuditResult:
    """Copies of ``questions`` with audited gold answers and evidence (unaudited ones unchanged).

    Args:
        audit: the entries, a path to the audit file, or None for the default path.
        groups: conversation ids in file order (audit index -> group id).
        known_episodes: if given, corrected evidence ids not in it are dropped.
    """
    entries = audit if isinstance(audit, Sequence) and not isinstance(audit, str) else load_audit(audit)
    by_id = {str(e["question_id"]): e for e in entries}
    res = AuditResult(questions=[])
    seen: set[str] = set()
    for q in questions:
        aid = audit_id(q, groups)
        entry = by_id.get(aid) if aid else None
        if entry is None:
            res.questions.append(q)
            continue
        seen.add(aid)
        if " ".join(str(entry.get("question", "")).split()) != " ".join(q.question.split()):
            log.warning("audit %s: question text differs from %s; not applied", aid, q.id)
            res.skipped.append(aid)
            res.questions.append(q)
            continue
        update: dict[str, Any] = {}
        if entry.get("error_type") in ANSWER_ERRORS and entry.get("correct_answer") is not None:
            update["answer"] = str(entry["correct_answer"])
            res.answer_changed.add(q.id)
        if entry.get("correct_evidence"):
            ev = _evidence_ids(q.group_id, entry["correct_evidence"])
            if known_episodes is not None:
                ev = [e for e in ev if e in known_episodes]
            if ev:
                update["evidence"] = ev
                res.evidence_changed.add(q.id)
        res.questions.append(q.model_copy(update=update) if update else q)
    return res


def audited_labels(
    judges: Mapping[str, object],
    questions: Sequence[Question],
    answers: Sequence[Any],
    raw_labels: Mapping[str, Sequence[bool | None]],
    audit: AuditResult,
    *,
    max_tokens: int = 200,
) -> dict[str, list[bool | None]]:
    """Labels under the audit: the raw labels, with exactly the answer-changed questions re-judged
    against their corrected gold answers (one batched call per judge over those questions only)."""
    from mnemis.eval.judge import judge_one_llm

    idx = [i for i, q in enumerate(questions) if q.id in audit.answer_changed]
    corrected = {q.id: q for q in audit.questions}
    out: dict[str, list[bool | None]] = {}
    for name, llm in judges.items():
        labels = list(raw_labels[name])
        if idx:
            new = judge_one_llm(llm, [corrected[questions[i].id] for i in idx], [answers[i] for i in idx],
                                max_tokens=max_tokens, stage=f"judge:{name}:audited")
            for i, lab in zip(idx, new):
                labels[i] = lab
        out[name] = labels
    return out
