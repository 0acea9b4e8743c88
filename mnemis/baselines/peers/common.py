"""What both peers share: the run record, the progress file, and the dispatch to a worker process (the local
OpenAI-compatible endpoint they talk to is :mod:`mnemis.models.llm.local_server`)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemis.models.llm.local_server import ServerUnavailable, add_server_counts, local_endpoint, server_counts
from mnemis.settings import PeersSettings
from mnemis.types import Dataset, Question

log = logging.getLogger(__name__)
WORKER_TIMEOUT_S = 6 * 3600.0  # a peer worker process without peers.timeout_s

PEER_METHODS = ("graphiti", "mem0_oss")
# the peers phone home by default; this harness runs offline and measures only the memory
os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
os.environ.setdefault("MEM0_TELEMETRY", "false")


@dataclass
class PeerRun:
    """One rendered context per question (``""`` when the peer failed on it) and what it cost."""

    contexts: list[str]
    stats: dict[str, Any] = field(default_factory=dict)
    question_failures: list[str | None] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        failed = [f for f in self.question_failures if f]
        return {**self.stats, "question_failures": len(failed),
                "question_failure_examples": sorted(set(failed))[:5]}


class Failures:
    """A peer library's failures, counted by exception type, with the first few as examples."""

    def __init__(self, keep: int = 3) -> None:
        self.by_type: Counter = Counter()
        self.examples: list[str] = []
        self.keep = keep

    def record(self, where: str, exc: BaseException) -> str:
        """Count ``exc`` (raised at ``where``); returns its one-line description."""
        line = f"{type(exc).__name__}: {str(exc)[:200]}"
        self.by_type[type(exc).__name__] += 1
        if len(self.examples) < self.keep:
            self.examples.append(f"{where}: {line}")
        return line

    def total(self) -> int:
        return sum(self.by_type.values())

    def to_dict(self) -> dict[str, Any]:
        return {"by_type": dict(self.by_type), "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, keep: int = 3) -> Failures:
        out = cls(keep)
        out.by_type.update((d or {}).get("by_type") or {})
        out.examples = list((d or {}).get("examples") or [])[:keep]
        return out


class IngestProgress:
    """How far a peer's ingestion of one group got and what it cost so far, saved after every step: a rerun
    resumes after ``done`` steps and still reports the whole ingestion (failures, counts, wall time), not
    only its own part.

    Files written before the counts were kept (``{"episodes": n}`` / ``{"sessions": n}``) resume at ``n``
    and say ``counts_complete: false``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            saved = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a peer progress file ({exc}); delete it to ingest this group "
                             "again from the start") from exc
        legacy = "done" not in saved and bool(saved)
        self.done = int(saved.get("done", saved.get("episodes", saved.get("sessions", 0))))
        self.failures = Failures.from_dict(saved.get("failures"))
        self.counts: Counter = Counter(saved.get("counts") or {})
        self.wall_s = float(saved.get("wall_s", 0.0))
        self.complete = bool(saved.get("counts_complete", not legacy))

    def step(self, wall_s: float) -> None:
        """One more step (an episode, a session) taken in ``wall_s`` seconds; saved at once."""
        self.done += 1
        self.wall_s += wall_s
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": self.done, "failures": self.failures.to_dict(),
                                   "counts": dict(self.counts), "wall_s": round(self.wall_s, 3),
                                   "counts_complete": self.complete}))
        tmp.replace(self.path)


def request_timeout(peers: PeersSettings) -> float:
    """Seconds a peer library waits for one LLM reply (``peers.request_timeout_s``, checked positive by the
    settings)."""
    return float(peers.request_timeout_s)


def server_options(peers: PeersSettings) -> dict[str, Any]:
    """The peers' settings as the local server's options (:func:`mnemis.models.llm.local_server.server_command`):
    a key left unset (None) is left out, so the behaviour the settings document for it applies."""
    return peers.model_dump(exclude_none=True)


def run_peer(method: str, data: Dataset, questions: Sequence[Question], peers: PeersSettings,
             llm: Mapping[str, Any], embedder: Mapping[str, Any], reranker: Mapping[str, Any] | None,
             work: Path) -> PeerRun:
    """Ingest ``data``'s episodes into the peer library (in order, per group), then retrieve for ``questions``.

    The library runs in a worker process (:mod:`mnemis.baselines.peers.worker`) that builds ``embedder`` and
    ``reranker`` from their config nodes: a native crash there (Kuzu can abort the process) costs this
    method's contexts, never the run. Never raises for a library failure: a missing library, endpoint or a
    crashed worker gives empty contexts and the reason in ``stats["error"]``; per-episode and per-question
    failures are counted. A rerun resumes after the episodes the library already took.
    """
    if method not in PEER_METHODS:
        raise ValueError(f"unknown peer method {method!r}; choose one of {list(PEER_METHODS)}")
    work.mkdir(parents=True, exist_ok=True)
    try:
        with local_endpoint(server_options(peers), llm) as (base_url, model):
            before = server_counts(base_url)
            out = _in_worker(method, data, questions, peers, base_url, model, embedder, reranker, work)
            after = server_counts(base_url)
        if before or after:  # every run of this memory so far, a resumed ingestion included
            out.stats["server_counts"] = add_server_counts(work, before, after)
        return out
    except ServerUnavailable as exc:
        return _failed(method, questions, f"{type(exc).__name__}: {exc}")


def _failed(method: str, questions: Sequence[Question], why: str) -> PeerRun:
    log.error("%s: %s (every question gets an empty context)", method, why)
    return PeerRun([""] * len(questions), {"error": why}, [why] * len(questions))


def _in_worker(method: str, data: Dataset, questions: Sequence[Question], peers: PeersSettings, base_url: str,
               model: str, embedder: Mapping[str, Any], reranker: Mapping[str, Any] | None, work: Path) -> PeerRun:
    job = {"method": method, "data": data.model_dump(mode="json"), "questions": [q.model_dump(mode="json")
                                                                                  for q in questions],
           "peers": peers.model_dump(mode="json"), "base_url": base_url, "model": model, "embedder": dict(embedder),
           "reranker": dict(reranker) if reranker else None, "work": str(work)}
    src, dst = work / "job.json", work / "result.json"
    src.write_text(json.dumps(job, default=str))
    dst.unlink(missing_ok=True)
    timeout = peers.timeout_s or WORKER_TIMEOUT_S
    try:
        proc = subprocess.run([sys.executable, "-m", "mnemis.baselines.peers.worker", str(src), str(dst)], check=False,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return _failed(method, questions, f"the {method} worker ran past peers.timeout_s={timeout:.0f} s")
    if proc.returncode != 0 or not dst.is_file():
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return _failed(method, questions, f"the {method} worker exited with code {proc.returncode}: "
                                          + " | ".join(tail)[-400:])
    res = json.loads(dst.read_text())
    return PeerRun(res["contexts"], res["stats"], res["question_failures"])
