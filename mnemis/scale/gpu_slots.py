"""One GPU set per local worker process: ``CUDA_VISIBLE_DEVICES`` for the joblib launcher's workers.

Hydra's joblib launcher starts ``n_jobs`` worker processes that all inherit every GPU of the node, so every
worker's engine, embedder and reranker would land on GPU 0. A worker instead claims a slot before it builds
any model: slot ``k`` is ``gpus_per_job`` consecutive GPUs of those visible, held by an exclusive ``flock`` on
``<lock_dir>/slot<k>.lock`` for the worker's whole life (its models stay cached on those GPUs between jobs;
the lock goes when the process ends, even when it is killed). More workers than slots is an error naming both.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

_HELD: dict[str, tuple[int, list[str]]] = {}  # lock dir -> (open lock fd, the GPUs claimed) of this process


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``'s indexes."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_VISIBLE_DEVICES") is not None:
        return [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(k) for k, line in enumerate(ln for ln in out.splitlines() if ln.startswith("GPU "))]


def claim_gpus(per_job: int, visible: list[str], lock_dir: str | os.PathLike[str]) -> list[str]:
    """The GPUs of a free slot (the same ones on every call from this process); raises when every slot is held."""
    lock_dir = Path(lock_dir)
    key = str(lock_dir.resolve())
    if key in _HELD:
        return _HELD[key][1]
    if per_job < 1:
        raise ValueError(f"gpus_per_job must be >= 1, got {per_job}")
    n_slots = len(visible) // per_job
    lock_dir.mkdir(parents=True, exist_ok=True)
    for k in range(n_slots):
        fd = os.open(lock_dir / f"slot{k}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        gpus = visible[k * per_job:(k + 1) * per_job]
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {','.join(gpus)}\n".encode())
        _HELD[key] = (fd, gpus)
        return gpus
    raise RuntimeError(f"no free GPU slot: {len(visible)} GPU(s) ({','.join(visible) or 'none'}) make {n_slots} "
                       f"slot(s) of {per_job} and every one is held by another worker: run at most {n_slots} "
                       "workers at once (hydra.launcher.n_jobs)")


def pin_worker(per_job: int, lock_dir: str | os.PathLike[str], environ: dict[str, str] | None = None) -> list[str]:
    """Claim a slot and set ``CUDA_VISIBLE_DEVICES`` to it (before any CUDA use); [] when there is no GPU."""
    env = os.environ if environ is None else environ
    visible = visible_gpus(env)
    if per_job < 1 or not visible:
        return []
    gpus = claim_gpus(per_job, visible, lock_dir)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return gpus
