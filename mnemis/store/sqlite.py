"""SQLite graph store: the store of record for one memory (DESIGN §5).

One database file per memory, WAL mode. Every table carries ``group_id`` and every public
method takes a ``group_id`` (or records that carry one): no call can return another group's
rows. Writes take a batch and run in one transaction; upserts are idempotent because ids are
deterministic. Embeddings live in their own table as float32 blobs and come back as one
``[N, d]`` array per (group, kind).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel

from mnemis.sqlite_file import SQLiteFile
from mnemis.types import Category, CategoryEdge, Entity, Episode, Fact, Mention, Question

SCHEMA_VERSION = 1

_RECORD_TABLES: dict[type[BaseModel], str] = {
    Episode: "episodes",
    Entity: "entities",
    Fact: "facts",
    Category: "categories",
    Question: "questions",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (group_id TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (group_id, id));
CREATE INDEX IF NOT EXISTS episodes_pos ON episodes (group_id, pos);
CREATE TABLE IF NOT EXISTS entities (group_id TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (group_id, id));
CREATE TABLE IF NOT EXISTS facts (group_id TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL,
    source_id TEXT NOT NULL, target_id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (group_id, id));
CREATE INDEX IF NOT EXISTS facts_ends ON facts (group_id, source_id, target_id);
CREATE TABLE IF NOT EXISTS categories (group_id TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL,
    layer INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (group_id, id));
CREATE TABLE IF NOT EXISTS category_edges (group_id TEXT NOT NULL, parent_id TEXT NOT NULL,
    child_id TEXT NOT NULL, PRIMARY KEY (group_id, parent_id, child_id));
CREATE TABLE IF NOT EXISTS questions (group_id TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (group_id, id));
CREATE TABLE IF NOT EXISTS mentions (group_id TEXT NOT NULL, episode_id TEXT NOT NULL,
    entity_id TEXT NOT NULL, PRIMARY KEY (group_id, episode_id, entity_id));
CREATE INDEX IF NOT EXISTS mentions_entity ON mentions (group_id, entity_id);
CREATE TABLE IF NOT EXISTS embeddings (group_id TEXT NOT NULL, kind TEXT NOT NULL, item_id TEXT NOT NULL,
    pos INTEGER NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (group_id, kind, item_id));
CREATE TABLE IF NOT EXISTS progress (stage TEXT NOT NULL, group_id TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (stage, group_id, key));
"""

R = TypeVar("R", bound=BaseModel)


class StoreError(RuntimeError):
    """A store that cannot be used as asked (wrong schema, bad data); nothing was changed."""


