"""The peer libraries as methods: a missing library or a crash costs contexts, never the run; with the libraries
installed (``.[peers]``), both run end to end against a fake OpenAI-compatible server that answers every
structured request with a minimal instance of its schema (plumbing; the slow integration test uses a model)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mnemis.baselines.peers import run_peer
from mnemis.models.llm.scripted import minimal_instance
from mnemis.types import Dataset, Episode, Question
from tests.helpers.compose import changed, run_settings

T0 = datetime(2024, 5, 1, 10, 0)
HASH = {"_target_": "mnemis.models.embed.HashingEmbedder", "dim": 64}  # built in the peer's worker process


def _data() -> tuple[Dataset, list[Question]]:
    turns = [("Alice", "I adopted a cat named Miso."), ("Bob", "Miso is a lovely name!"),
             ("Alice", "We moved to Lisbon last week.")]
    eps = [Episode(group_id="g1", id=f"g1:D1:{i}", source_id=f"D1:{i}", name=f"turn {i}", speaker=s,
                   content=f"{s}: {t}", valid_at=T0 + timedelta(minutes=i), session=1, turn=i, position=i)
           for i, (s, t) in enumerate(turns)]
    qs = [Question(group_id="g1", id="g1:q0", question="What is the cat's name?", answer="Miso", category="single-hop"),
          Question(group_id="g1", id="g1:q1", question="Where did Alice move?", answer="Lisbon", category="single-hop")]
    return Dataset(name="tiny", groups=["g1"], episodes=eps, questions=qs), qs


class FakeServer:
    """``/v1/chat/completions``: a minimal instance of the requested JSON schema (else ``{}``)."""

    def __init__(self, reply: str | None = None, delay_s: float = 0.0) -> None:
        self.requests = 0
        self.delay_s = delay_s  # a slow model: seconds before each chat reply
        self.reply = reply  # a fixed reply (e.g. one that is not JSON) instead of the schema's minimal instance

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802 - /v1/models
                self._send({"object": "list", "data": [{"id": "peer", "object": "model"}]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                time.sleep(outer.delay_s)
                fmt = body.get("response_format") or {}
                schema = (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
                content = outer.reply if outer.reply is not None else json.dumps(
                    minimal_instance(schema) if schema else {})
                self._send({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "peer"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})

            def _send(self, obj):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def _peers(**changes):
    """The composed ``peers`` settings with ``changes``."""
    return changed(run_settings([]).peers, **changes)


def test_unknown_method_is_an_error(tmp_path):
    data, qs = _data()
    with pytest.raises(ValueError, match="unknown peer method"):
        run_peer("zep", data, qs, _peers(base_url="http://x/v1"), {}, HASH, None, tmp_path)


@pytest.mark.parametrize("method,module", [("graphiti", "graphiti_core"), ("mem0_oss", "mem0")])
def test_a_missing_library_costs_contexts_not_the_run(tmp_path, monkeypatch, method, module):
    shadow = tmp_path / "shadow"  # the worker process finds this module first: importing it fails
    shadow.mkdir()
    (shadow / f"{module}.py").write_text("raise ImportError('not installed (test)')\n")
    monkeypatch.setenv("PYTHONPATH", f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    data, qs = _data()
    run = run_peer(method, data, qs, _peers(base_url="http://127.0.0.1:9/v1", model="m"), {}, HASH, None, tmp_path)
    assert run.contexts == ["", ""] and len(run.question_failures) == 2
    assert all(run.question_failures) and run.summary()["question_failures"] == 2
    assert "not installed (test)" in json.dumps(run.stats)


@pytest.mark.parametrize("method", ["graphiti", "mem0_oss"])
def test_peer_runs_end_to_end_against_an_openai_compatible_endpoint(tmp_path, method):
    pytest.importorskip("graphiti_core" if method == "graphiti" else "mem0")
    if method == "graphiti":
        pytest.importorskip("kuzu")
    data, qs = _data()
    server = FakeServer()
    try:
        run = run_peer(method, data, qs, _peers(base_url=server.url, model="peer", k=5), {}, HASH, None, tmp_path)
    finally:
        server.close()
    assert len(run.contexts) == 2 and server.requests > 0
    stats = run.summary()
    group = stats["groups"]["g1"]
    assert "error" not in group, group
    if method == "graphiti":
        assert group["episodes"] == 3 and "entities" in group and "graphiti_tokens" in group
        assert (tmp_path / "g1.done.json").is_file()  # a rerun resumes after the added episodes
    else:
        assert group["speakers"] == ["Alice", "Bob"] and "memories" in group and "adds_without_memory" in group
        assert all(c.startswith("Memories for Alice:") for c in run.contexts)


@pytest.mark.parametrize("method", ["graphiti", "mem0_oss"])
def test_a_resumed_ingestion_reports_the_whole_ingestion(tmp_path, method):
    """Unparsable replies are counted; a rerun of the same memory adds nothing, calls the model no more, and
    still reports the failures and counts of the first run (a resumed benchmark once reported 0 of each)."""
    pytest.importorskip("graphiti_core" if method == "graphiti" else "mem0")
    if method == "graphiti":
        pytest.importorskip("kuzu")
    data, qs = _data()
    server = FakeServer(reply="this is not JSON")
    peers = _peers(base_url=server.url, model="peer", k=5)
    try:
        first = run_peer(method, data, qs, peers, {}, HASH, None, tmp_path).summary()["groups"]["g1"]
        calls = server.requests
        second = run_peer(method, data, qs, peers, {}, HASH, None, tmp_path).summary()["groups"]["g1"]
    finally:
        server.close()
    assert calls > 0
    assert server.requests - calls <= len(qs) * 2  # the rerun only searches (no ingestion call)
    if method == "graphiti":
        assert first["episode_failures"] == 3 and first["failures_by_type"], first
        keys = ("episode_failures", "failures_by_type", "failure_examples", "graphiti_tokens", "entities", "facts")
    else:
        assert first["adds_without_memory"] + first["add_failures"] == 2, first  # one add per speaker
        keys = ("adds_without_memory", "add_failures", "failures_by_type", "operations", "memories")
    assert {k: second[k] for k in keys} == {k: first[k] for k in keys}
    assert second["counts_complete"] is True and second["ingest_wall_s"] >= first["ingest_wall_s"] * 0.99


@pytest.mark.parametrize("method", ["graphiti", "mem0_oss"])
def test_the_request_timeout_reaches_the_library(tmp_path, method):
    """``peers.request_timeout_s`` is the libraries' client timeout (mem0ai and Graphiti build their OpenAI
    clients with the SDK's 600 s): a reply slower than it is a counted failure, not a hang."""
    pytest.importorskip("graphiti_core" if method == "graphiti" else "mem0")
    if method == "graphiti":
        pytest.importorskip("kuzu")
    data, qs = _data()
    server = FakeServer(delay_s=3.0)
    peers = _peers(base_url=server.url, model="peer", k=5, request_timeout_s=0.3)
    try:
        group = run_peer(method, data, qs, peers, {}, HASH, None, tmp_path).summary()["groups"]["g1"]
    finally:
        server.close()
    failed = group["episode_failures"] if method == "graphiti" else group["add_failures"]
    assert failed == (3 if method == "graphiti" else 2), group
    assert "timed out" in json.dumps(group["failure_examples"]).lower(), group


