"""LoCoMo-Plus loader: LoCoMo's ten conversations and questions, plus one stitched conversation per cue.

Each of the 401 entries of ``locomo_plus.json`` (``cue_dialogue``, ``trigger_query``, ``time_gap``,
``relation_type``) becomes a group ``plus-<index>``: a copy of one LoCoMo conversation with the cue dialogue
inserted as a new session, stitched the way the benchmark's own scripts do (``data/build_conv.py`` of the
LoCoMo-Plus repository; our implementation):

* the trigger is asked a week after the conversation's last session; the cue comes ``time_gap`` before it
  (weeks are 7 days, months 30, years 365; a gap with no number of weeks, months or years, e.g. "several
  months later", counts as 0 days, as upstream, and puts the cue's turns just before the question), placed
  among the sessions by time (a tie goes after the session);
* ``A:`` lines are spoken by the conversation's ``speaker_a``, every other line by ``speaker_b``;
* the conversation is chosen per entry: ``assign="random"`` draws it with ``random.Random(seed).choice`` in
  entry order (``build_conv.py`` draws with an unseeded ``random.choice``: the seed is what makes ours
  reproducible, and it is part of the dataset config, hence of the build address); ``assign="cycle"`` takes
  conversation ``index % 10`` (``data/unified_input.py``).

The trigger is the question (category ``cognitive``), asked as a reply request; its "answer" is the cue
dialogue (what the judge checks the reply against), the cue's turns are its evidence. ``relation_type``,
``time_gap``, the cue and the source conversation are in ``Question.meta`` (never in an answer prompt).
"""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError, require
from mnemis.data.locomo import TURN_SPACING, load_locomo
from mnemis.data.sources import DataDirs, locate
from mnemis.types import Dataset, Episode, Question

CATEGORY = "cognitive"
SCORER = "locomo_plus_cognitive"
QUERY_DELAY = timedelta(days=7)
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "a": 1, "an": 1}
_GAP = re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a|an)\b\s*"
                  r"(weeks?|months?|years?)\b")
UNIT_DAYS = {"week": 7, "month": 30, "year": 365}
ASSIGN = ("random", "cycle")


def gap_days(time_gap: str) -> int:
    """Days of a ``time_gap`` such as "about six weeks later" (0 when it names no weeks, months or years)."""
    m = _GAP.search(time_gap.lower())
    if m is None:
        return 0
    num, unit = m.groups()
    count = int(num) if num.isdigit() else _WORDS[num]
    return count * UNIT_DAYS[unit.rstrip("s")]


