"""The SQLite graph store."""

from mnemis.store.sqlite import SCHEMA_VERSION, GraphStore, StoreError

__all__ = ["GraphStore", "StoreError", "SCHEMA_VERSION"]
