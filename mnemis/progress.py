"""Progress of long stages: counts, rate and ETA.

On a TTY a tqdm bar (stderr). Elsewhere (SLURM logs, pipes) one plain log line each time another
``every_pct`` percent is done (at most one per ``min_gap_s``) or ``every_s`` seconds have passed, and at
the end, e.g.
``extract_facts 18,432/35,120 (52%) 41.2/s ETA 0:06:45``. Listeners (the experiment tracker) get every
update as ``(stage, done, total, elapsed_s)``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

log = logging.getLogger("mnemis.progress")
T = TypeVar("T")
Listener = Callable[[str, int, int, float], None]
_LISTENERS: list[Listener] = []
LONG_BATCH = 2048  # items from which an encoder/reranker call reports its progress (LLM batches: from 2)


def add_listener(fn: Listener) -> None:
    _LISTENERS.append(fn)


def remove_listener(fn: Listener) -> None:
    if fn in _LISTENERS:
        _LISTENERS.remove(fn)


def format_line(stage: str, done: int, total: int, elapsed: float) -> str:
    """``stage done/total (pct%) rate/s ETA h:mm:ss`` (ETA ``?`` before the first item)."""
    pct = 100.0 * done / total if total else 100.0
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = str(timedelta(seconds=round((total - done) / rate))) if rate > 0 and total else "?"
    return f"{stage} {done:,}/{total:,} ({pct:.0f}%) {rate:.1f}/s ETA {eta}"


class Progress:
    """Counts of one stage. Use as a context manager; ``update(n)`` after each item or chunk."""

    def __init__(self, stage: str, total: int, *, tty: bool | None = None, every_pct: float = 5.0,
                 every_s: float = 60.0, min_gap_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 emit: Callable[[str], None] | None = None) -> None:
        self.stage, self.total, self.done = stage, int(total), 0
        self.every_pct, self.every_s, self.min_gap_s, self.clock = every_pct, every_s, min_gap_s, clock
        self.emit = emit or (lambda line: log.info("%s", line))
        self.t0 = self._last_t = clock()
        self._last_pct = 0.0
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._bar: Any = None
        if self.tty and self.total:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=stage, leave=False, dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        elapsed = now - self.t0
        for fn in list(_LISTENERS):
            fn(self.stage, self.done, self.total, elapsed)
        if self._bar is not None:
            self._bar.update(n)
            return
        pct = 100.0 * self.done / self.total if self.total else 100.0
        since = now - self._last_t
        if n and (self.done >= self.total or (pct - self._last_pct >= self.every_pct and since >= self.min_gap_s)
                  or since >= self.every_s):
            self._last_pct, self._last_t = pct, now
            self.emit(format_line(self.stage, self.done, self.total, elapsed))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def track(iterable: Iterable[T], *, total: int, stage: str, tty: bool | None = None) -> Iterator[T]:
    """Yield from ``iterable`` reporting one item at a time."""
    with Progress(stage, total, tty=tty) as p:
        for item in iterable:
            yield item
            p.update(1)


def start(stage: str, total: int, min_items: int = 2) -> Progress | None:
    """A ``Progress`` for an LLM batch of ``total`` items (None for trivial batches: no line for 1 item)."""
    return Progress(stage, total) if total >= min_items else None
