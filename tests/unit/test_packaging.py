from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "mnemis").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found | {"mnemis.kernels", "hydra_plugins.mnemis_ray_launcher"} == listed


def test_importing_mnemis_is_light():
    import subprocess
    import sys

    code = "import sys, mnemis, mnemis.store, mnemis.app.jobs; print(sorted(m for m in ('vllm','faiss','triton','torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
