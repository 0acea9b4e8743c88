"""Per-stage cost ledger: calls, tokens, cache hits, failures, retries, truncated replies, wall time, and the
requests the model's limits or its server changed (clamped, refused, decoded without their schema)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

FIELDS = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "failures", "retries", "wall_s",
          "truncated", "salvaged", "clamped", "clamped_cut", "over_limit", "unconstrained")


@dataclass
class StageStats:
    """Counters of one stage. ``calls`` counts requests (items), not batches."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    failures: int = 0
    retries: int = 0
    wall_s: float = 0.0
    batches: int = 0
    truncated: int = 0  # replies that stopped at max_tokens (finish_reason "length")
    salvaged: int = 0  # broken replies of which only the complete items were kept
    clamped: int = 0  # requests sent with their budget lowered to the model's completion cap / window less prompt
    clamped_cut: int = 0  # ... of which the reply stopped at that lowered budget
    over_limit: int = 0  # requests refused as over the model's limits (by the server, or not sent at all)
    unconstrained: int = 0  # schema requests decoded without their schema (the server refused response_format)

    def add(self, other: StageStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class Ledger:
    """Thread-safe per-stage counters, written next to every run's outputs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, StageStats] = {}

    def record(self, stage: str, **counts: float) -> None:
        """Add ``counts`` (any of calls, prompt_tokens, completion_tokens, cache_hits, failures,
        retries, wall_s, batches) to ``stage``'s counters."""
        delta = StageStats()
        for name, value in counts.items():
            if not hasattr(delta, name):
                raise KeyError(f"unknown ledger counter {name!r}; known: {FIELDS + ('batches',)}")
            setattr(delta, name, value)
        with self._lock:
            self._stages.setdefault(stage, StageStats()).add(delta)

    def stage(self, stage: str) -> StageStats:
        """A copy of one stage's counters (zeros if never recorded)."""
        with self._lock:
            s = self._stages.get(stage, StageStats())
            return StageStats(**asdict(s))

    def total(self) -> StageStats:
        with self._lock:
            tot = StageStats()
            for s in self._stages.values():
                tot.add(s)
            return tot

    def merge(self, other: Ledger) -> Ledger:
        """Add every counter of ``other`` into this ledger; returns self."""
        snapshot = other.to_dict()["stages"]
        with self._lock:
            for stage, counts in snapshot.items():
                self._stages.setdefault(stage, StageStats()).add(StageStats(**counts))
        return self

    def reset(self) -> None:
        with self._lock:
            self._stages.clear()

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            stages = {k: asdict(v) for k, v in sorted(self._stages.items())}
        total = StageStats()
        for v in stages.values():
            total.add(StageStats(**v))
        return {"stages": stages, "total": asdict(total)}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``to_dict()`` as JSON (atomically) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ledger:
        led = cls()
        for stage, counts in json.loads(Path(path).read_text())["stages"].items():
            led._stages[stage] = StageStats(**counts)
        return led

    def __repr__(self) -> str:
        t = self.total()
        return f"Ledger(stages={len(self._stages)}, calls={t.calls}, failures={t.failures})"
