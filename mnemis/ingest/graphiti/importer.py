"""Graphiti's graph of one group, read back as plain records (:func:`mnemis.ingest.graphiti.run.read_graph`),
mapped into our store. No graphiti-core import here: the input is plain dictionaries.

Every field Graphiti keeps, and what becomes of it:

=========================================  =============================================================
Graphiti                                   Mnemis store
=========================================  =============================================================
EpisodicNode.name                          matched to ``Episode.id`` (each episode is added under our id)
EpisodicNode.content, valid_at, source,    not copied: they are the values we sent (our ``Episode`` is
source_description                         the record)
EpisodicNode.uuid, created_at, labels      dropped (Graphiti's own bookkeeping)
EpisodicNode.entity_edges                  dropped: the inverse of ``EntityEdge.episodes`` (mapped)
EntityNode.name                            ``Entity.name``; ``Entity.id = entity_id(group, name)``: nodes
                                           whose names normalise alike become one entity (counted)
EntityNode.summary                         ``Entity.summary`` (of the earliest node, when merged)
EntityNode.labels                          ``Entity.tags``, without Graphiti's generic ``Entity`` label
EntityNode.created_at                      ``Entity.created_at`` (Graphiti's ingestion time)
EntityNode.name_embedding                  dropped: our embedder embeds the entity's name (and summary)
                                           afterwards, as for our own builder
EntityNode.attributes                      dropped (filled only for custom entity types; none are given)
(speaker rule)                             ``Entity.is_speaker``: the name is a speaker of the group
EntityEdge.uuid                            ``Fact.id = fact_id(group, first source episode, ordinal)``
EntityEdge.source/target_node_uuid         ``Fact.source_id`` / ``target_id`` (mapped entity ids)
EntityEdge.name                            ``Fact.relation``
EntityEdge.fact                            ``Fact.fact``
EntityEdge.episodes                        ``Fact.episode_ids`` (in episode order)
EntityEdge.valid_at, invalid_at,           the same fields, UTC (naive UTC when the group's episode
expired_at, created_at                     times are naive); expired_at and created_at are Graphiti's
                                           ingestion times (as EntityNode.created_at)
EntityEdge.fact_embedding                  dropped: our embedder embeds the fact afterwards
EntityEdge.attributes                      dropped (filled only for custom edge types; none are given)
EpisodicEdge (MENTIONS)                    ``Mention(episode_id, entity_id)``; its uuid and time dropped
CommunityNode / CommunityEdge              never built (``update_communities`` stays off)
(our resolution aliases)                   none: Graphiti keeps no alias list
=========================================  =============================================================

A fact whose endpoints or source episodes cannot be mapped is dropped and counted
(``graphiti.import.dropped_facts``); so is a mention of an unknown episode or entity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, Episode, Fact, Mention, entity_id, fact_id, normalize_name

GENERIC_LABEL = "Entity"


def _time(value: Any, naive: bool, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ValueError(f"{where}: not an ISO time: {value!r}") from exc
    t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).replace(tzinfo=None) if naive else t.astimezone(timezone.utc)


def _field(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise ValueError(f"{where}: missing field {key!r}")
    return record[key]


def _by_creation(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """``(index, record)`` in creation order (then uuid): ids follow the order Graphiti made them in."""
    return sorted(enumerate(records), key=lambda p: (str(p[1].get("created_at") or ""), str(p[1].get("uuid"))))


def map_graph(group: str, graph: Mapping[str, Sequence[Mapping[str, Any]]], episodes: Sequence[Episode]
              ) -> tuple[list[Entity], list[Fact], list[Mention], Counter]:
    """The store records of ``graph`` (one group's plain records) for the group's stored ``episodes``, and
    counts of what was merged or dropped."""
    counts: Counter = Counter()
    order = {e.id: e.position for e in episodes}
    naive = bool(episodes) and episodes[0].valid_at.tzinfo is None
    speakers = {normalize_name(e.speaker) for e in episodes}
    ep_of: dict[str, str] = {}
    for i, rec in enumerate(graph.get("episodes", [])):
        name = str(_field(rec, "name", f"graphiti episodes[{i}]"))
        if name in order:
            ep_of[str(_field(rec, "uuid", f"graphiti episodes[{i}]"))] = name
        else:
            counts["graphiti.import.unknown_episodes"] += 1

    nodes = _by_creation(graph.get("entities", []))
    ent_of: dict[str, str] = {}
    entities: dict[str, Entity] = {}
    for i, rec in nodes:
        where = f"graphiti entities[{i}]"
        name = " ".join(str(_field(rec, "name", where)).split())
        if not name:
            counts["graphiti.import.unnamed_entities"] += 1
            continue
        eid = entity_id(group, name)
        ent_of[str(_field(rec, "uuid", where))] = eid
        tags = [str(t) for t in rec.get("labels") or [] if str(t) != GENERIC_LABEL]
        if eid in entities:  # another node of the same name: one entity, labels joined
            counts["graphiti.import.merged_entities"] += 1
            old = entities[eid]
            old.tags = list(dict.fromkeys([*old.tags, *tags]))
            old.summary = old.summary or str(rec.get("summary") or "")
            continue
        entities[eid] = Entity(group_id=group, id=eid, name=name, summary=str(rec.get("summary") or ""), tags=tags,
                               is_speaker=normalize_name(name) in speakers,
                               created_at=_time(rec.get("created_at"), naive, f"{where}.created_at"))

    facts: list[Fact] = []
    ordinal: Counter = Counter()
    for i, rec in _by_creation(graph.get("facts", [])):
        where = f"graphiti facts[{i}]"
        src, dst = ent_of.get(str(_field(rec, "source", where))), ent_of.get(str(_field(rec, "target", where)))
        eps = sorted({ep_of[u] for u in rec.get("episodes") or [] if u in ep_of}, key=order.__getitem__)
        if src is None or dst is None or not eps:
            counts["graphiti.import.dropped_facts"] += 1
            continue
        first = eps[0]
        facts.append(Fact(group_id=group, id=fact_id(group, first, ordinal[first]), source_id=src, target_id=dst,
                          relation=str(_field(rec, "name", where)), fact=str(_field(rec, "fact", where)),
                          valid_at=_time(rec.get("valid_at"), naive, f"{where}.valid_at"),
                          invalid_at=_time(rec.get("invalid_at"), naive, f"{where}.invalid_at"),
                          expired_at=_time(rec.get("expired_at"), naive, f"{where}.expired_at"),
                          created_at=_time(rec.get("created_at"), naive, f"{where}.created_at"), episode_ids=eps))
        ordinal[first] += 1

    seen: set[tuple[str, str]] = set()
    mentions: list[Mention] = []
    for rec in graph.get("mentions", []):
        pair = (ep_of.get(str(rec.get("episode"))), ent_of.get(str(rec.get("entity"))))
        if pair[0] is None or pair[1] is None:
            counts["graphiti.import.dropped_mentions"] += 1
        elif pair not in seen:
            seen.add(pair)  # type: ignore[arg-type]
            mentions.append(Mention(group_id=group, episode_id=pair[0], entity_id=pair[1]))
    counts.update({"graphiti.import.entities": len(entities), "graphiti.import.facts": len(facts),
                   "graphiti.import.mentions": len(mentions)})
    return list(entities.values()), facts, mentions, counts


def import_graph(store: GraphStore, group: str, graph: Mapping[str, Sequence[Mapping[str, Any]]]) -> Counter:
    """Write ``graph`` (one group's plain records) into ``store`` (call inside a transaction); returns the counts
    of :func:`map_graph`. Repeating it for a grown graph rewrites the same ids (they follow names and episodes)."""
    entities, facts, mentions, counts = map_graph(group, graph, store.episodes(group))
    store.upsert_entities(entities)
    store.upsert_facts(facts)
    store.add_mentions(mentions)
    return counts
