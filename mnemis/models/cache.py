"""Content-addressed on-disk response cache for LLM calls.

Key = sha256 over (model identity, messages, JSON schema, sampling params). The model identity is
``backend.model_id`` (a name plus a hash of the weight files, never a local path), so two machines
with the same weights share entries. Storage is one SQLite database per cache dir in WAL mode with a
busy timeout: several processes (sweep workers) can read and write the same directory at once.
Every request's **final outcome** is stored: the reply used, or the last reply and the error of a request
that failed all its attempts (``error`` not NULL), so ``replay_only`` reproduces a run failures and all.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mnemis.models.llm.base import LLMRequest

CacheMode = Literal["readwrite", "replay_only", "off"]
MODES: tuple[str, ...] = ("readwrite", "replay_only", "off")


class CacheMissError(RuntimeError):
    """Raised in ``replay_only`` mode when a request has no stored response."""

    def __init__(self, stage: str, n_missing: int, example_key: str) -> None:
        super().__init__(
            f"replay_only cache miss in stage {stage!r}: {n_missing} request(s) have no stored response "
            f"(first key {example_key[:16]}...). Re-run with cache_mode=readwrite to fill the cache."
        )
        self.stage = stage
        self.n_missing = n_missing


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    error: str | None = None  # set: the request failed every attempt (text = its last reply)
    finish_reason: str | None = None
    retries: int = 0


def request_key(model_id: str, request: LLMRequest) -> str:
    """sha256 hex digest identifying one request for one model."""
    payload = {
        "model": model_id,
        "messages": request.messages,
        "schema": request.json_schema(),
        "sampling": request.sampling.model_dump(mode="json"),
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """SQLite-backed key -> reply store, safe for concurrent processes and threads."""

    def __init__(self, cache_dir: str | os.PathLike[str], *, busy_timeout_s: float = 60.0) -> None:
        self.dir = Path(cache_dir).expanduser()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "responses.sqlite"
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._init_db()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self._busy_ms / 1000, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _init_db(self) -> None:
        conn = self._conn()
        for attempt in range(50):
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, "
                    "stage TEXT, text TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, "
                    "created REAL)"
                )
                have = {row[1] for row in conn.execute("PRAGMA table_info(responses)")}
                for col, typ in (("error", "TEXT"), ("finish_reason", "TEXT"), ("retries", "INTEGER")):
                    if col not in have:  # a cache written before failures were recorded
                        conn.execute(f"ALTER TABLE responses ADD COLUMN {col} {typ}")
                return
            except sqlite3.OperationalError:  # another process is creating it right now
                if attempt == 49:
                    raise
                time.sleep(0.05)

    def get_many(self, keys: Sequence[str]) -> dict[str, CachedReply]:
        """Stored replies for those ``keys`` that exist."""
        out: dict[str, CachedReply] = {}
        conn = self._conn()
        uniq = list(dict.fromkeys(keys))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                "SELECT key, text, prompt_tokens, completion_tokens, error, finish_reason, retries "
                f"FROM responses WHERE key IN ({marks})",
                chunk,
            ).fetchall()
            for key, text, pt, ct, err, finish, retries in rows:
                out[key] = CachedReply(text, int(pt or 0), int(ct or 0), err, finish, int(retries or 0))
        return out

    def put_many(self, items: Iterable[tuple[str, str, str, CachedReply]]) -> int:
        """Store ``(key, model_id, stage, reply)`` tuples in one transaction; returns the count."""
        rows = [
            (key, model, stage, r.text, r.prompt_tokens, r.completion_tokens, time.time(), r.error,
             r.finish_reason, r.retries)
            for key, model, stage, r in items
        ]
        if not rows:
            return 0
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT OR REPLACE INTO responses (key, model, stage, text, prompt_tokens, completion_tokens, "
                "created, error, finish_reason, retries) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return len(rows)

    def failures(self) -> int:
        """How many stored outcomes are failures."""
        return int(self._conn().execute("SELECT COUNT(*) FROM responses WHERE error IS NOT NULL").fetchone()[0])

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
