from __future__ import annotations

import pytest

from mnemis.ingest.pipeline import BaseGraphBuilder
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.store.sqlite import GraphStore


@pytest.fixture
def build(tmp_path):
    """``build(responder, **knobs) -> (builder, backend, store)`` on a fresh file store."""
    made = []

    def _make(responder, **knobs):
        store = GraphStore(tmp_path / f"mem{len(made)}.db")
        backend = ScriptedBackend(responder)
        builder = BaseGraphBuilder(store, LLM(backend, max_retries=knobs.pop("max_retries", 0)),
                                   HashingEmbedder(64), show_progress=False, **knobs)
        made.append(store)
        return builder, backend, store

    yield _make
    for s in made:
        s.close()
