"""Which cores a vLLM CPU engine's threads are bound to: the value, who wins, where it is set (no engine)."""

from __future__ import annotations

import os
import sys
import types

import pytest

from mnemis.models.llm import cpu_threads
from mnemis.models.llm.cpu_threads import (
    BIND_ENV,
    CPU_STEP_TIMEOUT_S,
    STEP_TIMEOUT_ENV,
    bound_engine_env,
    cpu_ranges,
    engine_env,
    server_env,
    threads_bind,
)


def test_cpu_ranges_collapse_consecutive_ids():
    assert cpu_ranges([0, 1]) == "0-1"
    assert cpu_ranges([5, 0, 2, 1, 7, 8]) == "0-2,5,7-8"
    assert cpu_ranges([3]) == "3"
    assert cpu_ranges([]) == ""


def test_all_is_every_allowed_cpu_split_per_rank():
    assert threads_bind("all", cpus=[0, 1]) == "0-1"
    assert threads_bind("all", cpus=[0, 1], ranks=2) == "0|1"
    assert threads_bind("all", cpus=range(8), ranks=2) == "0-3|4-7"
    assert threads_bind("all", cpus=[2, 3, 4, 9, 10], ranks=2) == "2-3|4,9-10"
    assert threads_bind(" ALL ", cpus=[0, 1]) == "0-1"
    with pytest.raises(ValueError, match="1 allowed CPU"):
        threads_bind("all", cpus=[0], ranks=2)


