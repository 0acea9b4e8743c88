"""``mnemis --help`` lists every command the CLI dispatches, and every dataset name ``mnemis data fetch`` takes."""

from __future__ import annotations

import re
import subprocess
import sys

from mnemis.app.cli import COMMANDS, USAGE
from mnemis.data import beam_files
from mnemis.data.sources import SOURCES


def _commands_in(text: str) -> list[str]:
    block = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^  (\w+) ", block, flags=re.MULTILINE)


def test_help_lists_every_command():
    assert sorted(_commands_in(USAGE)) == sorted(COMMANDS)


def test_help_lists_every_dataset_data_fetch_takes():
    data = USAGE.split("  data ", 1)[1].split("\n  models ", 1)[0]
    names = set(re.findall(r"[\w]+", data))
    assert {*SOURCES, *beam_files.data_keys(), "all"} <= names, sorted({*SOURCES, *beam_files.data_keys()} - names)
    assert {"beam", "locomo_plus", "longmemeval_m"} <= names


def test_the_check_catches_a_missing_command():
    assert "compare" not in _commands_in(USAGE.replace("  compare ", "  "))


def test_mnemis_help_prints_it():
    res = subprocess.run([sys.executable, "-m", "mnemis.app.cli", "--help"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert res.returncode == 0 and res.stderr == USAGE
