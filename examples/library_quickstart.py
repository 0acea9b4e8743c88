"""Mnemis as a library: remember a short chat, organise it into a hierarchy, search it, answer from it.

    python examples/library_quickstart.py                  # the CPU defaults (tiny models from PyPI)
    python examples/library_quickstart.py llm=qwen3_8b_vllm embedder=qwen3_8b reranker=qwen3_8b   # a GPU

Arguments are config overrides on top of ``experiment=quickstart`` (as for ``mnemis run``). The memory is
kept in ``runs/examples/library.db``; a second run reuses it (the chat is added once).
"""

from __future__ import annotations

import sys
from typing import Any

from mnemis import Memory

GROUP = "demo"
CHAT = [  # a short chat of our own: two people, two days
    {"speaker": "Maya", "text": "I finally signed up for the pottery class at the community center.",
     "time": "2024-03-04T18:02"},
    {"speaker": "Leo", "text": "Nice! Is that the one Priya teaches on Thursdays?", "time": "2024-03-04T18:03"},
    {"speaker": "Maya", "text": "Yes, Priya runs it. My first bowl came out lopsided.", "time": "2024-03-04T18:05"},
    {"speaker": "Leo", "text": "I am flying to Lisbon next week for a conference.", "time": "2024-03-05T09:12"},
    {"speaker": "Maya", "text": "Bring me back some pastel de nata from Lisbon!", "time": "2024-03-05T09:14"},
    {"speaker": "Leo", "text": "Deal. My sister Ana lives there, so I will stay with her.", "time": "2024-03-05T09:16"},
]
QUESTIONS = ["Who teaches Maya's pottery class?", "Where does Leo's sister live?"]


def run(memory: Memory) -> dict[str, Any]:
    """Add (once), organise, search by each route and answer; prints what it did and returns it."""
    if GROUP not in memory.groups():
        memory.add(GROUP, CHAT)  # one batch: every extraction stage sees all six messages together
    counts = memory.counts(GROUP)
    print(f"memory: {counts['episodes']} messages, {counts['entities']} entities, {counts['facts']} facts")
    hierarchy = memory.organize()[GROUP]
    print(f"hierarchy: {hierarchy['layers']} layer(s) over {hierarchy['entities']} entities")
    system1 = memory.search(QUESTIONS, group=GROUP, route="system1")
    fused = memory.search(QUESTIONS, group=GROUP)  # System-1 + System-2, fused by the configured scorer
    answers = memory.answer(QUESTIONS, group=GROUP)
    for q, s1, ctx, a in zip(QUESTIONS, system1.contexts, fused.contexts, answers):
        print(f"\nQ: {q}\n  System-1 top episodes: {[h.id for h in s1.episodes[:3]]}"
              f"\n  fused: {len(ctx.episodes)} episodes, {len(ctx.facts)} facts, {len(ctx.entities)} entities"
              f"\n  A: {a.answer or a.error}")
    return {"counts": counts, "hierarchy": hierarchy, "system1": system1, "fused": fused, "answers": answers}


def main(argv: list[str]) -> None:
    with Memory.from_config(["experiment=quickstart", *argv], path="runs/examples/library.db") as memory:
        run(memory)


if __name__ == "__main__":
    main(sys.argv[1:])
