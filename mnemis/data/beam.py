"""BEAM loader (Tavakoli et al., ICLR 2026): one group per conversation, one episode per message.

A scale folder (``100K``, ``500K``, ``1M``, ``10M``) holds one folder per conversation with ``chat.json``
and ``probing_questions.json`` (or the upstream layout ``probing_questions/probing_questions.json``).

* ``chat.json``: a list of batches ``{batch_number, time_anchor, turns}``, each turn a list of messages
  ``{role, id, content, ...}``; the 10M scale wraps its batches in ``[{"plan-1": [...]}, ...]``. Every
  batch is a session; user and assistant messages both become episodes (``source_id`` ``M<id>``, the
  message id the questions cite). The ``->-> i,j`` marker that ends a message is stripped from its text and
  kept in the episode's ``name`` (``turn i,j``). Dates come from the batch's ``time_anchor`` or, when that
  is empty, from the messages that carry one (``March-15-2024``); messages follow it 30 s apart.
* ``probing_questions.json``: ten abilities, each a list of questions with ``question``, ``rubric`` (a list
  of strings, what the official judge scores item by item) and a reference answer (whose key depends on the
  ability). Every other field is kept in ``Question.meta["fields"]``; ``source_chat_ids`` (ints, lists,
  dicts of lists) become the evidence.

Bad input (a missing key, an unknown ability, a rubric that is not a list of strings, a role other than user
or assistant, a malformed date) raises ``DataError`` naming the file and the item. ``unknown_types="keep"``
loads an ability we do not know with no scorer instead: the report counts it as unscored.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError, require
from mnemis.types import Dataset, Episode, Question

log = logging.getLogger(__name__)

SCALES = ("100K", "500K", "1M", "10M")
ABILITIES = (
    "abstention", "contradiction_resolution", "event_ordering", "information_extraction",
    "instruction_following", "knowledge_update", "multi_session_reasoning", "preference_following",
    "summarization", "temporal_reasoning",
)
# the key holding each ability's reference answer (what a good reply says or does)
REFERENCE_KEY = {
    "abstention": "ideal_response", "contradiction_resolution": "ideal_answer", "summarization": "ideal_summary",
    "instruction_following": "expected_compliance", "preference_following": "expected_compliance",
}
SCORER = {a: "beam_rubric" for a in ABILITIES} | {"event_ordering": "beam_event_ordering"}
TURN_SPACING = timedelta(seconds=30)
DEFAULT_START = datetime(2024, 1, 1)
DATE_FORMATS = ("%B-%d-%Y", "%b-%d-%Y", "%B %d, %Y", "%Y-%m-%d", "%d %B %Y")
_MARKER = re.compile(r"\s*->->[ \t]*([^\n]*?)[ \t]*$")
_PLAN = re.compile(r"^plan-(\d+)$")
QUESTION_FILES = ("probing_questions.json", "probing_questions/probing_questions.json")


def reference_key(ability: str) -> str:
    return REFERENCE_KEY.get(ability, "answer")


def split_marker(content: str) -> tuple[str, str | None]:
    """``(text without its final '->-> i,j' marker, 'i,j')``; the marker is None when there is none."""
    m = _MARKER.search(content)
    if m is None:
        return content, None
    return content[: m.start()].rstrip(), re.sub(r"\s+", "", m.group(1)) or None


def parse_anchor(text: Any, where: str) -> datetime:
    if not isinstance(text, str):
        raise DataError(where, f"expected a date string like 'March-15-2024', got {type(text).__name__}")
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise DataError(where, f"unparseable time_anchor {text!r} (expected like 'March-15-2024')")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(str(path), f"malformed JSON: {exc}") from None


def chat_batches(raw: Any, where: str) -> list[dict[str, Any]]:
    """The batches of a ``chat.json`` in order (the 10M scale's ``plan-N`` wrappers flattened)."""
    if not isinstance(raw, list):
        raise DataError(where, "top level must be a list of batches")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        if isinstance(item, dict) and len(item) == 1 and _PLAN.match(next(iter(item))):
            key, plan = next(iter(item.items()))
            if not isinstance(plan, list):
                raise DataError(f"{where}[{i}].{key}", "expected a list of batches")
            out.extend(plan)
        else:
            out.append(item)
    return out


def conversation_dirs(root: Path) -> list[Path]:
    """The conversation folders of a scale folder, in numeric order (names that are not numbers last)."""
    if not root.is_dir():
        raise DataError(str(root), "BEAM scale folder not found (mnemis data fetch beam, or set dataset.path)")
    dirs = [p for p in root.iterdir() if p.is_dir() and (p / "chat.json").is_file()]
    if not dirs:
        raise DataError(str(root), "no conversation folders with a chat.json")
    return sorted(dirs, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def load_chat(path: Path, gid: str, warnings: dict[str, int]) -> list[Episode]:
    """The episodes of one ``chat.json`` (errors name the file, batch, turn and message)."""
    fname = str(path)
    batches = chat_batches(_read_json(path), fname)
    start = _first_anchor(batches, fname)
    if start is None:
        warnings["no_time_anchor"] = warnings.get("no_time_anchor", 0) + 1
        log.warning("%s: no time_anchor anywhere; dates start at %s", fname, DEFAULT_START.date())
    clock, since = start or DEFAULT_START, 0
    out: list[Episode] = []
    seen: set[int] = set()
    for bi, batch in enumerate(batches):
        bw = f"{fname}: batch[{bi}]"
        turns = require(batch, "turns", list, bw)
        if batch.get("time_anchor"):
            clock, since = parse_anchor(batch["time_anchor"], f"{bw}.time_anchor"), 0
        in_batch = 0
        for ti, turn in enumerate(turns):
            if not isinstance(turn, list):
                raise DataError(f"{bw}.turns[{ti}]", "expected a list of messages")
            for mi, msg in enumerate(turn):
                mw = f"{bw}.turns[{ti}][{mi}]"
                role = require(msg, "role", str, mw)
                if role not in ("user", "assistant"):
                    raise DataError(f"{mw}.role", f"unknown role {role!r} (expected user or assistant)")
                mid = require(msg, "id", int, mw)
                if mid in seen:
                    raise DataError(f"{mw}.id", f"duplicate message id {mid}")
                seen.add(mid)
                text, marker = split_marker(require(msg, "content", str, mw))
                if msg.get("time_anchor"):
                    clock, since = parse_anchor(msg["time_anchor"], f"{mw}.time_anchor"), 0
                source_id = f"M{mid}"
                out.append(Episode(
                    id=Episode.make_id(gid, source_id), group_id=gid, source_id=source_id,
                    name=f"turn {marker}" if marker else f"message {mid}", speaker=role,
                    content=f"{role}: {text}", valid_at=clock + since * TURN_SPACING, session=bi + 1,
                    turn=in_batch, position=len(out),
                ))
                since += 1
                in_batch += 1
    return out


def _first_anchor(batches: list[dict[str, Any]], where: str) -> datetime | None:
    for bi, batch in enumerate(batches):
        if isinstance(batch, dict) and batch.get("time_anchor"):
            return parse_anchor(batch["time_anchor"], f"{where}: batch[{bi}].time_anchor")
        for ti, turn in enumerate((batch.get("turns") or []) if isinstance(batch, dict) else []):
            for mi, msg in enumerate(turn if isinstance(turn, list) else []):
                if isinstance(msg, dict) and msg.get("time_anchor"):
                    return parse_anchor(msg["time_anchor"], f"{where}: batch[{bi}].turns[{ti}][{mi}].time_anchor")
    return None


def chat_ids(value: Any) -> list[int]:
    """Every message id in a ``source_chat_ids`` value (an int, a list, a dict of lists, nested), in order."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        return [int(x) for x in re.findall(r"\d+", value)]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return list(dict.fromkeys(i for v in items for i in chat_ids(v)))


def load_questions(path: Path, gid: str, known: set[str], question_date: datetime | None,
                   warnings: dict[str, int], *, unknown_types: str = "error") -> list[Question]:
    """The probing questions of one conversation, in ability order (errors name the file and item)."""
    fname = str(path)
    raw = _read_json(path)
    if not isinstance(raw, dict):
        raise DataError(fname, "top level must be an object {ability: [questions]}")
    out: list[Question] = []
    for ability, items in raw.items():
        known_type = ability in ABILITIES
        if not known_type and unknown_types != "keep":
            raise DataError(f"{fname}: {ability}", f"unknown question type (known: {', '.join(ABILITIES)}); "
                            "set dataset.unknown_types=keep to load it unscored")
        if not isinstance(items, list):
            raise DataError(f"{fname}: {ability}", "expected a list of questions")
        for qi, item in enumerate(items):
            where = f"{fname}: {ability}[{qi}]"
            text = require(item, "question", str, where)
            rubric = require(item, "rubric", list, where)
            if not rubric or not all(isinstance(r, str) and r.strip() for r in rubric):
                raise DataError(f"{where}.rubric", "expected a non-empty list of non-empty strings")
            ref_key = reference_key(ability)
            reference = item.get(ref_key) if known_type else item.get(ref_key, item.get("ideal_response"))
            if known_type and reference is None:
                raise DataError(f"{where}.{ref_key}", "missing field")
            evidence = []
            for mid in chat_ids(item.get("source_chat_ids")):
                eid = Episode.make_id(gid, f"M{mid}")
                if eid in known:
                    evidence.append(eid)
                else:
                    warnings["evidence_unknown_id"] = warnings.get("evidence_unknown_id", 0) + 1
            fields = {k: v for k, v in item.items() if k not in ("question", "rubric", ref_key)}
            out.append(Question(
                id=f"{gid}:{ability}:{qi}", group_id=gid, question=text,
                answer=_as_text(reference), category=ability, evidence=evidence,
                question_date=question_date, index=len(out), abstention=ability == "abstention",
                meta={"scorer": SCORER.get(ability), "rubric": list(rubric), "reference_key": ref_key,
                      "fields": fields},
            ))
            if not known_type:
                warnings["unscored_type"] = warnings.get("unscored_type", 0) + 1
    return out


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(map(str, value))
    return str(value)


def question_file(conv: Path) -> Path:
    for name in QUESTION_FILES:
        if (conv / name).is_file():
            return conv / name
    raise DataError(str(conv), f"no probing questions ({' or '.join(QUESTION_FILES)})")


def load_beam(root: str | Path, *, scale: str = "100K", unknown_types: str = "error",
              conversations: list[str] | None = None) -> Dataset:
    """Every conversation of the scale folder ``root`` (``conversations``: only these folder names).

    Groups are ``beam-<scale>-<folder>``; the questions are asked after the conversation's last message.
    """
    root = Path(root)
    warnings: dict[str, int] = {}
    groups, episodes, questions = [], [], []
    for conv in conversation_dirs(root):
        if conversations is not None and conv.name not in conversations:
            continue
        gid = f"beam-{scale}-{conv.name}"
        eps = load_chat(conv / "chat.json", gid, warnings)
        groups.append(gid)
        episodes.extend(eps)
        last = eps[-1].valid_at if eps else None
        questions.extend(load_questions(question_file(conv), gid, {e.id for e in eps}, last, warnings,
                                        unknown_types=unknown_types))
    if warnings.get("evidence_unknown_id"):
        log.info("%s: %d source_chat_ids name no message; dropped", root, warnings["evidence_unknown_id"])
    return Dataset(name="beam", groups=groups, episodes=episodes, questions=questions, warnings=warnings)
