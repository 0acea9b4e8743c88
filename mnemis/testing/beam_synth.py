"""A synthetic conversation with the shape of BEAM's 10M scale, for scale runs where the real chats are absent.

``synthesize(folder, tokens, chars_per_token)`` writes ``folder/1/chat.json`` (ten ``plan-N`` parts of batches of
30 user/assistant turns, a ``time_anchor`` on each batch's first message, 3 to 10 days apart, the ``->-> i,j``
markers) and ``folder/1/probing_questions.json`` (2 questions per ability with rubrics, reference answers and
message ids). User messages are 120-520 characters and assistant messages 2,400-5,500 (BEAM 100K's means are
~320 and ~3,950); sentences name two of 4,000 made-up names drawn Zipf-weighted, so a core of names recurs and a
long tail does not. Everything is seeded; the result loads with ``mnemis.data.beam.load_beam(scale="10M")``.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mnemis.data.beam import ABILITIES, reference_key

SYLL = ("ka", "lo", "mir", "ven", "tas", "ro", "qui", "del", "bra", "sen", "tor", "ela", "nim", "zu", "pha", "gor",
        "lia", "mon", "dre", "vik", "sol", "ber", "ta", "ny", "chi", "val", "ros", "ein", "ul", "fa")
WORDS = ("the", "and", "we", "to", "set", "up", "with", "for", "next", "step", "check", "after", "project", "plan",
         "budget", "week", "test", "deploy", "update", "module", "function", "value", "error", "route", "data",
         "simple", "should", "could", "then", "also", "make", "sure", "that", "this", "into", "from", "when",
         "each", "run", "build", "change", "fix", "review", "schedule", "deadline", "version", "config", "user")
PLANS, TURNS_PER_BATCH, NAMES = 10, 30, 4000


def _names(n: int, rng: random.Random) -> list[str]:
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice(SYLL) for _ in range(rng.randint(2, 3))).capitalize()] = None
    return list(out)


def _text(rng: random.Random, chars: int, names: list[str], cum: list[float]) -> str:
    parts, size = [], 0
    while size < chars:
        who = rng.choices(names, cum_weights=cum, k=2)
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 18)))
        s = f"{who[0]} {body} {who[1]} {rng.choice(WORDS)}."
        parts.append(s)
        size += len(s) + 1
    return " ".join(parts)


def synthesize(folder: Path, tokens: int, chars_per_token: float | Callable[[list[str]], float],
               seed: int = 0) -> dict[str, Any]:
    """A conversation of about ``tokens`` tokens in ``folder/1/``; ``chars_per_token`` may be a function of sample
    texts (a tokenizer's count) measured on this generator's own text. Returns its counts."""
    rng = random.Random(seed)
    names = _names(NAMES, rng)
    cum = list(itertools.accumulate(1.0 / (k + 1) for k in range(len(names))))  # Zipf (cumulative weights)
    if callable(chars_per_token):
        chars_per_token = chars_per_token([_text(random.Random(k), 2000, names, cum) for k in range(50)])
    per_plan = tokens * chars_per_token / PLANS
    plans: list[list[dict]] = [[] for _ in range(PLANS)]
    mid, chars, day = 0, 0, datetime(2024, 1, 8)
    for p in range(PLANS):
        plan_chars, batch_no = 0, 0
        while plan_chars < per_plan:
            batch_no += 1
            day += timedelta(days=rng.randint(3, 10))
            turns = []
            for t in range(TURNS_PER_BATCH):
                u = {"role": "user", "id": mid, "content": _text(rng, rng.randint(120, 520), names, cum)
                     + f" ->-> {batch_no},{t + 1}", "index": f"{batch_no},{t + 1}", "question_type": "main_question"}
                if t == 0:
                    u["time_anchor"] = day.strftime("%B-%d-%Y")
                a = {"role": "assistant", "id": mid + 1, "content": _text(rng, rng.randint(2400, 5500), names, cum)}
                turns.append([u, a])
                mid += 2
                plan_chars += len(u["content"]) + len(a["content"])
            plans[p].append({"batch_number": batch_no, "time_anchor": None, "turns": turns})
        chars += plan_chars
    conv = Path(folder) / "1"
    conv.mkdir(parents=True, exist_ok=True)
    (conv / "chat.json").write_text(json.dumps([{f"plan-{p + 1}": b} for p, b in enumerate(plans)]))
    qs: dict[str, list[dict[str, Any]]] = {}
    for ab in ABILITIES:
        qs[ab] = []
        for _ in range(2):
            ids = sorted(rng.sample(range(0, mid, 2), 3))
            q = {"question": f"What did I say about {rng.choice(names[:200])} and {rng.choice(names[:200])}?",
                 "rubric": [f"LLM response should state: {rng.choice(names[:200])}" for _ in range(2)],
                 "source_chat_ids": ids, "difficulty": "medium"}
            q[reference_key(ab)] = f"A synthetic reference answer naming {rng.choice(names[:50])}."
            if ab == "event_ordering":
                q["rubric"] = [f"{rng.choice(names[:300])} step" for _ in range(4)]
            qs[ab].append(q)
    (conv / "probing_questions.json").write_text(json.dumps(qs))
    return {"messages": mid, "chars": chars, "names": len(names), "plans": PLANS,
            "batches": sum(len(p) for p in plans), "questions": 2 * len(ABILITIES)}
