"""The README's library snippet, saved to a file and run with ``python file.py`` as a newcomer would (no
``if __name__ == "__main__":`` guard): it works, with the real tiny model, and prints little besides its answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def test_the_readme_snippet_runs_as_a_plain_script_quietly(tmp_path):
    script = tmp_path / "my_memory.py"
    script.write_text(readme_snippet())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
           "PYTHONPATH": str(REPO)}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=1500,
                         env=env, check=False)
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 0, out[-3000:]
    assert "bootstrapping phase" not in out
    printed = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert printed and re.match(r"alice:\S+ \S", printed[-1]), printed[-5:]  # the snippet's print: an id, an answer
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) <= MAX_LINES, "\n".join(lines[:40])
