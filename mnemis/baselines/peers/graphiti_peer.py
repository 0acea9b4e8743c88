"""graphiti-core as a method: one embedded Kuzu database per group, episodes added in order with their times,
Graphiti's own hybrid search, our embedder and reranker behind its client interfaces."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import timezone
from pathlib import Path
from typing import Any

from mnemis.baselines.peers.common import IngestProgress, PeerRun, request_timeout
from mnemis.ingest.graphiti.clients import graphiti_clients, group_records, kuzu_fulltext_indexes
from mnemis.settings import PeersSettings
from mnemis.paths import child_path
from mnemis.types import Dataset, Episode, Question

log = logging.getLogger(__name__)


def _fact_line(edge: Any) -> str:
    def day(t: Any) -> str:
        return t.strftime("%Y-%m-%d") if t is not None else "?"

    end = day(edge.invalid_at) if getattr(edge, "invalid_at", None) else "now"
    return f"- {edge.fact} ({day(getattr(edge, 'valid_at', None))} – {end})"


async def _group(group: str, episodes: Sequence[Episode], questions: Sequence[Question], peers: PeersSettings,
                 base_url: str, model: str, embedder: Any, reranker: Any, work: Path) -> dict[str, Any]:
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.edges import EntityEdge
    from graphiti_core.llm_client.config import LLMConfig
    from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
    from graphiti_core.nodes import EntityNode, EpisodeType
    from openai import AsyncOpenAI

    budget = peers.max_tokens  # the client's own max_tokens (16,384 by default) wins over the config's
    key = peers.api_key or "EMPTY"
    client = AsyncOpenAI(api_key=key, base_url=base_url, timeout=request_timeout(peers))
    llm = OpenAIGenericClient(config=LLMConfig(api_key=key, model=model, small_model=model, base_url=base_url,
                                               temperature=0.0, max_tokens=budget), max_tokens=budget, client=client)
    emb, cross = graphiti_clients(embedder, reranker)
    driver = KuzuDriver(db=str(child_path(work, group, ".kuzu")))  # a group id is data: never a path of its own
    # graphiti-core 0.31.2 routes a group_id to a database of that name and reads ``driver._database``, which
    # the Kuzu driver never sets: one database per group here, so name it after the group
    driver._database = group
    graph = Graphiti(graph_driver=driver, llm_client=llm, embedder=emb, cross_encoder=cross)
    await graph.build_indices_and_constraints()
    await kuzu_fulltext_indexes(driver)
    progress = IngestProgress(child_path(work, group, ".done.json"))
    for ep in list(episodes)[progress.done:]:  # a rerun resumes after the last added episode
        when = ep.valid_at if ep.valid_at.tzinfo else ep.valid_at.replace(tzinfo=timezone.utc)
        t0 = time.perf_counter()
        used = graph.token_tracker.get_total_usage()
        try:
            await graph.add_episode(name=ep.id, episode_body=ep.content, source_description="conversation turn",
                                    reference_time=when, source=EpisodeType.message, group_id=group)
        except Exception as exc:  # noqa: BLE001 - a peer failure is counted, never fatal
            progress.failures.record(ep.id, exc)
        now = graph.token_tracker.get_total_usage()  # Graphiti's own count (0.31.2's OpenAIGenericClient records none)
        progress.counts["graphiti_input_tokens"] += now.input_tokens - used.input_tokens
        progress.counts["graphiti_output_tokens"] += now.output_tokens - used.output_tokens
        progress.step(time.perf_counter() - t0)
    entities = await group_records(EntityNode, driver, group)
    edges = await group_records(EntityEdge, driver, group)
    contexts, q_fail = [], []
    t1 = time.perf_counter()
    for q in questions:
        try:
            found = await graph.search(q.question, group_ids=[group], num_results=peers.k)
            contexts.append("\n".join(_fact_line(e) for e in found))
            q_fail.append(None)
        except Exception as exc:  # noqa: BLE001
            contexts.append("")
            q_fail.append(f"{type(exc).__name__}: {str(exc)[:200]}")
    await graph.close()
    return {"contexts": contexts, "question_failures": q_fail, "stats": {
        "episodes": len(episodes), "episode_failures": progress.failures.total(),
        "failures_by_type": dict(progress.failures.by_type), "failure_examples": progress.failures.examples,
        "entities": len(entities), "facts": len(edges),
        "entity_names": sorted({str(getattr(n, "name", "")) for n in entities})[:500],
        "contradicted_facts": sum(1 for e in edges if getattr(e, "invalid_at", None) is not None),
        "graphiti_tokens": {"input": progress.counts["graphiti_input_tokens"],
                            "output": progress.counts["graphiti_output_tokens"]},
        "counts_complete": progress.complete, "ingest_wall_s": round(progress.wall_s, 1),
        "search_wall_s": round(time.perf_counter() - t1, 1)}}


def run_graphiti(data: Dataset, questions: Sequence[Question], peers: PeersSettings, base_url: str, model: str,
                 embedder: Any, reranker: Any, work: Path) -> PeerRun:
    by_group: dict[str, list[Episode]] = {}
    for e in data.episodes:
        by_group.setdefault(e.group_id, []).append(e)
    index = {q.id: i for i, q in enumerate(questions)}
    contexts, q_fail = [""] * len(questions), ["not searched"] * len(questions)
    groups: dict[str, Any] = {}
    for g, eps in by_group.items():
        qs = [q for q in questions if q.group_id == g]
        eps.sort(key=lambda e: e.position)
        try:
            res = asyncio.run(_group(g, eps, qs, peers, base_url, model, embedder, reranker, work))
        except Exception as exc:
            log.exception("graphiti failed on group %s", g)
            groups[g] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            for q in qs:
                q_fail[index[q.id]] = groups[g]["error"]
            continue
        groups[g] = res["stats"]
        for q, ctx, f in zip(qs, res["contexts"], res["question_failures"]):
            contexts[index[q.id]], q_fail[index[q.id]] = ctx, f
    n_eps = sum(s.get("episodes", 0) for s in groups.values())
    total_in = sum((s.get("graphiti_tokens") or {}).get("input", 0) for s in groups.values())
    stats = {"library": "graphiti-core", "groups": groups, "episodes": n_eps,
             "graphiti_input_tokens_per_episode": round(total_in / n_eps, 1) if n_eps else None}
    return PeerRun(contexts, stats, q_fail)
