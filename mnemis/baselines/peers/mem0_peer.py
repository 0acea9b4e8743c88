"""mem0ai's ``Memory`` as a method: FAISS per group, our embedder behind its embedding interface, one memory
store per speaker (as the Mem0 authors' LoCoMo evaluation), each session added as one message list."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.baselines.peers.common import IngestProgress, PeerRun, request_timeout
from mnemis.settings import PeersSettings
from mnemis.paths import child_path
from mnemis.types import Dataset, Episode, Question

log = logging.getLogger(__name__)


class _OurEmbedding:
    """Our embedder behind mem0's ``embed(text, memory_action)`` / ``embed_batch`` interface."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def embed(self, text: Any, memory_action: Any = None) -> list[float]:
        return self.embedder.encode([str(text)], kind="query" if memory_action == "search" else "document")[0].tolist()

    def embed_batch(self, texts: Sequence[str], memory_action: str = "add") -> list[list[float]]:
        return [v.tolist() for v in self.embedder.encode([str(t) for t in texts])]


def _memory(group: str, peers: PeersSettings, base_url: str, model: str, embedder: Any, dim: int,
            work: Path) -> Any:
    os.environ.setdefault("MEM0_DIR", str(work / "mem0-home"))
    from mem0 import Memory
    from openai import OpenAI

    folder = child_path(work, group)  # a group id is data: never a path of its own
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "vector_store": {"provider": "faiss", "config": {"collection_name": folder.name, "path": str(folder / "faiss"),
                                                         "embedding_model_dims": dim, "distance_strategy": "cosine"}},
        "llm": {"provider": "openai", "config": {"model": model, "api_key": peers.api_key or "EMPTY",
                                                 "openai_base_url": base_url, "temperature": 0.0,
                                                 "max_tokens": peers.max_tokens}},
        "embedder": {"provider": "openai", "config": {"api_key": "EMPTY", "embedding_dims": dim}},  # replaced below
        "history_db_path": str(folder / "history.db"),
    }
    mem = Memory.from_config(config)
    mem.embedding_model = _OurEmbedding(embedder)
    # mem0ai builds its OpenAI client without a timeout setting: the SDK's 600 s is short for a small CPU model
    mem.llm.client = OpenAI(api_key=config["llm"]["config"]["api_key"], base_url=base_url,
                            timeout=request_timeout(peers))
    return mem


def _sessions(episodes: Sequence[Episode]) -> list[list[Episode]]:
    out: dict[int, list[Episode]] = {}
    for e in sorted(episodes, key=lambda e: e.position):
        out.setdefault(e.session, []).append(e)
    return list(out.values())


def run_mem0_oss(data: Dataset, questions: Sequence[Question], peers: PeersSettings, base_url: str, model: str,
                 embedder: Any, reranker: Any, work: Path) -> PeerRun:
    dim = int(embedder.encode(["dimension probe"]).shape[1])
    by_group: dict[str, list[Episode]] = {}
    for e in data.episodes:
        by_group.setdefault(e.group_id, []).append(e)
    index = {q.id: i for i, q in enumerate(questions)}
    contexts, q_fail = [""] * len(questions), ["not searched"] * len(questions)
    k = peers.k
    groups: dict[str, Any] = {}
    for g, eps in by_group.items():
        qs = [q for q in questions if q.group_id == g]
        speakers = list(dict.fromkeys(e.speaker for e in sorted(eps, key=lambda e: e.position)))
        try:
            mem = _memory(g, peers, base_url, model, embedder, dim, work)
        except Exception as exc:
            log.exception("mem0_oss could not start for group %s", g)
            groups[g] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            for q in qs:
                q_fail[index[q.id]] = groups[g]["error"]
            continue
        progress = IngestProgress(child_path(work, g) / "done.json")
        for session in _sessions(eps)[progress.done:]:  # a rerun resumes after the last added session
            when = session[0].valid_at.isoformat()
            t0 = time.perf_counter()
            for sp in speakers:  # each speaker's own store sees the session from its side
                messages = [{"role": "user" if e.speaker == sp else "assistant", "content": e.content} for e in session]
                try:
                    res = mem.add(messages, user_id=f"{g}:{sp}", metadata={"timestamp": when})
                    results = (res or {}).get("results", [])
                    # mem0ai logs an unparsable extraction reply and stores nothing
                    progress.counts["adds_without_memory"] += not results
                    for r in results:
                        progress.counts[f"op.{r.get('event', 'ADD')}"] += 1
                except Exception as exc:  # noqa: BLE001 - a peer failure is counted, never fatal
                    progress.failures.record(f"session {session[0].session} ({sp})", exc)
            progress.step(time.perf_counter() - t0)
        t1 = time.perf_counter()
        n_memories = 0
        for sp in speakers:
            try:
                n_memories += len((mem.get_all(filters={"user_id": f"{g}:{sp}"}) or {}).get("results", []))
            except Exception as exc:  # noqa: BLE001 - the size is a statistic; the run goes on
                log.warning("mem0_oss: could not count the memories of %s:%s (%s)", g, sp, exc)
        for q in qs:
            parts, err = [], None
            for sp in speakers:
                try:
                    hits = (mem.search(q.question, top_k=k, filters={"user_id": f"{g}:{sp}"}) or {}).get("results", [])
                except Exception as exc:  # noqa: BLE001
                    err, hits = f"{type(exc).__name__}: {str(exc)[:200]}", []
                lines = [f"- {h.get('memory', '')} ({(h.get('metadata') or {}).get('timestamp', '?')[:10]})" for h in hits]
                parts.append(f"Memories for {sp}:\n" + ("\n".join(lines) or "- (none)"))
            contexts[index[q.id]], q_fail[index[q.id]] = "\n\n".join(parts), err
        groups[g] = {"episodes": len(eps), "speakers": speakers, "add_failures": progress.failures.total(),
                     "failures_by_type": dict(progress.failures.by_type),
                     "failure_examples": progress.failures.examples, "memories": n_memories,
                     "operations": {k[3:]: v for k, v in sorted(progress.counts.items()) if k.startswith("op.")},
                     "adds_without_memory": progress.counts["adds_without_memory"],
                     "counts_complete": progress.complete, "ingest_wall_s": round(progress.wall_s, 1),
                     "search_wall_s": round(time.perf_counter() - t1, 1)}
    return PeerRun(contexts, {"library": "mem0ai", "groups": groups}, q_fail)
