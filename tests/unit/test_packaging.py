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
    assert found | {"mnemis.kernels", "mnemis.conf", "hydra_plugins.mnemis_ray_launcher"} == listed


def test_importing_mnemis_is_light():
    import subprocess
    import sys

    code = "import sys, mnemis, mnemis.store, mnemis.app.jobs; print(sorted(m for m in ('vllm','faiss','triton','torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_library_entry_loads_neither_hydra_nor_omegaconf():
    """``import mnemis`` and ``from mnemis import Memory`` are the library: the config tree (Hydra, OmegaConf) is
    loaded only when a config is composed (``Memory.from_config``, the CLI), deferred imports included."""
    import subprocess
    import sys

    code = ("import sys, mnemis; from mnemis import Memory; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_config_tree_ships_inside_the_package():
    """pyproject installs conf/ as ``mnemis.conf`` with every YAML as package data, so a wheel has its configs."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert pyproject["package-dir"]["mnemis.conf"] == "conf"
    assert "**/*.yaml" in pyproject["package-data"]["mnemis.conf"]
    from mnemis.config import CONF_DIR

    assert (CONF_DIR / "config.yaml").is_file()