def test_request_timeout_must_be_positive():
    from mnemis.baselines.peers.common import request_timeout

    assert request_timeout(_peers()) == 3600.0 and request_timeout(_peers(request_timeout_s="90")) == 90.0
    for bad in (0, -5, "soon", None):
        with pytest.raises(ValueError, match="request_timeout_s"):
            _peers(request_timeout_s=bad)


def test_ingest_progress_saves_each_step_and_reads_older_files(tmp_path):
    from mnemis.baselines.peers.common import IngestProgress

    p = IngestProgress(tmp_path / "g" / "done.json")
    assert (p.done, p.wall_s, p.complete) == (0, 0.0, True)
    p.failures.record("ep1", ValueError("bad"))
    p.counts["op.ADD"] += 2
    p.step(1.5)
    again = IngestProgress(tmp_path / "g" / "done.json")
    assert (again.done, again.wall_s, again.counts["op.ADD"], again.failures.total()) == (1, 1.5, 2, 1)
    assert again.failures.examples == ["ep1: ValueError: bad"]
    (tmp_path / "old.json").write_text('{"episodes": 7}')  # written before the counts were kept
    old = IngestProgress(tmp_path / "old.json")
    assert old.done == 7 and old.complete is False
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not a peer progress file"):
        IngestProgress(tmp_path / "bad.json")


def test_server_counts_read_tokens_requests_and_cut_replies(tmp_path):
    from mnemis.models.llm.local_server import add_server_counts, parse_server_counts

    text = """# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
vllm:prompt_tokens_total{engine="0",model_name="peer"} 1200.0
vllm:generation_tokens_total{engine="0",model_name="peer"} 300.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="peer"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="peer"} 2.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="peer"} 1.7e9
vllm:prompt_tokens_cached_total{engine="0",model_name="peer"} 50.0
"""
    counts = parse_server_counts(text)
    assert counts == {"prompt_tokens": 1200.0, "generation_tokens": 300.0, "requests": 5.0, "requests_cut": 2.0}
    first = add_server_counts(tmp_path, {"prompt_tokens": 200.0}, counts)
    assert first["prompt_tokens"] == 1000.0 and first["requests_cut"] == 2.0
    total = add_server_counts(tmp_path, counts, {**counts, "prompt_tokens": 1500.0})  # a resumed run
    assert total["prompt_tokens"] == 1300.0 and total["requests"] == 5.0


