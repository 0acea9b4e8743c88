"""A store path is a file path, never a URI: ``#``, ``?`` and ``%41`` name files of their own; a file that is
not a mnemis store is refused with a clear error and left byte for byte as it was (no switch to WAL)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

import pytest

from mnemis.store import GraphStore, StoreError
from mnemis.types import Episode


def _episode(g: str, text: str) -> Episode:
    return Episode(group_id=g, id=f"{g}:1", source_id="1", name="t", speaker="A", content=f"A: {text}",
                   valid_at=datetime(2024, 5, 1), session=1, turn=0, position=0)


@pytest.mark.parametrize("names", [("mem#1.db", "mem#2.db"), ("a?x=1.db", "a?x=2.db"), ("%41.db", "A.db"),
                                   ("sp ace.db", "sp%20ace.db")])
def test_uri_characters_are_part_of_the_file_name(tmp_path, names):
    for name in names:
        with GraphStore(tmp_path / name) as store:
            store.upsert_episodes([_episode("g", name)])
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == sorted(names)
    for name in names:
        with GraphStore(tmp_path / name, read_only=True) as store:
            assert [e.content for e in store.episodes("g")] == [f"A: {name}"]


def test_a_relative_path_opens_the_file_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with GraphStore("sub/mem#1.db") as store:
        store.upsert_episodes([_episode("g", "relative")])
    assert (tmp_path / "sub" / "mem#1.db").is_file() and not (tmp_path / "sub" / "mem").exists()


def _foreign(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('my thesis draft')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_file_that_is_not_a_store_is_refused_and_left_untouched(tmp_path, read_only):
    sqlite_file, text_file = tmp_path / "notes.db", tmp_path / "notes.txt"
    _foreign(sqlite_file)
    text_file.write_text("not a database at all\n" * 20)
    for path, match in ((sqlite_file, "is an SQLite file but not a mnemis store"),
                        (text_file, "is not a mnemis store")):
        before = path.read_bytes()
        with pytest.raises(StoreError, match=match):
            GraphStore(path, read_only=read_only)
        assert path.read_bytes() == before  # no schema written, no switch to WAL
        assert not path.with_name(path.name + "-wal").exists()
    conn = sqlite3.connect(sqlite_file)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
