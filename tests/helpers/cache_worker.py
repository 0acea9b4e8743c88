"""Rebuild and save one group's episode index over and over into a shared cache folder (run by
tests/unit/index/test_cache_concurrency.py, several at once).
Usage: python cache_worker.py DB CACHE_DIR ROUNDS WORD.

Prints READY, waits for a line on stdin, then each round forgets the in-memory index and gets it again
(the cache holds another process's index, so it is rebuilt from this store and saved) and checks that the
index found the word of its own store; prints DONE, or exits non-zero with the error."""

from __future__ import annotations

import sys

from mnemis.index.catalog import IndexCatalog
from mnemis.store.sqlite import GraphStore


def main() -> None:
    db, cache, rounds, word = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = GraphStore(db, read_only=True)
    want = [e.id for e in store.episodes("g1")]
    catalog = IndexCatalog(store, cache_dir=cache)
    print("READY", flush=True)
    sys.stdin.readline()
    for _ in range(rounds):
        catalog.invalidate()
        index = catalog.get("g1", "episode")
        _, ids = index.bm25.search([word], k=3)
        assert index.ids == want and ids[0] and ids[0][0] in want, (index.ids[:3], ids)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
