"""graphiti-core building one group's graph on an embedded Kuzu database, and that graph read back as plain
records (the only module of the builder that calls graphiti-core; :mod:`mnemis.ingest.graphiti.library`
imports it).

Episodes are added in order with their times: ``add_episode`` one at a time, each with Graphiti's own context
of previous episodes (the authors' LoCoMo ingestion), or ``add_episode_bulk`` over chunks (their LongMemEval
ingestion). The LLM is reached through Graphiti's ``OpenAIGenericClient`` on an OpenAI-compatible endpoint; every
request it sends is counted here (calls, prompt and completion tokens, replies cut at ``max_tokens``, failed
requests), whatever the server. Our embedder stands behind Graphiti's embedder interface.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mnemis.types import Episode


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and what Graphiti's client sends it."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    max_tokens: int = 8192  # the public Graphiti client's default reply budget
    timeout_s: float = 3600.0


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _iso(t: Any) -> str | None:
    return _utc(t).isoformat() if isinstance(t, datetime) else None


def set_reflexion(iterations: int, version: str) -> None:
    """Set Graphiti's ``MAX_REFLEXION_ITERATIONS`` where its entity and fact extraction read it (a module constant
    bound at import, from the environment); releases without reflexion (0.25 on for facts, 0.27 on for
    entities) are an error naming the setting."""
    from graphiti_core.utils.maintenance import edge_operations, node_operations

    for module in (node_operations, edge_operations):
        if not hasattr(module, "MAX_REFLEXION_ITERATIONS"):
            raise ValueError(f"ingest.graphiti.reflexion_iterations={iterations}: graphiti-core {version} has no "
                             f"reflexion in {module.__name__}; set it to null, or run a release up to 0.24")
        module.MAX_REFLEXION_ITERATIONS = iterations


def count_requests(client: Any, counts: Counter) -> None:
    """Wrap ``client.chat.completions.create`` so that every request Graphiti sends is counted in ``counts``:
    ``llm_calls``, ``prompt_tokens``, ``completion_tokens`` (from the reply's usage), ``cut_replies``
    (``finish_reason == "length"``) and ``failed_requests`` (the request raised)."""
    completions = client.chat.completions
    create = completions.create

    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            reply = await create(*args, **kwargs)
        except Exception:
            counts["failed_requests"] += 1
            raise
        counts["llm_calls"] += 1
        usage = getattr(reply, "usage", None)
        counts["prompt_tokens"] += int(getattr(usage, "prompt_tokens", 0) or 0)
        counts["completion_tokens"] += int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(reply, "choices", None) or []
        counts["cut_replies"] += sum(1 for c in choices if getattr(c, "finish_reason", None) == "length")
        return reply

    completions.create = counted


async def open_graph(db_path: Path, group: str, endpoint: Endpoint, embedder: Any, counts: Counter) -> Any:
    """A ``Graphiti`` on the Kuzu database ``db_path`` whose LLM requests are counted in ``counts``."""
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.llm_client.config import LLMConfig
    from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
    from openai import AsyncOpenAI

    from mnemis.ingest.graphiti.clients import graphiti_clients, kuzu_fulltext_indexes

    client = AsyncOpenAI(api_key=endpoint.api_key, base_url=endpoint.base_url, timeout=endpoint.timeout_s)
    count_requests(client, counts)
    llm = OpenAIGenericClient(config=LLMConfig(api_key=endpoint.api_key, model=endpoint.model,
                                               small_model=endpoint.model, base_url=endpoint.base_url,
                                               temperature=0.0, max_tokens=endpoint.max_tokens),
                              max_tokens=endpoint.max_tokens, client=client)
    emb, cross = graphiti_clients(embedder, None)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    driver = KuzuDriver(db=str(db_path))
    driver._database = group  # newer releases route a group to a database of that name: one database per group
    graph = Graphiti(graph_driver=driver, llm_client=llm, embedder=emb, cross_encoder=cross)
    await graph.build_indices_and_constraints()
    await kuzu_fulltext_indexes(driver)
    return graph


async def add_episodes(graph: Any, group: str, episodes: Sequence[Episode], *, mode: str, bulk_size: int | None,
                       on_step: Callable[[list[Episode], float, BaseException | None], None]) -> None:
    """Add ``episodes`` (one group, in order) to ``graph``; ``on_step(episodes, seconds, error)`` after each
    ``add_episode`` / ``add_episode_bulk`` call (a failed call is reported there, never raised)."""
    from graphiti_core.nodes import EpisodeType
    from graphiti_core.utils.bulk_utils import RawEpisode

    if mode == "episode":
        steps = [[e] for e in episodes]
    else:
        size = bulk_size or len(episodes) or 1
        steps = [list(episodes[i:i + size]) for i in range(0, len(episodes), size)]
    for step in steps:
        t0 = time.perf_counter()
        error: BaseException | None = None
        try:
            if mode == "episode":
                e = step[0]
                await graph.add_episode(name=e.id, episode_body=e.content, source_description="conversation turn",
                                        reference_time=_utc(e.valid_at), source=EpisodeType.message, group_id=group)
            else:
                raw = [RawEpisode(name=e.id, content=e.content, source_description="conversation turn",
                                  source=EpisodeType.message, reference_time=_utc(e.valid_at)) for e in step]
                await graph.add_episode_bulk(raw, group_id=group)
        except Exception as exc:  # noqa: BLE001 - a library failure is counted per step, never fatal
            error = exc
        on_step(step, time.perf_counter() - t0, error)


async def read_graph(graph: Any, group: str) -> dict[str, list[dict[str, Any]]]:
    """The group's graph as plain records: ``episodes``, ``entities``, ``facts``, ``mentions`` (every field
    :mod:`mnemis.ingest.graphiti.importer` maps or drops)."""
    from graphiti_core.edges import EntityEdge, EpisodicEdge
    from graphiti_core.nodes import EntityNode, EpisodicNode

    from mnemis.ingest.graphiti.clients import group_records

    driver = graph.driver
    episodes = await group_records(EpisodicNode, driver, group)
    nodes = await group_records(EntityNode, driver, group)
    edges = await group_records(EntityEdge, driver, group)
    mentions = await group_records(EpisodicEdge, driver, group)
    return {
        "episodes": [{"uuid": n.uuid, "name": n.name, "valid_at": _iso(n.valid_at), "created_at": _iso(n.created_at),
                      "content": n.content, "source_description": n.source_description,
                      "entity_edges": list(n.entity_edges or [])} for n in episodes],
        "entities": [{"uuid": n.uuid, "name": n.name, "summary": n.summary or "", "labels": list(n.labels or []),
                      "created_at": _iso(n.created_at), "attributes": dict(n.attributes or {})} for n in nodes],
        "facts": [{"uuid": e.uuid, "source": e.source_node_uuid, "target": e.target_node_uuid, "name": e.name,
                   "fact": e.fact, "episodes": list(e.episodes or []), "valid_at": _iso(e.valid_at),
                   "invalid_at": _iso(e.invalid_at), "expired_at": _iso(e.expired_at),
                   "created_at": _iso(e.created_at), "attributes": dict(e.attributes or {})} for e in edges],
        "mentions": [{"episode": m.source_node_uuid, "entity": m.target_node_uuid} for m in mentions],
    }
