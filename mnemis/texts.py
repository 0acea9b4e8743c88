"""How every stored item becomes text: the words its embedding and its BM25 index are built from.

Shared by the writing side (:mod:`mnemis.ingest.embed_items` embeds these texts) and the reading side
(:mod:`mnemis.index.catalog` indexes them for BM25, :mod:`mnemis.retrieve.system1` picks the recipes), so both
routes see the same words.

- ``episode``: ``"<speaker>: <text>"`` (the stored content), optionally repeated (``self_weight``),
  prefixed with the session date (``date=True``) and followed by the neighbouring turns of the same
  session (``window`` turns before and after, after a ``" | "`` separator, current turn first so a
  256-token encoder never truncates it). Embeddings default to :data:`EMBED_RECIPE` (the turn alone),
  BM25 to :data:`BM25_RECIPE`; both measured with ``experiments/bench/system1_recall.py``.
- ``entity_summary``: ``"<name>: <summary>"`` (the name alone when there is no summary); ``entity_name``:
  the name. ``fact``: the fact sentence. ``category``: ``"<name>: <summary>"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mnemis.types import Category, Entity, Episode, Fact

KINDS = ("episode", "entity_name", "entity_summary", "fact", "category")


@dataclass(frozen=True)
class EpisodeRecipe:
    """How an episode becomes text. ``window``: neighbouring turns on each side (same session);
    ``date``: prefix the session date; ``neighbour_chars``: cap on each neighbour's characters;
    ``self_weight``: times the turn itself is repeated (field weighting for BM25: the turn's own words
    count more than its neighbours')."""

    window: int = 0
    date: bool = False
    neighbour_chars: int = 200
    self_weight: int = 1

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


# Measured on LoCoMo (experiments/bench/system1_recall.py): MiniLM does best on the turn alone, BM25 on the
# turn counted twice plus the session date and two neighbouring turns on each side.
EMBED_RECIPE = EpisodeRecipe()
BM25_RECIPE = EpisodeRecipe(window=2, date=True, self_weight=2)


def episode_texts(episodes: Sequence[Episode], recipe: EpisodeRecipe = EMBED_RECIPE) -> list[str]:
    """Texts of the episodes of one group (any order; neighbours are looked up by session and turn)."""
    by_session: dict[tuple[str, int], list[Episode]] = {}
    for e in episodes:
        by_session.setdefault((e.group_id, e.session), []).append(e)
    where: dict[str, tuple[list[Episode], int]] = {}
    for turns in by_session.values():
        turns.sort(key=lambda e: (e.turn, e.position))
        for i, e in enumerate(turns):
            where[e.id] = (turns, i)
    out = []
    for e in episodes:
        text = " ".join([e.content] * max(1, recipe.self_weight))
        if recipe.date:
            text = f"[{e.valid_at:%d %B %Y}] {text}"
        if recipe.window > 0:
            turns, i = where[e.id]
            near = turns[max(0, i - recipe.window) : i] + turns[i + 1 : i + 1 + recipe.window]
            if near:
                text += " | " + " | ".join(n.content[: recipe.neighbour_chars] for n in near)
        out.append(text)
    return out


def entity_texts(entities: Sequence[Entity], *, with_summary: bool = True) -> list[str]:
    return [f"{e.name}: {e.summary}" if with_summary and e.summary else e.name for e in entities]


def fact_texts(facts: Sequence[Fact]) -> list[str]:
    return [f.fact for f in facts]


def category_texts(categories: Sequence[Category]) -> list[str]:
    return [f"{c.name}: {c.summary}" if c.summary else c.name for c in categories]


def item_texts(store: Any, group_id: str, kind: str, recipe: EpisodeRecipe = EMBED_RECIPE) -> tuple[list[str], list[str]]:
    """``(ids, texts)`` of every item of one group for an embedding kind, in store order (``store``: anything
    with the graph store's ``episodes`` / ``entities`` / ``facts`` / ``categories`` readers)."""
    if kind == "episode":
        eps = store.episodes(group_id)
        return [e.id for e in eps], episode_texts(eps, recipe)
    if kind in ("entity_name", "entity_summary"):
        ents = store.entities(group_id)
        return [e.id for e in ents], entity_texts(ents, with_summary=kind == "entity_summary")
    if kind == "fact":
        facts = store.facts(group_id)
        return [f.id for f in facts], fact_texts(facts)
    if kind == "category":
        cats = store.categories(group_id)
        return [c.id for c in cats], category_texts(cats)
    raise ValueError(f"unknown embedding kind {kind!r} (one of {KINDS})")
