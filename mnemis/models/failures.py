"""An engine that gives no reply is an error, never an answer.

A model engine (an LLM, an embedder, a reranker) can fail without producing anything: the process died, the
connection was refused or reset, the device ran out of memory, a whole batch ran past its time limit. Such a
call is retried with exponential back-off (:func:`with_retries`) and then raised as :class:`EngineFailure`,
which stops the stage. Nothing of it is written to a cache or marked done, so a rerun on a healthy engine asks
exactly the unfinished items again. Only a reply the model actually produced (malformed, cut, refused by
validation) is kept and counted as a failed item.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
RERUN = "nothing of it was stored; once the engine is back, rerun: finished work is kept and only the unfinished " \
        "items are asked again"


class EngineFailure(RuntimeError):
    """A model engine gave no reply after every retry; the stage stops (see the module docstring).

    Attributes:
        stage: the stage whose call failed (``extract_entities``, ``rerank``, ``embed`` ...).
        items: how many of its items got no reply.
    """

    def __init__(self, message: str, *, stage: str = "", items: int = 0) -> None:
        super().__init__(message)
        self.stage = stage
        self.items = items


def backoff_s(first_s: float, retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (1, 2, ...): ``first_s`` doubled each time."""
    return first_s * 2 ** (retry - 1)


def with_retries(call: Callable[[], T], *, stage: str, items: int, retries: int, first_backoff_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, again after a back-off each time it raises, at most ``retries`` more times; then
    :class:`EngineFailure` naming ``stage``, the ``items`` of the call and the last error."""
    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            wait = backoff_s(first_backoff_s, attempt)
            log.warning("%s: engine gave no reply (%s); retry %d of %d in %.1f s", stage, _describe(last), attempt,
                        retries, wait)
            sleep(wait)
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - any engine exception is retried, then raised as EngineFailure
            last = exc
    raise EngineFailure(f"stage {stage!r}: the engine gave no reply for {items} item(s) after {retries + 1} "
                        f"attempt(s): {_describe(last)}; {RERUN}", stage=stage, items=items) from last


def _describe(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}"[:500] if exc is not None else "no error"
