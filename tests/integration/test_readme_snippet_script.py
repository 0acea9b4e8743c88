"""The README's library snippet, saved to a file and run with ``python file.py`` as a newcomer would (no
``if __name__ == "__main__":`` guard), **from the installed wheel** in a fresh venv outside the repository: it
works, with the real tiny model, and prints little besides its answer; ``mnemis --help`` works there too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 15  # the snippet's own line and a few of ours (progress, the memory's path): no library's banners


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    snippet = next(b for b in blocks if "from mnemis import Memory" in b)
    assert "__main__" not in snippet  # as written for a newcomer: no guard
    return snippet


def installed_wheel_venv(where: Path) -> Path:
    """A fresh venv at ``where`` with the wheel of this checkout installed (no source tree on its path); its
    third-party dependencies come from the running interpreter's site-packages through a ``.pth`` line (no
    download), and that line adds no ``.pth`` of its own, so the checkout's editable install stays out."""
    wheels = where / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    deps = sysconfig.get_paths()["purelib"]
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "mnemis_test_deps.pth").write_text(deps + "\n")
    wheel = next(wheels.glob("mnemis-*.whl"))
    # without PYTHONPATH: a source tree on it (with the egg-info the wheel build leaves there) would make pip see
    # mnemis as installed already and skip the wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=env)
    return venv


def test_the_readme_snippet_runs_from_the_installed_wheel_quietly(tmp_path):
    venv = installed_wheel_venv(tmp_path / "install")
    work = tmp_path / "user"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"})
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import mnemis, mnemis.config as c; "
                            "print(mnemis.__file__); print(c.CONF_DIR)"], cwd=work, env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the wheel's copy and its packaged configs
    helped = subprocess.run([str(venv / "bin" / "mnemis"), "--help"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert helped.returncode == 0 and "usage: mnemis" in helped.stdout + helped.stderr, helped.stderr[-2000:]
    script = work / "my_memory.py"
    script.write_text(readme_snippet())
    res = subprocess.run([str(venv / "bin" / "python"), str(script)], cwd=work, capture_output=True, text=True,
                         timeout=1500, env=env, check=False)
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 0, out[-3000:]
    assert "bootstrapping phase" not in out
    printed = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert printed and re.match(r"alice:\S+ \S", printed[-1]), printed[-5:]  # the snippet's print: an id, an answer
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) <= MAX_LINES, "\n".join(lines[:40])
