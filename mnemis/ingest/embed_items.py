"""Embed every stored item whose embedding is missing (or whose text recipe changed), batched across groups.

The texts come from :mod:`mnemis.texts` (also used for BM25 by :mod:`mnemis.index.catalog`, so both routes
see the same words):

- ``episode``: ``"<speaker>: <text>"`` (the stored content), optionally repeated (``self_weight``),
  prefixed with the session date (``date=True``) and followed by the neighbouring turns of the same
  session (``window`` turns before and after, after a ``" | "`` separator, current turn first so a
  256-token encoder never truncates it). Embeddings default to :data:`EMBED_RECIPE` (the turn alone),
  BM25 (:mod:`mnemis.index.catalog`) to :data:`BM25_RECIPE`; both measured with
  ``experiments/bench/system1_recall.py``.
- ``entity_summary``: ``"<name>: <summary>"`` (the name alone when there is no summary); ``entity_name``:
  the name. ``fact``: the fact sentence. ``category``: ``"<name>: <summary>"``.

The recipe and the embedder's ``model_id`` are recorded per (group, kind) in the store's meta table; a
change re-embeds that group's items of that kind. With ``window > 0`` a newly added episode also
re-embeds the ``window`` episodes before it in its session (their context changed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np

from mnemis.models.protocols import Embedder
from mnemis.store.sqlite import GraphStore
from mnemis.texts import EMBED_RECIPE, KINDS, EpisodeRecipe, item_texts
from mnemis.types import Episode


def _recipe_tag(embedder: Embedder, kind: str, recipe: EpisodeRecipe) -> str:
    body = {"model": embedder.model_id, "kind": kind, "recipe": recipe.key() if kind == "episode" else "v1"}
    return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _stale_neighbours(store: GraphStore, group_id: str, missing: set[str], window: int) -> set[str]:
    """Episodes whose neighbour context includes a missing (new) episode."""
    if window <= 0 or not missing:
        return set()
    out: set[str] = set()
    by_session: dict[int, list[Episode]] = {}
    for e in store.episodes(group_id):
        by_session.setdefault(e.session, []).append(e)
    for turns in by_session.values():
        turns.sort(key=lambda e: (e.turn, e.position))
        for i, e in enumerate(turns):
            if e.id in missing:
                out.update(t.id for t in turns[max(0, i - window) : i + window + 1])
    return out


def embed_missing(
    store: GraphStore,
    embedder: Embedder,
    group_ids: Sequence[str] | None = None,
    kinds: Sequence[str] = ("episode",),
    *,
    batch_size: int = 8192,
    recipe: EpisodeRecipe = EMBED_RECIPE,
) -> dict[str, int]:
    """Embed the items that lack an up-to-date embedding and store them.

    Args:
        store: the graph store (embeddings are written with ``put_embeddings``).
        embedder: document side of the embedder is used (``kind="document"``).
        group_ids: groups to cover (default: every group with episodes).
        kinds: embedding kinds (see :data:`KINDS`).
        batch_size: texts per ``encode`` call; items of all groups share calls (one call per kind
            whenever the pending texts fit).
        recipe: episode text recipe (default: the turn alone, :data:`EMBED_RECIPE`).

    Returns:
        Number of vectors written per kind.
    """
    groups = list(store.groups() if group_ids is None else group_ids)
    written: dict[str, int] = {}
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown embedding kind {kind!r} (one of {KINDS})")
        tag = _recipe_tag(embedder, kind, recipe)
        pending: list[tuple[str, str, str]] = []  # (group, id, text)
        for g in groups:
            ids, texts = item_texts(store, g, kind, recipe)
            meta_key = f"embedding_recipe:{g}:{kind}"
            if store.get_meta(meta_key) != tag:
                todo = set(ids)
            else:
                have = store.embedded_ids(g, kind)
                todo = {i for i in ids if i not in have}
                if kind == "episode":
                    todo |= _stale_neighbours(store, g, todo, recipe.window)
            pending += [(g, i, t) for i, t in zip(ids, texts) if i in todo]
        n = 0
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            vecs = np.asarray(embedder.encode([t for _, _, t in chunk], kind="document"), dtype=np.float32)
            if vecs.shape[0] != len(chunk):
                raise RuntimeError(f"embedder returned {vecs.shape[0]} vectors for {len(chunk)} texts")
            by_group: dict[str, list[int]] = {}
            for row, (g, _, _) in enumerate(chunk):
                by_group.setdefault(g, []).append(row)
            with store.transaction():
                for g, rows in by_group.items():
                    store.put_embeddings(g, kind, [chunk[r][1] for r in rows], vecs[rows])
            n += len(chunk)
        with store.transaction():
            for g in groups:
                store.set_meta(f"embedding_recipe:{g}:{kind}", tag)
        written[kind] = n
    return written
