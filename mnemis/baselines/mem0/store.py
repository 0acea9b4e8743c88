"""The Mem0 baseline's memory store: its own SQLite file (e.g. ``<work_dir>/mem0.sqlite``).

Tables: ``memories`` (live and soft-deleted memories with their embedding), ``history`` (every
decision, in order: operation, old text, new text, time), ``summaries`` (the running conversation
summary of each group and how many messages it covers), ``progress`` (message pairs done) and
``meta`` (cumulative counters per group), and Mem0g's triple graph: ``graph_nodes`` (typed entities)
and ``graph_relations`` (``source -relation-> destination`` with the time it was stated and, once a later
relation made it obsolete, ``invalid_at``). Every row carries ``group_id`` (a memory store key: the
group, or ``<group>::<speaker>``) and every query filters by it. A DELETE only sets ``deleted = 1``;
:meth:`Mem0Store.restore` brings a memory back from its history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from mnemis.sqlite_file import SQLiteFile

SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    group_id TEXT NOT NULL, id TEXT NOT NULL, text TEXT NOT NULL, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0, episode_ids TEXT NOT NULL DEFAULT '',
    dim INTEGER NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (group_id, id));
CREATE TABLE IF NOT EXISTS history (
    group_id TEXT NOT NULL, seq INTEGER NOT NULL, memory_id TEXT, operation TEXT NOT NULL,
    old_text TEXT, new_text TEXT, time TEXT NOT NULL, pair_id TEXT NOT NULL, fact TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '', PRIMARY KEY (group_id, seq));
CREATE TABLE IF NOT EXISTS summaries (
    group_id TEXT PRIMARY KEY, text TEXT NOT NULL, covered INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
    group_id TEXT NOT NULL, stage TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (group_id, stage, key));
CREATE TABLE IF NOT EXISTS meta (
    group_id TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (group_id, key));
CREATE TABLE IF NOT EXISTS graph_nodes (
    group_id TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
    dim INTEGER NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (group_id, id));
CREATE TABLE IF NOT EXISTS graph_relations (
    group_id TEXT NOT NULL, id TEXT NOT NULL, source_id TEXT NOT NULL, relation TEXT NOT NULL,
    target_id TEXT NOT NULL, created_at TEXT NOT NULL, invalid_at TEXT, episode_ids TEXT NOT NULL DEFAULT '',
    dim INTEGER NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (group_id, id));
"""


@dataclass
class Node:
    """A Mem0g entity node: name, type (its label) and the L2-normalised name embedding."""

    group_id: str
    id: str
    name: str
    type: str
    vec: np.ndarray


@dataclass
class Relation:
    """A Mem0g edge ``source -relation-> target``; ``invalid_at`` is set (never deleted) once obsolete.
    ``vec`` embeds the triple's text."""

    group_id: str
    id: str
    source_id: str
    relation: str
    target_id: str
    created_at: datetime
    invalid_at: datetime | None
    episode_ids: list[str]
    vec: np.ndarray


def _blob(v: np.ndarray) -> tuple[int, bytes]:
    v = np.asarray(v, dtype=np.float32)
    return int(v.shape[0]), v.tobytes()


@dataclass
class Memory:
    """One stored memory. ``vec`` is its L2-normalised embedding."""

    group_id: str
    id: str
    text: str
    created_at: datetime
    updated_at: datetime
    deleted: bool
    episode_ids: list[str]
    vec: np.ndarray


@dataclass
class HistoryRow:
    group_id: str
    seq: int
    memory_id: str | None
    operation: str
    old_text: str | None
    new_text: str | None
    time: datetime
    pair_id: str
    fact: str
    reason: str


