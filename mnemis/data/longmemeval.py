"""LongMemEval loader (official JSON schema): one group per question, one episode per turn."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError, require
from mnemis.data.sources import DataDirs, locate
from mnemis.types import Dataset, Episode, Question

log = logging.getLogger(__name__)

DATE_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S")
TURN_SPACING = timedelta(seconds=30)
ROLES = ("user", "assistant")  # the only roles of the official files


def _where_to_get(path: Path) -> str:
    return (
        f"LongMemEval file {path} not found. Leave dataset.path unset to use the cleaned LongMemEval-S "
        "(`mnemis data fetch longmemeval_s`, from the Hugging Face dataset xiaowu0162/longmemeval-cleaned), "
        "or put the file there."
    )


def parse_lme_date(text: Any, where: str) -> datetime:
    if not isinstance(text, str):
        raise DataError(where, f"expected a date string like '2023/05/20 (Sat) 02:21', got {type(text).__name__}")
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise DataError(where, f"unparseable date {text!r} (expected like '2023/05/20 (Sat) 02:21')")


def load_longmemeval(path: str | Path | None = None, *, download: bool = True,
                     dirs: DataDirs | None = None) -> Dataset:
    """Load LongMemEval; every question instance is its own group (its haystack is its memory).

    ``path`` None: the cleaned LongMemEval-S from the data dirs, fetched on first use when ``download``.
    """
    file = Path(path) if path else locate("longmemeval_s", dirs, fetch_missing=download)
    if not file.exists():
        raise DataError(str(file), _where_to_get(file))
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(str(file), f"malformed JSON: {exc}") from None
    if not isinstance(raw, list):
        raise DataError(str(file), "top level must be a list of question instances")

    episodes: list[Episode] = []
    questions: list[Question] = []
    groups: list[str] = []
    seen: set[str] = set()
    for qi, item in enumerate(raw):
        qid, group_eps, question = parse_instance(item, qi, file.name, seen)
        groups.append(qid)
        episodes.extend(group_eps)
        questions.append(question)
    return Dataset(name="longmemeval", groups=groups, episodes=episodes, questions=questions)


def parse_instance(item: Any, qi: int, fname: str, seen: set[str]) -> tuple[str, list[Episode], Question]:
    """One question instance: its id (added to ``seen``), its haystack's episodes and its question."""
    where = f"{fname}[{qi}]"
    qid = str(require(item, "question_id", (str, int), where))
    where = f"{fname}:{qid}"
    if qid in seen:
        raise DataError(where, "duplicate question_id")
    seen.add(qid)
    sids = require(item, "haystack_session_ids", list, where)
    dates = require(item, "haystack_dates", list, where)
    sessions = require(item, "haystack_sessions", list, where)
    if not (len(sids) == len(dates) == len(sessions)):
        raise DataError(
            where, f"haystack_session_ids/dates/sessions lengths differ ({len(sids)}/{len(dates)}/{len(sessions)})"
        )
    answer_sessions = set(map(str, item.get("answer_session_ids", []) or []))
    group_eps: list[Episode] = []
    evidence: list[str] = []
    for si, (sid, date, turns) in enumerate(zip(sids, dates, sessions)):
        start = parse_lme_date(date, f"{where}.haystack_dates[{si}]")
        if not isinstance(turns, list):
            raise DataError(f"{where}.haystack_sessions[{si}]", "expected a list of turns")
        for ti, turn in enumerate(turns):
            tw = f"{where}.haystack_sessions[{si}][{ti}]"
            role = require(turn, "role", str, tw)
            if role not in ROLES:
                raise DataError(f"{tw}.role", f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
            content = require(turn, "content", str, tw)
            source_id = f"S{si + 1}:{ti + 1}"
            ep = Episode(
                id=Episode.make_id(qid, source_id),
                group_id=qid,
                source_id=source_id,
                name=f"Text {si + 1}-{ti}",
                speaker=role,
                content=f"{role}: {content}",
                valid_at=start + ti * TURN_SPACING,
                session=si + 1,
                turn=ti,
                position=len(group_eps),
            )
            group_eps.append(ep)
            if turn.get("has_answer") or (str(sid) in answer_sessions and role == "user" and not _any_flag(turns)):
                evidence.append(ep.id)
    qtype = require(item, "question_type", str, where)
    question = Question(
        id=f"{qid}:q0",
        group_id=qid,
        question=str(require(item, "question", (str, int), where)),
        answer=str(require(item, "answer", (str, int, float), where)),
        category=qtype,
        evidence=evidence,
        question_date=parse_lme_date(require(item, "question_date", str, where), f"{where}.question_date"),
        index=0,
        abstention=qid.endswith("_abs"),
    )
    return qid, group_eps, question


def _any_flag(turns: list[Any]) -> bool:
    """True when a session marks its evidence turns with ``has_answer`` (then only those count)."""
    return any(isinstance(t, dict) and t.get("has_answer") for t in turns)
