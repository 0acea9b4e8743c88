"""A plain advisory file lock between processes (``fcntl.flock`` on a side file, never on the data itself).

Shared for readers, exclusive for writers; used for derived files that several processes may create at once
(the index cache, an assembled or dequantised model). The side file is never deleted (deleting a lock file lets
two processes lock two different files). On a system without ``fcntl`` (Windows) the lock does nothing.
A memory's writer lock, which waits with a timeout and names the holder, is :class:`mnemis.store.lock.WriterLock`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def file_lock(path: str | Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock on ``path`` (created when missing): shared for readers, exclusive for writers."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    path, fh = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")  # noqa: SIM115 - closed below
    except OSError:
        if not shared:
            raise
        with contextlib.suppress(OSError):  # a read-only folder: a reader may still lock an existing file
            fh = open(path)  # noqa: SIM115
    if fh is None:  # a read-only folder without a lock file: no writer can change it either
        yield
        return
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
