"""LoCoMo loader: one episode per turn, questions with normalised evidence (shared/data/README.md)."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError, require
from mnemis.data.sources import DataDirs, file_sha256, locate
from mnemis.types import Dataset, Episode, Question

log = logging.getLogger(__name__)

LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
TURN_SPACING = timedelta(seconds=30)
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")


def default_locomo_path(dirs: DataDirs | None = None, *, fetch_missing: bool = False) -> Path:
    """``locomo10.json`` in the data dirs (``mnemis.data.sources``), fetched when asked and missing."""
    return locate("locomo", dirs, fetch_missing=fetch_missing)


def normalize_evidence(raw: list[Any] | None) -> list[tuple[int, int]]:
    """Every ``(session, turn)`` pair found in the evidence strings, in order, without duplicates.

    Handles ``"D8:6; D9:17"``, ``"D:11:26"``, ``"D30:05"``; a bare ``"D"`` yields nothing.
    """
    out: list[tuple[int, int]] = []
    for item in raw or []:
        for s, t in _EVIDENCE.findall(str(item)):
            pair = (int(s), int(t))
            if pair not in out:
                out.append(pair)
    return out


def _parse_date(text: Any, where: str) -> datetime:
    if not isinstance(text, str):
        raise DataError(where, f"expected a date string like '1:56 pm on 8 May, 2023', got {type(text).__name__}")
    try:
        return datetime.strptime(text.strip(), DATE_FORMAT)
    except ValueError:
        raise DataError(where, f"unparseable date {text!r} (expected '%I:%M %p on %d %B, %Y')") from None


def load_locomo(path: str | Path | None = None, *, verify_checksum: bool = True,
                dirs: DataDirs | None = None) -> Dataset:
    """Load LoCoMo into episodes and questions; raises ``DataError`` naming the file and item on bad input.

    ``path`` None: the pinned file from the data dirs, fetched on first use (``mnemis data fetch locomo``).
    """
    file = Path(path) if path else default_locomo_path(dirs, fetch_missing=True)
    if not file.exists():
        raise DataError(str(file), "LoCoMo file not found (leave dataset.path unset to use the pinned file: "
                        "mnemis data fetch locomo)")
    warnings: dict[str, int] = {}
    if verify_checksum and file_sha256(file) != LOCOMO_SHA256:
        log.warning("%s: sha256 differs from the published locomo10.json; loading anyway", file)
        warnings["checksum_mismatch"] = 1
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(str(file), f"malformed JSON: {exc}") from None
    if not isinstance(raw, list):
        raise DataError(str(file), "top level must be a list of conversations")

    episodes: list[Episode] = []
    questions: list[Question] = []
    groups: list[str] = []
    for ci, sample in enumerate(raw):
        where = f"{file.name}[{ci}]"
        gid = require(sample, "sample_id", str, where)
        where = f"{file.name}:{gid}"
        if gid in groups:
            raise DataError(where, "duplicate sample_id")
        groups.append(gid)
        conv = require(sample, "conversation", dict, where)
        speakers = {require(conv, "speaker_a", str, f"{gid}.conversation"), require(conv, "speaker_b", str, f"{gid}.conversation")}
        group_eps = _load_sessions(gid, conv, speakers, file.name)
        episodes.extend(group_eps)
        known = {e.source_id for e in group_eps}
        qa = require(sample, "qa", list, where)
        for qi, item in enumerate(qa):
            questions.append(_load_question(gid, qi, item, known, warnings, sessions_end=group_eps[-1].valid_at if group_eps else None))
    if warnings.get("evidence_unknown_id"):
        log.info("%s: %d evidence ids name turns that do not exist; dropped", file.name, warnings["evidence_unknown_id"])
    return Dataset(name="locomo", groups=groups, episodes=episodes, questions=questions, warnings=warnings)


def _turn_id(dia_id: str, session: int, where: str, seen: dict[str, str]) -> str:
    """``D<session>:<turn>`` of a turn; a malformed id, one naming another session, or one already used
    by another turn of the conversation is an error (the released file has none of these)."""
    m = _DIA_ID.match(dia_id.strip())
    if m is None:
        raise DataError(f"{where}.dia_id",
                        f"malformed dia_id {dia_id!r} (expected 'D<session>:<turn>', e.g. 'D{session}:1')")
    if int(m.group(1)) != session:
        raise DataError(f"{where}.dia_id", f"dia_id {dia_id!r} names session {int(m.group(1))}, not {session}")
    source_id = f"D{int(m.group(1))}:{int(m.group(2))}"
    if source_id in seen:
        raise DataError(f"{where}.dia_id", f"duplicate dia_id {dia_id!r} (already used by {seen[source_id]})")
    seen[source_id] = where
    return source_id


def _load_sessions(gid: str, conv: dict[str, Any], speakers: set[str], fname: str) -> list[Episode]:
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)))
    out: list[Episode] = []
    seen: dict[str, str] = {}
    for s in numbers:
        key = f"session_{s}"
        turns = require(conv, key, list, gid)
        start = _parse_date(conv.get(f"{key}_date_time"), f"{gid} {key}_date_time")
        for t, turn in enumerate(turns):
            where = f"{gid} {key}[{t}]"
            speaker = require(turn, "speaker", str, where)
            text = require(turn, "text", str, where)
            dia_id = require(turn, "dia_id", str, where)
            if speaker not in speakers:
                raise DataError(f"{where}.speaker", f"{speaker!r} is neither speaker_a nor speaker_b")
            content = f"{speaker}: {text}"
            caption = turn.get("blip_caption")
            if caption:
                content += f" (description of attached image: {caption})"
            source_id = _turn_id(dia_id, s, f"{fname}:{where}", seen)
            out.append(
                Episode(
                    id=Episode.make_id(gid, source_id),
                    group_id=gid,
                    source_id=source_id,
                    name=f"Text {s}-{t}",
                    speaker=speaker,
                    content=content,
                    valid_at=start + t * TURN_SPACING,
                    session=s,
                    turn=t,
                    position=len(out),
                )
            )
    return out


def _load_question(
    gid: str, qi: int, item: Any, known: set[str], warnings: dict[str, int], sessions_end: datetime | None
) -> Question:
    where = f"{gid} qa[{qi}]"
    text = require(item, "question", str, where)
    cat = require(item, "category", int, where)
    if cat not in CATEGORIES:
        raise DataError(f"{where}.category", f"unknown category {cat} (expected 1-5)")
    if cat == 5:
        answer = item.get("adversarial_answer", item.get("answer"))
    else:
        answer = item.get("answer")
    if answer is None:
        raise DataError(f"{where}.answer", "missing field")
    evidence = []
    for s, t in normalize_evidence(item.get("evidence")):
        sid = f"D{s}:{t}"
        if sid in known:
            evidence.append(Episode.make_id(gid, sid))
        else:
            warnings["evidence_unknown_id"] = warnings.get("evidence_unknown_id", 0) + 1
            log.debug("%s: evidence id %s does not exist in the conversation; dropped", where, sid)
    return Question(
        id=f"{gid}:q{qi}",
        group_id=gid,
        question=text,
        answer=str(answer),
        category=CATEGORIES[cat],
        evidence=evidence,
        question_date=sessions_end,
        index=qi,
        abstention=cat == 5,
    )