class Mem0Store(SQLiteFile):
    """SQLite store of Mem0 memories for many groups (one file, safe to share between threads)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._create(SCHEMA)

    # ---------------------------------------------------------------- memories
    def put_memories(self, memories: Sequence[Memory]) -> None:
        """Insert or replace ``memories`` (text, times, deleted flag and embedding)."""
        rows = [(m.group_id, m.id, m.text, m.created_at.isoformat(), m.updated_at.isoformat(), int(m.deleted),
                 "\x1f".join(m.episode_ids), int(np.asarray(m.vec).shape[0]),
                 np.asarray(m.vec, dtype=np.float32).tobytes()) for m in memories]
        with self.transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO memories VALUES (?,?,?,?,?,?,?,?,?)", rows)

    def memories(self, group_id: str, *, include_deleted: bool = False,
                 ids: Iterable[str] | None = None) -> list[Memory]:
        """Memories of ``group_id`` in creation order (live only unless ``include_deleted``)."""
        sql = "SELECT * FROM memories WHERE group_id=?" + ("" if include_deleted else " AND deleted=0")
        rows = self._rows(sql + " ORDER BY created_at, rowid", (group_id,))
        wanted = set(ids) if ids is not None else None
        out = []
        for g, mid, text, created, updated, deleted, eps, _dim, blob in rows:
            if wanted is not None and mid not in wanted:
                continue
            out.append(Memory(g, mid, text, datetime.fromisoformat(created), datetime.fromisoformat(updated),
                              bool(deleted), [e for e in eps.split("\x1f") if e],
                              np.frombuffer(blob, dtype=np.float32).copy()))
        return out

    def count(self, group_id: str, *, include_deleted: bool = False) -> int:
        sql = "SELECT count(*) FROM memories WHERE group_id=?" + ("" if include_deleted else " AND deleted=0")
        return int(self._rows(sql, (group_id,))[0][0])

    # ---------------------------------------------------------------- history
    def add_history(self, rows: Sequence[HistoryRow]) -> None:
        with self.transaction() as cur:
            cur.executemany("INSERT INTO history VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (r.group_id, r.seq, r.memory_id, r.operation, r.old_text, r.new_text, r.time.isoformat(),
                 r.pair_id, r.fact, r.reason) for r in rows])

    def next_seq(self, group_id: str) -> int:
        return int(self._rows("SELECT coalesce(max(seq), -1) + 1 FROM history WHERE group_id=?", (group_id,))[0][0])

    def history(self, group_id: str, memory_id: str | None = None) -> list[HistoryRow]:
        """Decisions of ``group_id`` in order (only those naming ``memory_id`` when given)."""
        sql, args = "SELECT * FROM history WHERE group_id=?", [group_id]
        if memory_id is not None:
            sql, args = sql + " AND memory_id=?", [group_id, memory_id]
        return [HistoryRow(g, s, m, op, o, n, datetime.fromisoformat(t), p, f, r)
                for g, s, m, op, o, n, t, p, f, r in self._rows(sql + " ORDER BY seq", args)]

    def restore(self, group_id: str, memory_id: str, time: datetime | None = None) -> Memory:
        """Undo the last DELETE of ``memory_id``: the memory is live again with the text it had
        (taken from the history), and a RESTORE row is written. Raises KeyError if it was never deleted."""
        dels = [h for h in self.history(group_id, memory_id) if h.operation == "DELETE" and not h.reason]
        found = self.memories(group_id, include_deleted=True, ids=[memory_id])
        if not dels or not found or not found[0].deleted:
            raise KeyError(f"memory {memory_id!r} of group {group_id!r} is not deleted")
        mem, last = found[0], dels[-1]
        when = time or last.time
        mem.text, mem.deleted, mem.updated_at = last.old_text or mem.text, False, when
        with self.transaction():
            self.put_memories([mem])
            self.add_history([HistoryRow(group_id, self.next_seq(group_id), memory_id, "RESTORE", None, mem.text,
                                         when, last.pair_id, "", "")])
        return mem

    # ---------------------------------------------------------------- Mem0g triple graph
    def put_nodes(self, nodes: Sequence[Node]) -> None:
        with self.transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO graph_nodes VALUES (?,?,?,?,?,?)",
                            [(n.group_id, n.id, n.name, n.type, *_blob(n.vec)) for n in nodes])

    def nodes(self, group_id: str) -> list[Node]:
        return [Node(g, i, name, typ, np.frombuffer(blob, dtype=np.float32).copy()) for g, i, name, typ, _d, blob
                in self._rows("SELECT * FROM graph_nodes WHERE group_id=? ORDER BY rowid", (group_id,))]

    def put_relations(self, relations: Sequence[Relation]) -> None:
        with self.transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO graph_relations VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (r.group_id, r.id, r.source_id, r.relation, r.target_id, r.created_at.isoformat(),
                 r.invalid_at.isoformat() if r.invalid_at else None, "\x1f".join(r.episode_ids), *_blob(r.vec))
                for r in relations])

    def relations(self, group_id: str) -> list[Relation]:
        """Every relation of ``group_id`` (valid and invalidated) in insertion order."""
        return [Relation(g, i, s, rel, t, datetime.fromisoformat(c), datetime.fromisoformat(inv) if inv else None,
                         [e for e in eps.split("\x1f") if e], np.frombuffer(blob, dtype=np.float32).copy())
                for g, i, s, rel, t, c, inv, eps, _d, blob
                in self._rows("SELECT * FROM graph_relations WHERE group_id=? ORDER BY created_at, id", (group_id,))]

    # ---------------------------------------------------------------- summaries, progress, meta
    def summary(self, group_id: str) -> tuple[str, int]:
        """(summary text, number of messages it covers); ``("", 0)`` before the first refresh."""
        rows = self._rows("SELECT text, covered FROM summaries WHERE group_id=?", (group_id,))
        return (rows[0][0], int(rows[0][1])) if rows else ("", 0)

    def set_summary(self, group_id: str, text: str, covered: int) -> None:
        with self.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO summaries VALUES (?,?,?)", (group_id, text, int(covered)))

    def mark_done(self, stage: str, group_id: str, keys: Iterable[str]) -> None:
        with self.transaction() as cur:
            cur.executemany("INSERT OR IGNORE INTO progress VALUES (?,?,?)", [(group_id, stage, k) for k in keys])

    def done(self, stage: str, group_id: str) -> set[str]:
        return {r[0] for r in self._rows("SELECT key FROM progress WHERE group_id=? AND stage=?", (group_id, stage))}

    def bump(self, group_id: str, counters: Mapping[str, int]) -> None:
        """Add ``counters`` to the group's cumulative totals (call inside the step's transaction)."""
        with self.transaction() as cur:
            for k, v in counters.items():
                if v:
                    cur.execute("INSERT INTO meta VALUES (?, ?, ?) ON CONFLICT(group_id, key) "
                                "DO UPDATE SET value = value + ?", (group_id, k, int(v), int(v)))

    def totals(self, group_id: str) -> dict[str, int]:
        """Cumulative counters of ``group_id``."""
        return {k: int(v) for k, v in self._rows("SELECT key, value FROM meta WHERE group_id=? ORDER BY key",
                                                 (group_id,))}
