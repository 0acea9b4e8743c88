"""Resolve ``pip install '.[gpu]'`` in a clean temporary venv for a Linux x86_64 GPU machine, and record the set.

What it checks: pip's own resolver, with none of this machine's pip configuration (only PyPI), (``pip install --dry-run --ignore-installed --report``) on this repository's
``.[gpu]`` for each Python version, for a manylinux x86_64 platform (``--python-version`` / ``--platform``, so
only wheels count, as on a GPU machine that installs them), in a fresh venv with the newest pip; nothing is
installed. The one sdist of the stack, ``antlr4-python3-runtime`` 4.9.3 (pure Python, Hydra's parser), is built
into a wheel first so binary-only resolution can see it. It records every resolved package, the CUDA major
versions the NVIDIA packages bring (``-cuNN`` suffixes; ``cuda-toolkit`` and ``nvidia-cuda-runtime`` versions) and
which package pulls each CUDA 12 one. It also resolves the gpu extra with each FAISS GPU wheel on PyPI in place
of ``faiss-cpu`` and records whether that resolves and which CUDA it brings::

    nice -n 10 python experiments/bench/gpu_extra_resolve.py      # a few minutes: metadata only, no install
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "experiments" / "results" / "gpu_extra_resolve.json"
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
PLATFORMS = [f"manylinux_2_{i}_x86_64" for i in range(39, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
FAISS_GPU = ("faiss-gpu-cu13-cuvs==1.15.0", "faiss-gpu==1.15.1")
SDISTS = ("antlr4-python3-runtime==4.9.3",)


def run(cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
    """``cmd`` niced, without this machine's pip configuration (its config files, local wheel folders, extra
    indexes and constraints): only PyPI, as on a fresh GPU machine. The CA bundle and timeout stay."""
    keep = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=env)


def cuda_major(name: str, version: str) -> int | None:
    m = re.search(r"-cu(\d+)$", name)
    if m:
        return int(m.group(1))
    if name in ("cuda-toolkit", "nvidia-cuda-runtime"):
        return int(version.split(".")[0])
    return None


def summarise(report: dict) -> dict:
    installs = {i["metadata"]["name"].lower(): i["metadata"] for i in report.get("install", [])}
    majors: dict[str, list[str]] = {}
    for name, meta in installs.items():
        major = cuda_major(name, meta["version"])
        if major is not None:
            majors.setdefault(str(major), []).append(f"{name}=={meta['version']}")
    pulled_by: dict[str, list[str]] = {}
    for cu12 in majors.get("12", []):
        dep = cu12.split("==")[0]
        pulled_by[dep] = sorted(n for n, m in installs.items()
                                if any(re.match(rf"{re.escape(dep)}\b", r.lower()) for r in m.get("requires_dist") or []))
    return {"packages": sorted(f"{n}=={m['version']}" for n, m in installs.items()),
            "n_packages": len(installs), "cuda_majors": {k: sorted(v) for k, v in sorted(majors.items())},
            "cuda12_pulled_by": pulled_by,
            "key": {n: installs[n]["version"] for n in ("vllm", "torch", "cuda-toolkit", "nvidia-cuda-runtime",
                                                        "faiss-cpu", "faiss-gpu", "faiss-gpu-cu13-cuvs") if n in installs}}


def resolve(pip: str, python: str, reqs: list[str], wheels: Path, work: Path, timeout: int) -> dict:
    report = work / f"report-{python}-{abs(hash(tuple(reqs)))}.json"
    cmd = [pip, "install", "--dry-run", "--ignore-installed", "--report", str(report),
           "--python-version", python, *sum((["--platform", p] for p in PLATFORMS), []), "--only-binary=:all:",
           "--find-links", str(wheels), "--target", str(work / "target"), *reqs]
    t0 = time.monotonic()
    res = run(cmd, timeout)
    out = {"python": python, "requirements": reqs, "resolved": res.returncode == 0,
           "seconds": round(time.monotonic() - t0, 1)}
    if res.returncode == 0:
        out.update(summarise(json.loads(report.read_text())))
    else:
        lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip() and "is ignored" not in ln]
        cause = [ln.strip() for ln in lines if "depends on" in ln or "ERROR" in ln or "requires" in ln.lower()]
        out["error"] = cause[:12] or lines[-12:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", default=",".join(PYTHONS))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per resolution")
    ap.add_argument("--alternatives-only", action="store_true",
                    help="resolve only the FAISS GPU alternatives; keep the JSON's .[gpu] resolutions")
    args = ap.parse_args()
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    with tempfile.TemporaryDirectory(prefix="gpu_extra_") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        pip = str(work / "venv" / "bin" / "pip")
        run([pip, "install", "--quiet", "--upgrade", "pip"], args.timeout)
        pip_version = run([pip, "--version"], 60).stdout.split()[1]
        wheels = work / "wheels"
        run([pip, "wheel", "--no-deps", "--quiet", "-w", str(wheels), *SDISTS], args.timeout)
        pythons = [p for p in args.pythons.split(",") if p]
        if args.alternatives_only:
            results = json.loads(OUT.read_text())["resolutions"]
        else:
            results = [resolve(pip, py, [".[gpu]"], wheels, work, args.timeout) for py in pythons]
        ok = [r for r in results if r["resolved"]]
        alt_py = "3.12" if any(r["python"] == "3.12" for r in ok) else (ok[0]["python"] if ok else pythons[0])
        base = [r for r in extra if not r.startswith("faiss")]
        alternatives = [resolve(pip, alt_py, [".", *base, faiss], wheels, work, args.timeout) for faiss in FAISS_GPU]
    doc = {
        "what": "pip's resolution of `pip install '.[gpu]'` for Linux x86_64 (manylinux, wheels only) in a clean "
                "venv, per Python version; and of the gpu extra with each FAISS GPU wheel instead of faiss-cpu",
        "command": "python experiments/bench/gpu_extra_resolve.py", "pip": pip_version,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "built_from_sdist": list(SDISTS), "gpu_extra": extra,
        "pythons_resolved": [r["python"] for r in ok], "pythons_refused": [r["python"] for r in results if not r["resolved"]],
        "one_cuda_major_per_python": {r["python"]: sorted(r["cuda_majors"]) for r in ok},
        "resolutions": results, "faiss_gpu_alternatives": alternatives,
    }
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{OUT}: .[gpu] resolves on Python {', '.join(doc['pythons_resolved']) or 'none'}; CUDA majors "
          f"{doc['one_cuda_major_per_python']}; FAISS GPU alternatives: "
          + "; ".join(f"{a['requirements'][-1]} {'resolves, CUDA ' + ','.join(a['cuda_majors']) if a['resolved'] else 'does not resolve'}"
                      for a in alternatives))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
