"""Mem0 search: the ``k`` stored memories closest to each question (cosine over their embeddings) in
each memory store of the question's group, rendered with their timestamps for the answerer.

A group has one store (``per_speaker: false``) or one per speaker, each searched with its own top-``k``
(as the Mem0 LoCoMo evaluation does: two searches of ``k`` = 30, so up to 60 memories per question).
Hits are ``kind="fact"`` (a memory is a free-text fact), in store order then best first; the source
episodes of the retrieved memories are added as ``kind="episode"`` hits so evidence recall can be
measured like for the other methods. With one store per speaker the rendering has one section per
speaker (``Memories for Caroline:``), each memory on its own timestamped line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemis.baselines.mem0.store import Mem0Store, Memory
from mnemis.render import format_timestamp
from mnemis.types import Hit, Question, RetrievedContext


@dataclass(frozen=True)
class StoreRef:
    """One memory store of a group: its key in :class:`Mem0Store` and whose memory it is (None = the
    whole conversation)."""

    key: str
    speaker: str | None = None


def search_memories(store: Mem0Store, embedder: Any, questions: Sequence[Question],
                    layout: Mapping[str, Sequence[StoreRef]], *, k: int = 10) -> list[RetrievedContext]:
    """Top-``k`` live memories of each store of each question's group (one ``encode`` for all questions);
    ``layout`` maps a group to its stores."""
    if not questions:
        return []
    qvecs = embedder.encode([q.question for q in questions], kind="query")
    cache: dict[str, tuple[list[Memory], np.ndarray | None]] = {}
    out = []
    for q, qv in zip(questions, qvecs):
        ctx = RetrievedContext(question_id=q.id, group_id=q.group_id)
        best: dict[str, float] = {}
        for ref in layout.get(q.group_id, ()):
            if ref.key not in cache:
                mems = store.memories(ref.key)
                cache[ref.key] = (mems, np.stack([m.vec for m in mems]) if mems else None)
            mems, mat = cache[ref.key]
            if mat is None or k <= 0:
                continue
            scores = mat @ np.asarray(qv, dtype=np.float32)
            order = np.argsort(-scores, kind="stable")[:k]
            ctx.facts += [Hit(id=mems[j].id, kind="fact", score=float(scores[j]), scores={"mem0": float(scores[j])})
                          for j in order]
            for j in order:
                for e in mems[j].episode_ids:
                    best[e] = max(best.get(e, -1.0), float(scores[j]))
        if not ctx.facts:
            ctx.flags.append("mem0:no_memories")
        ctx.episodes = [Hit(id=e, kind="episode", score=s, scores={"mem0": s}) for e, s in best.items()]
        out.append(ctx)
    return out


def memory_line(m: Memory) -> str:
    """``[2023/05/08 (Mon) 13:56] text`` (time of the latest message that wrote the memory)."""
    return f"[{format_timestamp(m.updated_at)}] {m.text}"


def render_memories(store: Mem0Store, contexts: Sequence[RetrievedContext],
                    layout: Mapping[str, Sequence[StoreRef]], *, extra: Sequence[Mapping[str, str]] | None = None,
                    extra_title: str = "Relations") -> list[str]:
    """One string per context. One store without speaker and no ``extra``: its memories, best first, one
    timestamped line each. Otherwise a ``Memories for <speaker>:`` (or ``Memories:``) section per store.
    ``extra[i]`` adds sections (Mem0g's relations): under key ``<store key>`` as ``<extra_title> for
    <speaker>:`` right after that store's memories, under key ``""`` as ``<extra_title>:`` at the end."""
    by_key: dict[str, dict[str, Memory]] = {}
    out = []
    for i, ctx in enumerate(contexts):
        refs = list(layout.get(ctx.group_id, ()))
        more = dict(extra[i]) if extra is not None else None
        sections = []
        for ref in refs:
            if ref.key not in by_key:
                by_key[ref.key] = {m.id: m for m in store.memories(ref.key, include_deleted=True)}
            body = "\n".join(memory_line(by_key[ref.key][h.id]) for h in ctx.facts if h.id in by_key[ref.key])
            if ref.speaker is None and more is None:
                sections.append(body)
                continue
            who = f" for {ref.speaker}" if ref.speaker else ""
            sections.append(f"Memories{who}:\n{body or '(none)'}")
            if more is not None and ref.key in more and ref.speaker:
                sections.append(f"{extra_title}{who}:\n{more[ref.key] or '(none)'}")
        if more is not None and "" in more:
            sections.append(f"{extra_title}:\n{more[''] or '(none)'}")
        out.append("\n\n".join(sections))
    return out