def test_a_failing_peer_never_stops_the_other_methods_of_a_run(tmp_path, locomo_path):
    """``mnemis run methods=[rag,graphiti]`` where the library cannot import: RAG is answered and judged as
    usual, graphiti's questions get empty contexts and its stats say why."""
    import subprocess

    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "graphiti_core.py").write_text("raise ImportError('not installed (test)')\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "mnemis.app.cli", "run", "experiment=quickstart", "llm=schema_fake", "embedder=hashing",
           "reranker=cosine", "judge.leniency.enabled=false", "methods=[rag,graphiti]",
           "peers.base_url=http://127.0.0.1:9/v1", f"paths.artifacts_dir={tmp_path}/art",
           f"paths.cache_dir={tmp_path}/cache", f"paths.shared_data_dir={locomo_path.parent}",
           f"hydra.run.dir={tmp_path}/run"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics) == {"rag", "graphiti"}
    stats = json.loads((tmp_path / "run" / "graphiti_stats.json").read_text())
    assert stats["question_failures"] == 4 and "not installed (test)" in json.dumps(stats)
    # the side-by-side benchmark reads such a run dir (experiments/bench/peers.py)
    import importlib.util
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "experiments" / "bench" / "peers.py"
    spec = importlib.util.spec_from_file_location("peers_bench", bench)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    summary = mod.summarize(tmp_path / "run")
    assert summary["episodes"] == 18 and summary["failures"]["graphiti"]["questions"] == 4
    assert set(summary["accuracy"]) == {"rag", "graphiti"} and summary["fidelity"]["entity_names_graphiti"] == 0
    assert summary["fidelity"]["contradicted_facts_graphiti"] == 0 and summary["fidelity"]["mem0"] == {}
    assert summary["ingest_prompt_tokens_per_episode"]["peers' server, prompt tokens per episode"] == {
        "graphiti": None, "mem0_oss": None}  # graphiti never reached a server; mem0_oss did not run
    assert mod.per_episode({"prompt_tokens": 150776.0, "requests": 72.0}, 18) == 8376.4
    assert mod.per_episode({}, 18) is None and mod.per_episode({"prompt_tokens": 5.0}, 0) is None
    ours = {"memories": {"c1": 3}, "counters": {"c1": {"op.ADD": 3, "op.NOOP": 2, "bad.bad_id": 1}}}
    oss = {"groups": {"c1": {"memories": 5, "operations": {"ADD": 5}}}}
    assert mod.mem0_fidelity(ours, oss) == {"c1": {"memories_ours": 3, "memories_mem0ai": 5,
                                                   "operations_ours": {"ADD": 3, "NOOP": 2},
                                                   "operations_mem0ai": {"ADD": 5}}}


def test_failures_are_counted_by_type_with_a_few_examples():
    from mnemis.baselines.peers.common import Failures

    f = Failures(keep=2)
    for i in range(3):
        f.record(f"ep{i}", ValueError(f"bad reply {i}"))
    assert f.record("ep9", KeyError("x")).startswith("KeyError")
    assert f.total() == 4 and dict(f.by_type) == {"ValueError": 3, "KeyError": 1}
    assert f.examples == ["ep0: ValueError: bad reply 0", "ep1: ValueError: bad reply 1"]


def test_server_command_sizes_the_window_and_allows_a_long_one_only_when_asked():
    from mnemis.baselines.peers.common import server_options
    from mnemis.models.llm.local_server import server_command

    cmd, env = server_command(server_options(_peers(max_model_len=16384, kv_cache_memory_bytes=512)), "/m", 8123)
    assert cmd[cmd.index("--max-model-len") + 1] == "16384" and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == "512" and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in env
    _, env = server_command(server_options(_peers(allow_long_context=True)), "/m", 1)
    assert env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert run_settings(["experiment=quickstart"]).peers.allow_long_context is True
    assert run_settings([]).peers.allow_long_context is False


def test_a_server_that_never_comes_up_is_stopped_and_the_next_method_starts_its_own(monkeypatch, tmp_path):
    """A start that times out kills the half-started server, so the next peer method does not send its
    requests to it (which failed every Mem0 add with 'Connection error' once); a ready server is shared."""
    from mnemis.models.llm import local_server

    ready_script = tmp_path / "serve.py"
    ready_script.write_text(
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    mode = {"ready": False}

    def fake_command(peers, path, port):
        if mode["ready"]:
            return [sys.executable, str(ready_script), str(port)], dict(os.environ)
        return [sys.executable, "-c", "import time; time.sleep(120)"], dict(os.environ)

    monkeypatch.setattr(local_server, "server_command", fake_command)
    llm = {"backend": {"model": str(tmp_path / "some-model")}}
    with pytest.raises(local_server.ServerUnavailable, match="not up within"):
        with local_server.local_endpoint({"server_timeout_s": 1}, llm):
            pass
    assert local_server._SERVERS == {}  # stopped, not left for the next method
    mode["ready"] = True
    try:
        with local_server.local_endpoint({"server_timeout_s": 60}, llm) as (url, model):
            first = local_server._SERVERS[str(tmp_path / "some-model")][1]
        with local_server.local_endpoint({"server_timeout_s": 60}, llm) as (url2, _):
            assert url2 == url and local_server._SERVERS[str(tmp_path / "some-model")][1] is first  # shared
        assert model == "peer"
    finally:
        local_server._stop_servers()
    assert first.poll() is not None
