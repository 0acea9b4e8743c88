"""Which model identity a config node had, kept beside a score or vector cache.

A cache of embeddings or reranker scores is keyed by the model's identity (its name plus a hash of its weight
files), which is known only once the model is built. Recording ``config node -> identity`` (and the output size)
in the same SQLite file lets a later run with the same node, a replay from an archive on another machine
included, key its lookups without building the model: the model is built on the first miss only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from mnemis.sqlite_file import SQLiteFile

SCHEMA = "CREATE TABLE IF NOT EXISTS identities (node TEXT PRIMARY KEY, identity TEXT NOT NULL, dim INTEGER)"


def node_text(node: Mapping[str, Any] | None) -> str:
    """A config node as canonical JSON (the lookup key)."""
    return json.dumps(node, sort_keys=True, default=str, separators=(",", ":"))


def known_identity(db: SQLiteFile, node: str) -> tuple[str, int | None] | None:
    """``(identity, dim)`` recorded for the node, or None."""
    db._create(SCHEMA)
    rows = db._rows("SELECT identity, dim FROM identities WHERE node = ?", [node])
    return (rows[0][0], None if rows[0][1] is None else int(rows[0][1])) if rows else None


def remember_identity(db: SQLiteFile, node: str, identity: str, dim: int | None) -> None:
    db._create(SCHEMA)
    with db.transaction() as cur:
        cur.execute("INSERT OR REPLACE INTO identities (node, identity, dim) VALUES (?, ?, ?)", (node, identity, dim))


def build_as_keyed(factory: Callable[[], Any], identity_of: Callable[[Any], str], keyed: str, kind: str) -> Any:
    """Build a cache's wrapped model from its factory and check it is the model the cache entries were keyed by
    (``identity_of(model) == keyed``); a ValueError naming both otherwise."""
    model = factory()
    built = identity_of(model)
    if built != keyed:
        raise ValueError(f"the {kind} built has identity {built}, its cache entries were keyed {keyed}")
    return model
