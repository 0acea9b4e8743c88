"""One-hop expansion of selected entities (REFERENCE §5.3 "Expansion"), with caps.

For each selected entity: the facts touching it, the entities at the other end of those facts, and
the episodes that mention it. The released code takes all of them, so a hub entity (a speaker)
brings in hundreds of items; here each entity contributes at most ``facts`` facts, ``neighbours``
neighbour entities and ``episodes`` episodes, and each query at most ``per_type`` items per type.

Which items survive a cap is decided without a model: items sharing more words with the query
first, then current facts (not invalidated) before old ones, then the most recent. Items of several
entities are interleaved round-robin (each entity's best first), so the per-query cap keeps every
entity's best items instead of the first entity's whole list.

Batched per group: one ``facts_touching``, one ``mentions`` and one ``episodes`` store call for all
queries of a group.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mnemis.store.sqlite import GraphStore

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the and or of to in on at for with by from is are was were be been do does did what when where who "
    "whom whose which why how has have had i you he she it we they my your his her its our their me him them "
    "this that these those as about into than then there any some would could should will can".split()
)


@dataclass(frozen=True)
class ExpandCaps:
    facts: int = 10
    episodes: int = 10
    neighbours: int = 5
    per_type: int = 200


def words(text: str) -> frozenset[str]:
    """Lowercased content words of ``text`` (stop words dropped)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def _round_robin(lists: Sequence[Sequence[str]], limit: int) -> list[str]:
    out: dict[str, None] = {}
    depth = max((len(x) for x in lists), default=0)
    for d in range(depth):
        for lst in lists:
            if d < len(lst):
                out.setdefault(lst[d], None)
                if len(out) >= limit:
                    return list(out)
    return list(out)


def expand_one_hop(
    store: GraphStore,
    group_id: str,
    queries: Sequence[str],
    entity_ids: Sequence[Sequence[str]],
    caps: ExpandCaps = ExpandCaps(),
) -> list[tuple[list[str], list[str], list[str]]]:
    """Per query ``(fact ids, episode ids, neighbour entity ids)`` of its selected ``entity_ids``.

    ``queries[i]`` orders what survives the caps of query i; all queries belong to ``group_id``.
    """
    wanted = list(dict.fromkeys(e for ents in entity_ids for e in ents))
    if not wanted:
        return [([], [], []) for _ in queries]
    facts = store.facts_touching(group_id, wanted)
    facts_of: dict[str, list[int]] = {}
    for n, f in enumerate(facts):
        facts_of.setdefault(f.source_id, []).append(n)
        if f.target_id != f.source_id:
            facts_of.setdefault(f.target_id, []).append(n)
    fact_words = [words(f.fact) for f in facts]
    mentions = store.mentions(group_id, entity_ids=wanted)
    eps_of: dict[str, list[str]] = {}
    for m in mentions:
        eps_of.setdefault(m.entity_id, []).append(m.episode_id)
    episodes = {e.id: e for e in store.episodes(group_id, {m.episode_id for m in mentions})}
    ep_words = {i: words(e.content) for i, e in episodes.items()}

    out = []
    for query, ents in zip(queries, entity_ids):
        qw = words(query)
        f_lists, e_lists, n_lists = [], [], []
        for ent in dict.fromkeys(ents):
            idx = sorted(
                facts_of.get(ent, ()),
                key=lambda n: (-len(qw & fact_words[n]), facts[n].invalid_at is not None, -n),
            )[: caps.facts]
            f_lists.append([facts[n].id for n in idx])
            nb = [facts[n].target_id if facts[n].source_id == ent else facts[n].source_id for n in idx]
            n_lists.append(list(dict.fromkeys(x for x in nb if x != ent))[: caps.neighbours])
            eps = [e for e in dict.fromkeys(eps_of.get(ent, ())) if e in episodes]
            eps.sort(key=lambda e: (-len(qw & ep_words[e]), -episodes[e].position))
            e_lists.append(eps[: caps.episodes])
        out.append((_round_robin(f_lists, caps.per_type), _round_robin(e_lists, caps.per_type),
                    _round_robin(n_lists, caps.per_type)))
    return out
