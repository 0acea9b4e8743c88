"""The SQLite graph store."""

from mnemis.store.lock import StoreBusy
from mnemis.store.sqlite import SCHEMA_VERSION, GraphStore, StoreError

__all__ = ["SCHEMA_VERSION", "GraphStore", "StoreBusy", "StoreError"]
