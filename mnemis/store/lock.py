"""Advisory file locks between processes (``fcntl.flock`` on a side file, never on the data itself).

:class:`WriterLock` is one memory's writer lock: held for a whole write (``Memory.add``: the messages and
their extraction), re-entrant inside the object, waiting up to ``timeout`` seconds for another holder and
then raising :class:`StoreBusy`, which names the pid that holds it. A plain shared / exclusive lock for
derived files (the index cache, dequantised models) is :func:`mnemis.locks.file_lock`.

The side file is never deleted (deleting a lock file lets two processes lock two different files). On a
system without ``fcntl`` (Windows) the locks do nothing and one process per memory file is the rule.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from mnemis.store.sqlite import StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
POLL_S = 0.05


class StoreBusy(StoreError):
    """Another process held the memory's writer lock for longer than the timeout; nothing was written."""


class WriterLock:
    """The writer lock of one memory file (``<file>.lock``).

    Args:
        path: the lock file.
        timeout: seconds to wait for another holder (None: wait as long as it takes; 0: do not wait).
        what: how errors name the locked thing (default: the lock file without ``.lock``).
    """

    def __init__(self, path: str | Path, *, timeout: float | None = 600.0, what: str | None = None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"lock timeout must be >= 0 or None, got {timeout}")
        self.path = Path(path)
        self.timeout = timeout
        self.what = what or str(self.path.with_suffix("") if self.path.suffix == ".lock" else self.path)
        self._mutex = threading.RLock()
        self._depth = 0
        self._fh = None

    @property
    def held(self) -> bool:
        return self._depth > 0

    def holder(self) -> int | None:
        """The pid written by the process that holds (or last held) the lock."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._mutex:
            if self._depth == 0:
                self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def _acquire(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - kept open while held
        start, told = time.monotonic(), False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if self.timeout is not None and waited >= self.timeout:
                    fh.close()
                    pid = self.holder()
                    raise StoreBusy(
                        f"memory {self.what} is in use by pid {pid if pid is not None else '?'} "
                        f"(waited {waited:.1f} s for its writer lock {self.path}); nothing was written. "
                        "Retry when it is done, or give a longer lock timeout") from None
                if not told:
                    log.info("memory %s is in use by pid %s; waiting for it", self.what, self.holder())
                    told = True
                time.sleep(POLL_S)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def _release(self) -> None:
        if self._fh is None:
            return
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()
        self._fh = None
