"""Resumable evaluation stages: an append-only JSONL of finished items in the run dir.

Answering and judging send their requests in chunks of ``llm.chunk_size`` and append each finished
chunk here (flushed and fsynced), so a killed evaluation rerun in the same run dir
(``hydra.run.dir=<that dir>``) skips what is done, even without the response cache. An item is keyed by
a hash of its request (messages and sampling), so a changed context or prompt is asked again. A line
torn by a kill mid-write is ignored (its chunk is asked again).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mnemis.models.llm.chunks import request_fingerprint

log = logging.getLogger(__name__)
PROGRESS_DIR = "progress"


item_key = request_fingerprint  # what identifies one evaluation item: its messages and sampling


class JsonlProgress:
    """``{"key": ..., **row}`` lines; later lines win."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        torn = 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                out[str(row["key"])] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                torn += 1
        if torn:
            log.warning("%s: %d unreadable line(s) ignored (a kill mid-write); those items are redone",
                        self.path, torn)
        return out

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        text = "".join(json.dumps(dict(r), ensure_ascii=False, default=str) + "\n" for r in rows)
        if not text:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def progress_file(run_dir: str | os.PathLike[str], stage: str, method: str, seed: int) -> Path:
    """``<run_dir>/progress/<stage>.<method>.<seed>.jsonl``."""
    return Path(run_dir) / PROGRESS_DIR / f"{stage}.{method}.{seed}.jsonl"
