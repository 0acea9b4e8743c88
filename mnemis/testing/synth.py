"""Synthetic LongMemEval-shaped workloads (official JSON schema) with controllable filler-session overlap.

LongMemEval-S builds each question's haystack from a shared pool of filler sessions plus the question's
own evidence sessions, so the same filler session appears in many haystacks. ``make_lme`` reproduces
that shape: a pool of ``pool_size`` filler sessions (each with a fixed id and date, as in the official
file), and per question ``sessions_per_haystack`` sessions, of which a share ``overlap`` is drawn from
the pool and the rest are fresh, plus one evidence session holding the answer. Sessions are sorted by
date. Everything is seeded; the output loads with ``mnemis.data.longmemeval.load_longmemeval``.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

QUESTION_TYPES = ("single-session-user", "multi-session", "single-session-preference", "temporal-reasoning",
                  "knowledge-update", "single-session-assistant")
_PEOPLE = ("Alice", "Bruno", "Chiara", "Deepak", "Elena", "Farid", "Greta", "Hiro", "Ingrid", "Jonas", "Kemal",
           "Lucia", "Marek", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tariq")
_PLACES = ("Lisbon", "Denver", "Kyoto", "Oslo", "Nairobi", "Austin", "Porto", "Seoul", "Zurich", "Lima", "Hanoi",
           "Dublin", "Quebec", "Tallinn", "Perth", "Boston")
_THINGS = ("pottery", "sourdough", "guitar", "marathon", "camera", "garden", "chess", "kayak", "novel", "piano",
           "budget", "recipe", "telescope", "bicycle", "podcast", "painting")
_FMT = "%Y/%m/%d (%a) %H:%M"
T0 = datetime(2023, 1, 2, 9, 0)


@dataclass(frozen=True)
class SynthSpec:
    """Sizes of a synthetic workload (``turns_per_session`` counts user + assistant turns)."""

    groups: int = 500
    sessions_per_haystack: int = 10
    pool_size: int = 400
    overlap: float = 0.8
    turns_per_session: int = 8
    words_per_turn: int = 18
    seed: int = 0

    def __post_init__(self) -> None:
        if self.groups < 1 or self.sessions_per_haystack < 1 or self.turns_per_session < 2:
            raise ValueError("groups, sessions_per_haystack >= 1 and turns_per_session >= 2 required")
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"overlap must be in [0, 1], got {self.overlap}")
        if self.overlap > 0 and self.pool_size < 1:
            raise ValueError("overlap > 0 needs pool_size >= 1")


def _sentence(rng: random.Random, words: int) -> str:
    person, place, thing = rng.choice(_PEOPLE), rng.choice(_PLACES), rng.choice(_THINGS)
    filler = " ".join(rng.choice(("really", "maybe", "today", "again", "with", "about", "the", "some", "new",
                                  "old", "plan", "idea", "week", "time", "tips", "help")) for _ in range(words))
    return f"I talked with {person} in {place} about my {thing}, {filler}."


def _session(rng: random.Random, turns: int, words: int, answer: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in range(turns):
        role = "user" if t % 2 == 0 else "assistant"
        text = _sentence(rng, words)
        turn: dict[str, Any] = {"role": role, "content": text if role == "user" else f"Sure. {text}"}
        if answer is not None and t == 0:
            turn = {"role": "user", "content": f"By the way, my answer is {answer}. {text}", "has_answer": True}
        out.append(turn)
    return out


def make_lme(spec: SynthSpec) -> list[dict[str, Any]]:
    """The workload as a list of official LongMemEval question instances."""
    rng = random.Random(spec.seed)
    pool = [(f"pool_{k:05d}", T0 + timedelta(hours=7 * k),
             _session(random.Random(f"{spec.seed}:pool:{k}"), spec.turns_per_session, spec.words_per_turn))
            for k in range(spec.pool_size)]
    n_shared = round(spec.overlap * (spec.sessions_per_haystack - 1))
    items = []
    for g in range(spec.groups):
        qtype = QUESTION_TYPES[g % len(QUESTION_TYPES)]
        qid = f"synth_{g:05d}" + ("_abs" if g % 30 == 29 else "")
        answer = rng.choice(_THINGS) + f"-{g}"
        grng = random.Random(f"{spec.seed}:group:{g}")
        chosen = grng.sample(pool, min(n_shared, len(pool))) if n_shared else []
        own = [(f"own_{g:05d}_{k}", T0 + timedelta(hours=7 * grng.randrange(spec.pool_size * 2 + 1), minutes=17),
                _session(grng, spec.turns_per_session, spec.words_per_turn))
               for k in range(spec.sessions_per_haystack - 1 - len(chosen))]
        evidence = (f"answer_{g:05d}", T0 + timedelta(hours=7 * grng.randrange(spec.pool_size * 2 + 1), minutes=31),
                    _session(grng, spec.turns_per_session, spec.words_per_turn, answer=answer))
        sessions = sorted([*chosen, *own, evidence], key=lambda s: (s[1], s[0]))
        last = max(s[1] for s in sessions)
        items.append({
            "question_id": qid, "question_type": qtype, "question": f"What is my answer number {g}?",
            "answer": answer, "question_date": (last + timedelta(days=1)).strftime(_FMT),
            "haystack_session_ids": [s[0] for s in sessions],
            "haystack_dates": [s[1].strftime(_FMT) for s in sessions],
            "haystack_sessions": [s[2] for s in sessions], "answer_session_ids": [evidence[0]],
        })
    return items


def write_lme(spec: SynthSpec, path: str | Path) -> Path:
    """Write ``make_lme(spec)`` as JSON to ``path`` (and ``<path>.spec.json`` next to it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(make_lme(spec)), encoding="utf-8")
    path.with_name(path.name + ".spec.json").write_text(json.dumps(asdict(spec), indent=2))
    return path


def overlap_stats(items: list[dict[str, Any]]) -> dict[str, Any]:
    """How often sessions recur across haystacks: total vs distinct session ids and turns."""
    total = sum(len(i["haystack_session_ids"]) for i in items)
    distinct: dict[str, int] = {}
    for i in items:
        for sid, sess in zip(i["haystack_session_ids"], i["haystack_sessions"]):
            distinct[sid] = len(sess)
    turns = sum(len(s) for i in items for s in i["haystack_sessions"])
    return {"groups": len(items), "session_slots": total, "distinct_sessions": len(distinct), "turns": turns,
            "distinct_turns": sum(distinct.values()), "session_repeat_factor": total / max(len(distinct), 1)}
