"""Evidence recall per retrieval route (System-1, System-2, fused), per question category.

For one final context, an episode is **reachable** when the context returns it directly, or returns
an entity that it mentions (``MENTIONS``), or returns a fact extracted from it (``Fact.episode_ids``).
Categories count only through nothing (they carry no episodes of their own). Two numbers per question
with gold evidence:

- ``direct`` = |gold ∩ returned episodes| / |gold|;
- ``reachable`` = |gold ∩ reachable episodes| / |gold|.

Means per category and ``overall``; questions without gold evidence are counted in ``skipped``. Each route's
returned episodes, ranked by their final score, also get ``recall@k`` / ``hit@k`` / ``mrr``
(:func:`mnemis.eval.recall.evidence_recall`, k = 5, 10, 20): the numbers the report's recall@k plot draws.
A route that returns fewer than k episodes has recall@k equal to its ``direct`` recall.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from mnemis.store.sqlite import GraphStore
from mnemis.types import Question, RetrievedContext


def reachable_episodes(
    ctx: RetrievedContext,
    mentions_of: Mapping[str, Iterable[str]],
    episodes_of_fact: Mapping[str, Iterable[str]],
) -> set[str]:
    """Episode ids reachable from ``ctx`` (direct, via entity mentions, via fact provenance)."""
    out = {h.id for h in ctx.episodes}
    for h in ctx.entities:
        if h.kind == "entity":
            out.update(mentions_of.get(h.id, ()))
    for h in ctx.facts:
        out.update(episodes_of_fact.get(h.id, ()))
    return out


def recall(gold: Iterable[str], found: set[str]) -> float | None:
    """Share of ``gold`` in ``found``; None when there is no gold evidence."""
    wanted = set(gold)
    return len(wanted & found) / len(wanted) if wanted else None


def recall_table(
    categories: Sequence[str], direct: Sequence[float | None], reachable: Sequence[float | None]
) -> dict[str, dict[str, float]]:
    """Means of per-question ``direct`` / ``reachable`` recall per category and ``overall``."""
    if not (len(categories) == len(direct) == len(reachable)):
        raise ValueError("categories, direct and reachable must have the same length")
    acc: dict[str, dict[str, float]] = {}
    for cat, d, r in zip(categories, direct, reachable):
        for key in (cat, "overall"):
            a = acc.setdefault(key, {"direct": 0.0, "reachable": 0.0, "n": 0, "skipped": 0})
            if d is None or r is None:
                a["skipped"] += 1
                continue
            a["direct"] += d
            a["reachable"] += r
            a["n"] += 1
    out = {}
    for key in sorted(acc, key=lambda k: (k == "overall", k)):
        a = acc[key]
        n = a["n"]
        out[key] = {"direct": a["direct"] / n if n else 0.0, "reachable": a["reachable"] / n if n else 0.0,
                    "n": int(n), "skipped": int(a["skipped"])}
    return out


def route_recall(
    store: GraphStore, questions: Sequence[Question], routes: Mapping[str, Sequence[RetrievedContext]]
) -> dict[str, dict[str, dict[str, float]]]:
    """``{route: {category: {"direct", "reachable", "n", "skipped"}}}`` for every route's contexts.

    ``routes`` maps a name (``system1``, ``system2``, ``fused`` ...) to contexts aligned with
    ``questions``. Mentions and fact provenance are read once per group.
    """
    for name, ctxs in routes.items():
        if len(ctxs) != len(questions):
            raise ValueError(f"route {name!r}: {len(ctxs)} contexts for {len(questions)} questions")
    ent_ids: dict[str, set[str]] = {}
    fact_ids: dict[str, set[str]] = {}
    for ctxs in routes.values():
        for c in ctxs:
            ent_ids.setdefault(c.group_id, set()).update(h.id for h in c.entities if h.kind == "entity")
            fact_ids.setdefault(c.group_id, set()).update(h.id for h in c.facts)
    mentions_of: dict[str, dict[str, set[str]]] = {}
    episodes_of_fact: dict[str, dict[str, list[str]]] = {}
    for gid in set(ent_ids) | set(fact_ids):
        m: dict[str, set[str]] = {}
        if ent_ids.get(gid):
            for men in store.mentions(gid, entity_ids=sorted(ent_ids[gid])):
                m.setdefault(men.entity_id, set()).add(men.episode_id)
        mentions_of[gid] = m
        episodes_of_fact[gid] = {f.id: f.episode_ids for f in store.facts(gid, sorted(fact_ids.get(gid, ())))}
    from mnemis.eval.recall import evidence_recall

    cats = [q.category for q in questions]
    out = {}
    for name, ctxs in routes.items():
        ranked = [[h.id for h in sorted(c.episodes, key=lambda h: -h.score)] for c in ctxs]
        at_k = evidence_recall(ranked, [q.evidence for q in questions], cats)
        direct, reach = [], []
        for q, c in zip(questions, ctxs):
            if c.group_id != q.group_id:
                raise ValueError(f"route {name!r}: context of group {c.group_id!r} for question {q.id!r}")
            direct.append(recall(q.evidence, {h.id for h in c.episodes}))
            reach.append(recall(q.evidence, reachable_episodes(c, mentions_of.get(c.group_id, {}),
                                                               episodes_of_fact.get(c.group_id, {}))))
        table = recall_table(cats, direct, reach)
        for key, row in table.items():
            row.update({m: v for m, v in at_k[key].items() if m not in ("n", "skipped")})
        out[name] = table
    return out
