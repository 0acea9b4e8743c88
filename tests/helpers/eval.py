"""Helpers for the evaluation-harness tests: scripted LLMs and hand-made questions."""

from __future__ import annotations

import json
from datetime import datetime

from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.types import Episode, Question


def verdict(label: str) -> str:
    return json.dumps({"reasoning": "compared with the gold answer", "label": label})


def scripted_llm(responder, max_retries: int = 0, **options) -> tuple[LLM, ScriptedBackend]:
    backend = ScriptedBackend(responder)
    return LLM(backend, max_retries=max_retries, **options), backend


def make_question(i: int, group: str = "g0", category: str = "single-hop", answer: str = "Paris",
                  **kw) -> Question:
    return Question(id=f"{group}:q{i}", group_id=group, question=f"Where did person {i} go?", answer=answer,
                    category=category, question_date=datetime(2023, 5, 8, 13, 56), index=i, **kw)


def make_episode(group: str, n: int, minute: int, speaker: str = "Ann", text: str | None = None) -> Episode:
    return Episode(id=f"{group}:D1:{n}", group_id=group, source_id=f"D1:{n}", name=f"Text 1-{n}", speaker=speaker,
                   content=f"{speaker}: {text or f'message number {n}'}",
                   valid_at=datetime(2023, 5, 8, 13, minute), session=1, turn=n, position=n)


def browser():
    """A headless Chromium WebDriver, or a skip where selenium / chromium are missing (CI installs them)."""
    import pytest

    from mnemis.testing.headless import NoBrowser, chromium

    try:
        return chromium()
    except NoBrowser as exc:
        pytest.skip(str(exc))
