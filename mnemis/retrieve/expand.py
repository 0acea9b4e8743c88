"""One-hop expansion of selected entities (the paper) and the optional caps on it.

For each selected entity: the facts touching it, the entities at the other end of those facts, and
the episodes that mention it. The released code takes all of them and leaves every cut to the
reranker; so does this module when no cap is set (``None``, the ``mode=paper`` setting), and a hub
entity (a speaker) then brings in hundreds of items.

With caps (our default, to bound reranker pairs), each entity contributes at most ``facts`` facts,
``neighbours`` neighbour entities and ``episodes`` episodes, and each query at most ``per_type`` items
per type. Every cut ranks first, then cuts: items sharing more words with the query first (for facts,
then current before invalidated, then newest; for episodes, then newest). The per-query cut merges the
entities' ranked lists by that score; on equal scores the entity with the fewest items kept so far goes
first, so one hub cannot crowd out the others. :func:`cap_nodes` does the same for the node list
(categories and entities), with shares proportional to each kind's size, so neither kind is dropped
wholesale.

Batched per group: one ``facts_touching``, one ``mentions`` and one ``episodes`` store call for all
queries of a group.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from mnemis.store.sqlite import GraphStore

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the and or of to in on at for with by from is are was were be been do does did what when where who "
    "whom whose which why how has have had i you he she it we they my your his her its our their me him them "
    "this that these those as about into than then there any some would could should will can".split()
)


@dataclass(frozen=True)
class ExpandCaps:
    """Caps of the one-hop expansion; ``None`` = no cap (the paper: the reranker does every cut)."""

    facts: int | None = None
    episodes: int | None = None
    neighbours: int | None = None
    per_type: int | None = None

    @property
    def uncapped(self) -> bool:
        return self.facts is None and self.episodes is None and self.neighbours is None and self.per_type is None


def words(text: str) -> frozenset[str]:
    """Lowercased content words of ``text`` (stop words dropped)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def merge_ranked(
    lists: Sequence[Sequence[tuple[Hashable, Any]]], limit: int | None, *, proportional: bool = False
) -> list:
    """Merge ranked lists of ``(id, score)`` (each best first) into at most ``limit`` distinct ids.

    The next id is always the best-scored head of any list; on equal scores the list with the smallest
    share kept so far goes first (share = items kept, or items kept / list length with
    ``proportional``), then the earlier list. ``limit=None`` keeps everything in that order.
    """
    pos = [0] * len(lists)
    kept = [0] * len(lists)
    size = [max(len(x), 1) for x in lists]
    out: dict[Hashable, None] = {}
    while limit is None or len(out) < limit:
        best = None
        for j, lst in enumerate(lists):
            while pos[j] < len(lst) and lst[pos[j]][0] in out:
                pos[j] += 1
            if pos[j] == len(lst):
                continue
            share = kept[j] / size[j] if proportional else kept[j]
            key = (lst[pos[j]][1], -share)
            if best is None or key > best[0]:
                best = (key, j)
        if best is None:
            break
        j = best[1]
        out[lists[j][pos[j]][0]] = None
        pos[j] += 1
        kept[j] += 1
    return list(out)


def _top(items: list, key: Callable, cap: int | None, ranked: bool) -> list:
    """``items`` sorted by ``key`` (ascending = best first) when ``ranked``, then cut to ``cap`` (None = all)."""
    items = sorted(items, key=key) if ranked else list(items)
    return items if cap is None else items[:cap]


def expand_one_hop(
    store: GraphStore,
    group_id: str,
    queries: Sequence[str],
    entity_ids: Sequence[Sequence[str]],
    caps: ExpandCaps = ExpandCaps(),
) -> list[tuple[list[str], list[str], list[str]]]:
    """Per query ``(fact ids, episode ids, neighbour entity ids)`` of its selected ``entity_ids``.

    ``queries[i]`` ranks what survives the caps of query i (unused without caps); all queries belong to
    ``group_id``. Without caps the lists hold every item, in entity order then store order.
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
    mentions = store.mentions(group_id, entity_ids=wanted)
    eps_of: dict[str, list[str]] = {}
    for m in mentions:
        eps_of.setdefault(m.entity_id, []).append(m.episode_id)
    episodes = {e.id: e for e in store.episodes(group_id, {m.episode_id for m in mentions})}
    ranked = not caps.uncapped
    fact_words = [words(f.fact) for f in facts] if ranked else []
    ep_words = {i: words(e.content) for i, e in episodes.items()} if ranked else {}

    out = []
    for query, ents in zip(queries, entity_ids):
        qw = words(query) if ranked else frozenset()
        f_lists, e_lists, n_lists = [], [], []
        for ent in dict.fromkeys(ents):
            idx = _top(facts_of.get(ent, []), lambda n: (-len(qw & fact_words[n]), facts[n].invalid_at is not None,
                                                         -n), caps.facts, ranked)
            f_lists.append([(facts[n].id, len(qw & fact_words[n]) if ranked else 0) for n in idx])
            nb = [facts[n].target_id if facts[n].source_id == ent else facts[n].source_id for n in idx]
            nb = list(dict.fromkeys(x for x in nb if x != ent))
            n_lists.append([(x, 0) for x in (nb if caps.neighbours is None else nb[: caps.neighbours])])
            eps = [e for e in dict.fromkeys(eps_of.get(ent, ())) if e in episodes]
            eps = _top(eps, lambda e: (-len(qw & ep_words[e]), -episodes[e].position), caps.episodes, ranked)
            e_lists.append([(e, len(qw & ep_words[e]) if ranked else 0) for e in eps])
        if ranked:
            out.append((merge_ranked(f_lists, caps.per_type), merge_ranked(e_lists, caps.per_type),
                        merge_ranked(n_lists, caps.per_type)))
        else:
            out.append(tuple(list(dict.fromkeys(i for lst in lists for i, _ in lst))
                             for lists in (f_lists, e_lists, n_lists)))
    return out


def cap_nodes(query: str, nodes: Sequence[str], texts: dict[str, str], kinds: dict[str, str],
              preferred: set[str], cap: int | None) -> list[str]:
    """The node list (categories and entities) cut to ``cap``, ranked first.

    Score: query words shared with the node's text (``texts``: name, tags, summary), then membership of
    ``preferred`` (the LLM-selected nodes before one-hop neighbours), then input order. Each kind is
    ranked on its own and the kinds are merged by score with shares proportional to their sizes, so a
    cut never drops a kind (or the deepest nodes) by position. ``cap=None`` returns ``nodes`` unchanged.
    """
    if cap is None or len(nodes) <= cap:
        return list(nodes)
    qw = words(query)
    by_kind: dict[str, list[tuple[str, tuple[int, int, int]]]] = {}
    for n, i in enumerate(nodes):
        score = (len(qw & words(texts.get(i, ""))), int(i in preferred), -n)
        by_kind.setdefault(kinds.get(i, "entity"), []).append((i, score))
    lists = [sorted(lst, key=lambda x: x[1], reverse=True) for _, lst in sorted(by_kind.items())]
    return merge_ranked([[(i, s[:2]) for i, s in lst] for lst in lists], cap, proportional=True)
