"""Mem0 search: the ``k`` stored memories closest to each question (cosine over their embeddings),
rendered with their timestamps for the shared answerer.

Hits are ``kind="fact"`` (a memory is a free-text fact); the source episodes of the retrieved memories
are added as ``kind="episode"`` hits so evidence recall can be measured like for the other methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemis.baselines.mem0.store import Mem0Store, Memory
from mnemis.eval.render import format_timestamp
from mnemis.types import Hit, Question, RetrievedContext


def search_memories(store: Mem0Store, embedder: Any, questions: Sequence[Question], *, k: int = 10
                    ) -> list[RetrievedContext]:
    """Top-``k`` live memories of each question's group (one ``encode`` for all questions)."""
    if not questions:
        return []
    qvecs = embedder.encode([q.question for q in questions], kind="query")
    cache: dict[str, tuple[list[Memory], np.ndarray | None]] = {}
    out = []
    for q, qv in zip(questions, qvecs):
        if q.group_id not in cache:
            mems = store.memories(q.group_id)
            cache[q.group_id] = (mems, np.stack([m.vec for m in mems]) if mems else None)
        mems, mat = cache[q.group_id]
        ctx = RetrievedContext(question_id=q.id, group_id=q.group_id)
        if mat is None or k <= 0:
            ctx.flags.append("mem0:no_memories")
            out.append(ctx)
            continue
        scores = mat @ np.asarray(qv, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        ctx.facts = [Hit(id=mems[j].id, kind="fact", score=float(scores[j]), scores={"mem0": float(scores[j])})
                     for j in order]
        best: dict[str, float] = {}
        for j in order:
            for e in mems[j].episode_ids:
                best.setdefault(e, float(scores[j]))
        ctx.episodes = [Hit(id=e, kind="episode", score=s, scores={"mem0": s}) for e, s in best.items()]
        out.append(ctx)
    return out


def memory_line(m: Memory) -> str:
    """``[2023/05/08 (Mon) 13:56] text`` (time of the latest message that wrote the memory)."""
    return f"[{format_timestamp(m.updated_at)}] {m.text}"


def render_memories(store: Mem0Store, contexts: Sequence[RetrievedContext]) -> list[str]:
    """One string per context: its memories, best first, one timestamped line each."""
    out = []
    groups: dict[str, dict[str, Memory]] = {}
    for ctx in contexts:
        if ctx.group_id not in groups:
            groups[ctx.group_id] = {m.id: m for m in store.memories(ctx.group_id, include_deleted=True)}
        by_id = groups[ctx.group_id]
        out.append("\n".join(memory_line(by_id[h.id]) for h in ctx.facts if h.id in by_id))
    return out