def test_all_defaults_to_this_process_affinity():
    expected = cpu_ranges(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if expected is None:
        pytest.skip("no sched_getaffinity on this platform")
    assert threads_bind("all") == expected


def test_vllm_default_nobind_and_explicit_lists():
    assert threads_bind(None) is None and threads_bind("auto") is None and threads_bind("") is None
    assert threads_bind("nobind") == "nobind"
    assert threads_bind("0-1") == "0-1" and threads_bind("0, 2,3") == "0,2,3"
    assert threads_bind("0-3|4-7", ranks=2) == "0-3|4-7"
    with pytest.raises(ValueError, match="2 '\\|'-separated group"):
        threads_bind("0-3|4-7", ranks=1)
    with pytest.raises(ValueError, match="'both' is not a CPU list"):
        threads_bind("both")
    with pytest.raises(ValueError, match="ranks must be"):
        threads_bind("all", ranks=0)


TIMEOUT = {STEP_TIMEOUT_ENV: str(CPU_STEP_TIMEOUT_S)}


def test_engine_env_only_on_cpu_and_the_users_variables_win():
    assert engine_env("all", on_cpu=True, environ={}, cpus=[0, 1]) == {BIND_ENV: "0-1", **TIMEOUT}
    assert engine_env("all", on_cpu=False, environ={}, cpus=[0, 1]) == {}  # a CUDA machine: nothing set
    assert engine_env("all", on_cpu=True, environ={BIND_ENV: "0"}, cpus=[0, 1]) == TIMEOUT
    assert engine_env("auto", on_cpu=True, environ={}, cpus=[0, 1]) == TIMEOUT
    assert engine_env("0", on_cpu=True, environ={STEP_TIMEOUT_ENV: "60"}) == {BIND_ENV: "0"}


def test_server_env_gives_the_front_end_one_thread_unless_told_otherwise():
    base = {"PATH": "/bin"}
    env = server_env("all", on_cpu=True, environ=base, cpus=[0, 1])
    assert env == {"PATH": "/bin", BIND_ENV: "0-1", "OMP_NUM_THREADS": "1", **TIMEOUT}
    assert base == {"PATH": "/bin"}  # the caller's mapping is not changed
    assert server_env("all", on_cpu=True, environ={**base, "OMP_NUM_THREADS": "4"},
                      cpus=[0, 1])["OMP_NUM_THREADS"] == "4"
    assert server_env("all", on_cpu=False, environ=base, cpus=[0, 1]) == base
    # unbound workers would inherit the front end's count, so a single thread is never forced on them
    assert "OMP_NUM_THREADS" not in server_env("nobind", on_cpu=True, environ=base)
    assert "OMP_NUM_THREADS" not in server_env("all", on_cpu=True, environ={**base, BIND_ENV: "nobind"})
    assert server_env("all", on_cpu=True, environ={**base, BIND_ENV: "0"})[BIND_ENV] == "0"


def test_bound_engine_env_sets_while_starting_then_restores(monkeypatch):
    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.delenv(STEP_TIMEOUT_ENV, raising=False)
    with bound_engine_env("0-1", on_cpu=True) as added:
        assert added == {BIND_ENV: "0-1", **TIMEOUT} and os.environ[BIND_ENV] == "0-1"
    assert BIND_ENV not in os.environ and STEP_TIMEOUT_ENV not in os.environ
    monkeypatch.setenv(BIND_ENV, "1")
    with bound_engine_env("all", on_cpu=True) as added:
        assert added == TIMEOUT and os.environ[BIND_ENV] == "1"
    assert os.environ[BIND_ENV] == "1"
    with pytest.raises(RuntimeError):  # restored when the engine start fails too
        monkeypatch.delenv(BIND_ENV)
        with bound_engine_env("0", on_cpu=True):
            raise RuntimeError("engine failed")
    assert BIND_ENV not in os.environ


@pytest.fixture()
def fake_vllm(monkeypatch):
    """A ``vllm`` module whose ``LLM`` records the binding variable it was started under."""
    seen: list[dict] = []

    class LLM:
        def __init__(self, **kwargs):
            seen.append({"bind": os.environ.get(BIND_ENV), "timeout": os.environ.get(STEP_TIMEOUT_ENV),
                         "kwargs": kwargs})

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr(cpu_threads, "running_on_cpu", lambda: True)
    monkeypatch.setattr(cpu_threads, "allowed_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.delenv(STEP_TIMEOUT_ENV, raising=False)
    return seen


def test_vllm_backend_starts_its_engine_bound_and_leaves_no_trace(fake_vllm, tmp_path):
    from mnemis.models.llm.vllm_backend import VLLMBackend

    VLLMBackend(str(tmp_path))
    VLLMBackend(str(tmp_path), tensor_parallel_size=2)
    VLLMBackend(str(tmp_path), cpu_threads_bind="auto")
    VLLMBackend(str(tmp_path), cpu_threads_bind="1-2")
    assert [s["bind"] for s in fake_vllm] == ["0-3", "0-1|2-3", None, "1-2"]
    assert {s["timeout"] for s in fake_vllm} == {str(CPU_STEP_TIMEOUT_S)}
    assert all("cpu_threads_bind" not in s["kwargs"] for s in fake_vllm)  # ours, not an engine argument
    assert BIND_ENV not in os.environ
    with pytest.raises(ValueError, match="cpu_threads_bind='0-1' has 1"):
        VLLMBackend(str(tmp_path), cpu_threads_bind="0-1", tensor_parallel_size=2)
    assert STEP_TIMEOUT_ENV not in os.environ


def test_vllm_backend_off_cpu_sets_nothing(fake_vllm, monkeypatch, tmp_path):
    from mnemis.models.llm.vllm_backend import VLLMBackend

    monkeypatch.setattr(cpu_threads, "running_on_cpu", lambda: False)
    VLLMBackend(str(tmp_path), tensor_parallel_size=8)  # 8 ranks on 4 CPUs is fine on a GPU
    assert fake_vllm[-1]["bind"] is None and fake_vllm[-1]["timeout"] is None


def test_peers_server_gets_the_llm_configs_binding(monkeypatch, tmp_path):
    from mnemis.baselines.peers.common import server_options
    from mnemis.models.llm import local_server
    from tests.helpers.compose import peers_settings

    monkeypatch.setattr(cpu_threads, "running_on_cpu", lambda: True)
    monkeypatch.setattr(cpu_threads, "allowed_cpus", lambda: [0, 1])
    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cmd, env = local_server.server_command(server_options(peers_settings()), "/m", 8123)
    assert "vllm.entrypoints.openai.api_server" in cmd
    assert env[BIND_ENV] == "0-1" and env["OMP_NUM_THREADS"] == "1"
    assert BIND_ENV not in local_server.server_command(server_options(peers_settings(cpu_threads_bind="auto")), "/m", 1)[1]

    sent = []

    def fake_command(peers, path, port):
        sent.append(peers)
        raise RuntimeError("stop before starting anything")

    monkeypatch.setattr(local_server, "server_command", fake_command)
    for peers, backend, expected in [({}, {"cpu_threads_bind": "0"}, "0"), ({}, {}, None),
                                     ({"cpu_threads_bind": "1"}, {"cpu_threads_bind": "0"}, "1")]:
        llm = {"backend": {"model": str(tmp_path / "m"), **backend}}
        with pytest.raises(RuntimeError, match="stop before"), local_server.local_endpoint(server_options(peers_settings(**peers)), llm):
            pass
        assert sent[-1].get("cpu_threads_bind") == expected
