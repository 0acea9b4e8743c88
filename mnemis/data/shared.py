"""The JSON-list reader of the evaluation side files (where the files are: ``mnemis.data.sources``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mnemis.data.sources import REPO_SHARED_DATA as SHARED_DATA  # ../shared/data beside the checkout

__all__ = ["SHARED_DATA", "load_json_list"]


def load_json_list(path: str | Path, what: str) -> list[Any]:
    """A JSON file whose top level must be a list; errors name the file and ``what`` it should hold."""
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"{what} file not found: {file}")
    data = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{file}: expected a list of {what} entries")
    return data
