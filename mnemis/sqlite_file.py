"""One SQLite file with WAL, a lock, and nestable transactions (the graph store, the model caches and the Mem0 store
all open their files through it)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

log = logging.getLogger(__name__)
BUSY_TIMEOUT_S = 30.0  # how long a statement waits for another connection's lock


def file_uri(path: str | Path, mode: str) -> str:
    """``file:`` URI of ``path`` with every URI character escaped (``#``, ``?``, ``%`` are part of the
    file name, never a fragment, query or escape); ``mode`` is ``ro``, ``rw`` or ``rwc``."""
    return f"file:{quote(str(Path(path).absolute()), safe='/')}?mode={mode}"


class SQLiteFile:
    """A SQLite database file used from one process (safe to share between its threads).

    ``wal=False`` leaves the journal mode alone until :meth:`enable_wal` (a subclass that first checks
    the file is its own, so a foreign file is never switched to WAL).
    """

    def __init__(self, path: str | Path, *, read_only: bool = False, wal: bool = True) -> None:
        self.path = Path(path)
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        uri = file_uri(self.path, "ro" if read_only else "rwc")
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        self._conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        self._lock = threading.RLock()
        self._depth = 0
        if wal and not read_only:
            self.enable_wal()

    def enable_wal(self) -> None:
        """Switch the file to WAL. SQLite answers "database is locked" to this pragma at once, without its
        busy handler, while another process holds the file (two processes opening a new file together), so
        it is retried here for as long as the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        pause = 0.005
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.2)
        if str(mode).lower() != "wal":  # e.g. a file system without shared memory: readers then wait for writers
            log.warning("%s: SQLite kept journal mode %s instead of WAL", self.path, mode)
        self._conn.execute("PRAGMA synchronous=NORMAL")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One transaction; nested calls join the outer one. Rolls back on any exception."""
        with self._lock:
            cur = self._conn.cursor()
            outer = self._depth == 0
            if outer:
                cur.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield cur
            except BaseException:
                self._depth -= 1
                if outer:
                    cur.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                cur.execute("COMMIT")

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, tuple(args)).fetchall()

    def _create(self, schema: str) -> None:
        with self.transaction() as cur:
            for stmt in schema.strip().split(";"):
                if stmt.strip():
                    cur.execute(stmt)
