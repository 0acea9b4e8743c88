"""Files in ``../shared/data/`` beside the repository checkout (LoCoMo and its evaluation side files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_data_file(name: str) -> Path:
    """``../shared/data/<name>`` (not checked for existence)."""
    return SHARED_DATA / name


def load_json_list(path: str | Path, what: str) -> list[Any]:
    """A JSON file whose top level must be a list; errors name the file and ``what`` it should hold."""
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"{what} file not found: {file}")
    data = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{file}: expected a list of {what} entries")
    return data
