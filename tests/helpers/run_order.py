"""The order the suite runs in (used by tests/conftest.py; not a test file).

Unit tests first, then integration tests without vLLM, then the tests sharing the in-process SmolLM2 engine
(contiguous, so it starts late and stops after the last of them: tests/integration/conftest.py), then the
tests that start their own vLLM (OpenAI server, subprocess jobs), which must never run next to that engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ENGINE_FIXTURE = "vllm_backend"


def uses_engine(item: Any) -> bool:
    return ENGINE_FIXTURE in getattr(item, "fixturenames", ())


def run_class(item: Any) -> int:
    if "integration" not in item.keywords and "vllm" not in item.keywords:
        return 0
    if uses_engine(item):
        return 2
    return 3 if "vllm" in item.keywords else 1


def sort_items(items: list[Any]) -> None:
    """Sort in place; stable, so file order holds within each class."""
    items.sort(key=run_class)


def last_engine_user(items: Sequence[Any]) -> str | None:
    users = [it.nodeid for it in items if uses_engine(it)]
    return users[-1] if users else None