class GraphStore(SQLiteFile):
    """The SQLite store of one memory. Safe to share between threads of one process."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        if read_only and not Path(path).is_file():
            raise StoreError(f"store {path} does not exist")
        super().__init__(path, read_only=read_only, wal=False)
        try:
            self._check_schema(read_only)
        except sqlite3.DatabaseError as exc:  # not an SQLite file at all ("file is not a database")
            self.close()
            raise StoreError(f"{self.path} is not a mnemis store ({exc}); the file was left untouched") from None
        except BaseException:
            self.close()
            raise
        if not read_only:
            self.enable_wal()  # only once the file is known to be ours

    # ------------------------------------------------------------------ schema
    def _schema_state(self) -> tuple[int | None, int]:
        """(schema version recorded in ``meta`` or None, number of tables in the file)."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            return None, len(tables)
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return (int(row[0]) if row and str(row[0]).isdigit() else -1), len(tables)

    def _check_schema(self, read_only: bool) -> None:
        found, tables = self._schema_state()
        if found is None and tables == 0 and not read_only:
            # a new file: create it in one write transaction that re-reads the state, so two processes
            # creating the same file at once both end with one schema (the second finds the first's)
            with self.transaction() as cur:
                found, tables = self._schema_state()
                if found is None and tables == 0:
                    self._create(_SCHEMA)
                    cur.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                    return
        if found is None:
            if tables:
                raise StoreError(f"{self.path} is an SQLite file but not a mnemis store; the file was left untouched")
            raise StoreError(f"store {self.path} is empty")
        if found != SCHEMA_VERSION:
            raise StoreError(
                f"store {self.path} has schema version {found}, this mnemis needs {SCHEMA_VERSION}; "
                "the file was left untouched (rebuild the memory into a new path)"
            )

    # ------------------------------------------------------------------ meta
    def set_meta(self, key: str, value: object) -> None:
        with self.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: object = None) -> object:
        rows = self._rows("SELECT value FROM meta WHERE key=?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def groups(self) -> list[str]:
        """Every group that has at least one episode, in first-insert order."""
        rows = self._rows("SELECT group_id, min(rowid) FROM episodes GROUP BY group_id ORDER BY 2", ())
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ records
    def _upsert(self, records: Sequence[R]) -> None:
        if not records:
            return
        table = _RECORD_TABLES[type(records[0])]
        next_pos: dict[str, int] = {}  # per group, read once per call: one max() per record made big batches O(n^2)
        with self.transaction() as cur:
            for rec in records:
                if type(rec) is not type(records[0]):
                    raise StoreError(f"mixed record types in one upsert into {table}")
                data = rec.model_dump_json()
                gid, rid = rec.group_id, rec.id  # type: ignore[attr-defined]
                old = cur.execute(f"SELECT pos FROM {table} WHERE group_id=? AND id=?", (gid, rid)).fetchone()
                if old is not None:
                    pos = old[0]
                elif isinstance(rec, Episode):
                    pos = rec.position
                else:
                    if gid not in next_pos:
                        next_pos[gid] = cur.execute(
                            f"SELECT coalesce(max(pos) + 1, 0) FROM {table} WHERE group_id=?", (gid,)
                        ).fetchone()[0]
                    pos = next_pos[gid]
                    next_pos[gid] += 1
                if isinstance(rec, Fact):
                    cur.execute(
                        "INSERT OR REPLACE INTO facts VALUES (?,?,?,?,?,?)",
                        (gid, rid, pos, rec.source_id, rec.target_id, data),
                    )
                elif isinstance(rec, Category):
                    cur.execute("INSERT OR REPLACE INTO categories VALUES (?,?,?,?,?)", (gid, rid, pos, rec.layer, data))
                else:
                    cur.execute(f"INSERT OR REPLACE INTO {table} VALUES (?,?,?,?)", (gid, rid, pos, data))

    def _get(self, cls: type[R], group_id: str, ids: Iterable[str] | None, where: str = "", args=()) -> list[R]:
        table = _RECORD_TABLES[cls]
        sql = f"SELECT data FROM {table} WHERE group_id=? {where}"
        if ids is None:
            rows = self._rows(sql + " ORDER BY pos", (group_id, *args))
            return [cls.model_validate_json(r[0]) for r in rows]
        wanted = list(dict.fromkeys(ids))
        found: dict[str, R] = {}
        for chunk in _chunks(wanted, 500):
            marks = ",".join("?" * len(chunk))
            for (data,) in self._rows(sql + f" AND id IN ({marks})", (group_id, *args, *chunk)):
                rec = cls.model_validate_json(data)
                found[rec.id] = rec  # type: ignore[attr-defined]
        return [found[i] for i in wanted if i in found]

    def upsert_episodes(self, episodes: Sequence[Episode]) -> None:
        self._upsert(list(episodes))

    def episodes(self, group_id: str, ids: Iterable[str] | None = None) -> list[Episode]:
        return self._get(Episode, group_id, ids)

    def last_episode(self, group_id: str) -> Episode | None:
        """The episode with the highest position in the group (None for an empty group)."""
        rows = self._rows("SELECT data FROM episodes WHERE group_id=? ORDER BY pos DESC LIMIT 1", (group_id,))
        return Episode.model_validate_json(rows[0][0]) if rows else None

    def upsert_entities(self, entities: Sequence[Entity]) -> None:
        self._upsert(list(entities))

    def entities(self, group_id: str, ids: Iterable[str] | None = None) -> list[Entity]:
        return self._get(Entity, group_id, ids)

    def upsert_facts(self, facts: Sequence[Fact]) -> None:
        self._upsert(list(facts))

    def facts(self, group_id: str, ids: Iterable[str] | None = None) -> list[Fact]:
        return self._get(Fact, group_id, ids)

    def facts_touching(self, group_id: str, entity_ids: Iterable[str]) -> list[Fact]:
        """Facts whose source or target is one of ``entity_ids``, in insertion order."""
        wanted = list(dict.fromkeys(entity_ids))
        out: dict[str, tuple[int, Fact]] = {}
        for chunk in _chunks(wanted, 400):
            marks = ",".join("?" * len(chunk))
            rows = self._rows(
                f"SELECT pos, data FROM facts WHERE group_id=? AND (source_id IN ({marks}) OR target_id IN ({marks}))",
                (group_id, *chunk, *chunk),
            )
            for pos, data in rows:
                f = Fact.model_validate_json(data)
                out[f.id] = (pos, f)
        return [f for _, f in sorted(out.values(), key=lambda t: t[0])]

    def upsert_questions(self, questions: Sequence[Question]) -> None:
        self._upsert(list(questions))

    def questions(self, group_id: str, ids: Iterable[str] | None = None) -> list[Question]:
        return self._get(Question, group_id, ids)

    # ------------------------------------------------------------------ mentions
    def add_mentions(self, mentions: Sequence[Mention]) -> None:
        with self.transaction() as cur:
            cur.executemany(
                "INSERT OR IGNORE INTO mentions VALUES (?,?,?)",
                [(m.group_id, m.episode_id, m.entity_id) for m in mentions],
            )

    def mentions(
        self, group_id: str, *, episode_ids: Iterable[str] | None = None, entity_ids: Iterable[str] | None = None
    ) -> list[Mention]:
        if episode_ids is not None and entity_ids is not None:
            raise ValueError("filter mentions by episode_ids or by entity_ids, not both")
        col, ids = ("episode_id", episode_ids) if episode_ids is not None else ("entity_id", entity_ids)
        if ids is None:
            rows = self._rows("SELECT episode_id, entity_id FROM mentions WHERE group_id=? ORDER BY rowid", (group_id,))
        else:
            rows = []
            for chunk in _chunks(list(dict.fromkeys(ids)), 500):
                marks = ",".join("?" * len(chunk))
                rows += self._rows(
                    f"SELECT episode_id, entity_id FROM mentions WHERE group_id=? AND {col} IN ({marks}) ORDER BY rowid",
                    (group_id, *chunk),
                )
        return [Mention(group_id=group_id, episode_id=e, entity_id=n) for e, n in rows]

    # ------------------------------------------------------------------ hierarchy
    def replace_hierarchy(self, group_id: str, categories: Sequence[Category], edges: Sequence[CategoryEdge]) -> None:
        """Replace the whole hierarchy of one group in one transaction (the paper rebuilds, never patches)."""
        for rec in (*categories, *edges):
            if rec.group_id != group_id:
                raise StoreError(f"record of group {rec.group_id!r} passed to replace_hierarchy({group_id!r})")
        with self.transaction() as cur:
            cur.execute("DELETE FROM categories WHERE group_id=?", (group_id,))
            cur.execute("DELETE FROM category_edges WHERE group_id=?", (group_id,))
            cur.execute("DELETE FROM embeddings WHERE group_id=? AND kind='category'", (group_id,))
            self._upsert(list(categories))
            cur.executemany(
                "INSERT OR IGNORE INTO category_edges VALUES (?,?,?)",
                [(e.group_id, e.parent_id, e.child_id) for e in edges],
            )

    def categories(self, group_id: str, *, layer: int | None = None, ids: Iterable[str] | None = None) -> list[Category]:
        if layer is None:
            return self._get(Category, group_id, ids)
        return self._get(Category, group_id, ids, "AND layer=?", (layer,))

    def category_edges(self, group_id: str) -> list[CategoryEdge]:
        rows = self._rows("SELECT parent_id, child_id FROM category_edges WHERE group_id=? ORDER BY rowid", (group_id,))
        return [CategoryEdge(group_id=group_id, parent_id=p, child_id=c) for p, c in rows]

    # ------------------------------------------------------------------ embeddings
    def put_embeddings(self, group_id: str, kind: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        vecs = np.asarray(vectors, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(ids):
            raise StoreError(f"embeddings for {group_id}/{kind}: {len(ids)} ids but array of shape {vecs.shape}")
        bad = ~np.isfinite(vecs).all(axis=1)
        if bad.any():
            first = ids[int(np.flatnonzero(bad)[0])]
            raise StoreError(f"embeddings for {group_id}/{kind}: {int(bad.sum())} rows not finite (first: {first})")
        with self.transaction() as cur:
            next_pos = cur.execute(  # read once per call (once per row made big batches O(n^2))
                "SELECT coalesce(max(pos) + 1, 0) FROM embeddings WHERE group_id=? AND kind=?", (group_id, kind)
            ).fetchone()[0]
            for item_id, vec in zip(ids, vecs):
                old = cur.execute(
                    "SELECT pos FROM embeddings WHERE group_id=? AND kind=? AND item_id=?", (group_id, kind, item_id)
                ).fetchone()
                if old:
                    pos = old[0]
                else:
                    pos, next_pos = next_pos, next_pos + 1
                cur.execute(
                    "INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?,?,?)",
                    (group_id, kind, item_id, pos, vecs.shape[1], vec.tobytes()),
                )

    def embeddings(self, group_id: str, kind: str) -> tuple[list[str], np.ndarray]:
        """All vectors of one (group, kind) as ``(ids, float32 [N, d])`` in insertion order."""
        rows = self._rows(
            "SELECT item_id, dim, vec FROM embeddings WHERE group_id=? AND kind=? ORDER BY pos", (group_id, kind)
        )
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        dims = {r[1] for r in rows}
        if len(dims) != 1:
            raise StoreError(f"embeddings for {group_id}/{kind} mix dimensions {sorted(dims)}")
        arr = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), dims.pop())
        return [r[0] for r in rows], arr.copy()

    def embedded_ids(self, group_id: str, kind: str) -> set[str]:
        rows = self._rows("SELECT item_id FROM embeddings WHERE group_id=? AND kind=?", (group_id, kind))
        return {r[0] for r in rows}

    # ------------------------------------------------------------------ progress
    def mark_done(self, stage: str, group_id: str, keys: Iterable[str]) -> None:
        with self.transaction() as cur:
            cur.executemany("INSERT OR IGNORE INTO progress VALUES (?,?,?)", [(stage, group_id, k) for k in keys])

    def done(self, stage: str, group_id: str) -> set[str]:
        return {r[0] for r in self._rows("SELECT key FROM progress WHERE stage=? AND group_id=?", (stage, group_id))}

    def progress_episodes(self, started: Sequence[str], *, unfinished: Sequence[str] = (),
                          group_id: str | None = None) -> dict[str, list[str]]:
        """Per group (or in ``group_id`` only), in order, the stored episodes with a progress key under any
        ``started`` stage; with ``unfinished``, only those not yet under every one of those stages (work a
        killed process left half done)."""
        where, args = ["EXISTS (SELECT 1 FROM progress p WHERE p.stage IN ({}) AND p.group_id=e.group_id "
                       "AND p.key=e.id)".format(",".join("?" * len(started)))], [*started]
        if unfinished:
            where.append("(SELECT count(*) FROM progress p WHERE p.stage IN ({}) AND p.group_id=e.group_id "
                         "AND p.key=e.id) < ?".format(",".join("?" * len(unfinished))))
            args += [*unfinished, len(set(unfinished))]
        if group_id is not None:
            where.insert(0, "e.group_id=?")
            args.insert(0, group_id)
        rows = self._rows(f"SELECT e.group_id, e.id FROM episodes e WHERE {' AND '.join(where)} "
                          "ORDER BY e.group_id, e.pos", args)
        out: dict[str, list[str]] = {}
        for g, i in rows:
            out.setdefault(g, []).append(i)
        return out

    def progress_groups(self, stage: str) -> list[str]:
        """The groups with at least one progress key under ``stage``."""
        return [r[0] for r in self._rows("SELECT DISTINCT group_id FROM progress WHERE stage=? ORDER BY 1", (stage,))]

    def clear_progress(self, stage: str, group_id: str) -> None:
        with self.transaction() as cur:
            cur.execute("DELETE FROM progress WHERE stage=? AND group_id=?", (stage, group_id))

    # ------------------------------------------------------------------ summary
    def counts(self, group_id: str) -> dict[str, int]:
        out = {}
        for table in ("episodes", "entities", "facts", "mentions", "categories", "category_edges", "questions"):
            out[table] = self._rows(f"SELECT count(*) FROM {table} WHERE group_id=?", (group_id,))[0][0]
        return out


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