def dialogue_lines(text: str, speaker_a: str, speaker_b: str) -> list[tuple[str, str]]:
    """``(speaker, text)`` of each ``A:`` / ``B:`` line (other lines are ignored, as upstream)."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line[:2] in ("A:", "B:"):
            out.append((speaker_a if line[0] == "A" else speaker_b, line[2:].strip()))
    return out


def assign_conversations(n: int, groups: list[str], *, assign: str = "random", seed: int = 0) -> list[str]:
    """The LoCoMo conversation of each of ``n`` entries."""
    if assign == "cycle":
        return [groups[i % len(groups)] for i in range(n)]
    if assign != "random":
        raise DataError("dataset.assign", f"unknown assignment {assign!r} (choose one of {', '.join(ASSIGN)})")
    rng = random.Random(seed)
    return [rng.choice(groups) for _ in range(n)]


def stitch(gid: str, base: list[Episode], cue: list[tuple[str, str]], days: int
           ) -> tuple[list[Episode], datetime, int]:
    """The episodes of one LoCoMo conversation (``base``) re-grouped as ``gid`` with the cue session inserted
    ``days`` before the question; returns the episodes, the question time and the cue's session number
    (sessions are renumbered 1.. in time order; the original turns keep their ``D<s>:<t>`` source ids)."""
    sessions: dict[int, list[Episode]] = {}
    for e in base:
        sessions.setdefault(e.session, []).append(e)
    order = sorted(sessions, key=lambda s: sessions[s][0].valid_at)  # stable: ties keep file order
    query = sessions[order[-1]][0].valid_at + QUERY_DELAY
    cue_at = min(query - timedelta(days=days), query - len(cue) * TURN_SPACING)  # a 0-day gap: just before it
    slot = sum(sessions[s][0].valid_at <= cue_at for s in order)  # the cue goes after every session not later
    out: list[Episode] = []
    cue_session = slot + 1
    for k in range(len(order) + 1):
        number = k + 1
        if k == slot:
            for t, (speaker, text) in enumerate(cue):
                sid = f"CUE:{t + 1}"
                out.append(Episode(id=Episode.make_id(gid, sid), group_id=gid, source_id=sid, name=f"Cue {t}",
                                   speaker=speaker, content=f"{speaker}: {text}", valid_at=cue_at + t * TURN_SPACING,
                                   session=number, turn=t, position=len(out)))
            continue
        for e in sessions[order[k if k < slot else k - 1]]:
            out.append(e.model_copy(update={"id": Episode.make_id(gid, e.source_id), "group_id": gid,
                                            "session": number, "position": len(out)}))
    return out, query, cue_session


def load_locomo_plus(path: str | Path | None = None, *, locomo_path: str | Path | None = None, seed: int = 0,
                     assign: str = "random", include_locomo: bool = True, download: bool = True,
                     dirs: DataDirs | None = None) -> Dataset:
    """LoCoMo (its ten conversations and 1,986 questions, when ``include_locomo``) plus the 401 stitched
    cognitive groups. ``path`` / ``locomo_path`` None: the pinned files from the data dirs."""
    plus_file = Path(path) if path else locate("locomo_plus", dirs, fetch_missing=download)
    locomo_file = Path(locomo_path) if locomo_path else locate("locomo", dirs, fetch_missing=download)
    locomo = load_locomo(locomo_file, dirs=dirs)
    if not plus_file.exists():
        raise DataError(str(plus_file), "LoCoMo-Plus file not found (mnemis data fetch locomo_plus)")
    try:
        entries = json.loads(plus_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(str(plus_file), f"malformed JSON: {exc}") from None
    if not isinstance(entries, list):
        raise DataError(str(plus_file), "top level must be a list of entries")
    convs = assign_conversations(len(entries), list(locomo.groups), assign=assign, seed=seed)
    speakers = _speakers(locomo_file)
    episodes = list(locomo.episodes) if include_locomo else []
    questions = list(locomo.questions) if include_locomo else []
    groups = list(locomo.groups) if include_locomo else []
    by_group: dict[str, list[Episode]] = {}
    for e in locomo.episodes:
        by_group.setdefault(e.group_id, []).append(e)
    width = len(str(len(entries) - 1))
    for i, (entry, conv) in enumerate(zip(entries, convs)):
        where = f"{plus_file.name}[{i}]"
        gid = f"plus-{i:0{width}d}"
        a, b = speakers[conv]
        cue = dialogue_lines(require(entry, "cue_dialogue", str, where), a, b)
        trigger = dialogue_lines(require(entry, "trigger_query", str, where), a, b)
        time_gap = require(entry, "time_gap", str, where)
        if not cue:
            raise DataError(f"{where}.cue_dialogue", "no 'A:' or 'B:' line")
        if len(trigger) != 1:
            raise DataError(f"{where}.trigger_query", f"expected one 'A:' or 'B:' line, got {len(trigger)}")
        eps, asked, cue_session = stitch(gid, by_group[conv], cue, gap_days(time_gap))
        groups.append(gid)
        episodes.extend(eps)
        questions.append(_question(gid, entry, where, trigger[0], cue, eps, asked, conv, cue_session, (a, b)))
    return Dataset(name="locomo_plus", groups=groups, episodes=episodes, questions=questions,
                   warnings=dict(locomo.warnings))


def _speakers(locomo_file: Path) -> dict[str, tuple[str, str]]:
    """``speaker_a``, ``speaker_b`` of each LoCoMo conversation (the file was validated by ``load_locomo``)."""
    raw = json.loads(Path(locomo_file).read_text(encoding="utf-8"))
    return {s["sample_id"]: (s["conversation"]["speaker_a"], s["conversation"]["speaker_b"]) for s in raw}


def _question(gid: str, entry: dict[str, Any], where: str, trigger: tuple[str, str], cue: list[tuple[str, str]],
              eps: list[Episode], asked: datetime, conv: str, cue_session: int, pair: tuple[str, str]) -> Question:
    speaker, text = trigger
    other = pair[1] if speaker == pair[0] else pair[0]
    relation = entry.get("relation_type")
    if relation is not None and not isinstance(relation, str):
        raise DataError(f"{where}.relation_type", f"expected str, got {type(relation).__name__}")
    cue_text = "\n".join(f"{s}: {t}" for s, t in cue)
    return Question(
        id=f"{gid}:q0", group_id=gid, category=CATEGORY, answer=cue_text, question_date=asked, index=0,
        question=(f"{speaker} says: \"{text}\" Write {other}'s reply to this message, drawing on anything "
                  "relevant from their past conversations."),
        evidence=[e.id for e in eps if e.source_id.startswith("CUE:")],
        meta={"scorer": SCORER, "relation_type": relation, "time_gap": entry["time_gap"], "cue": cue_text,
              "trigger": f"{speaker}: {text}", "locomo_group": conv, "cue_session": cue_session},
    )
