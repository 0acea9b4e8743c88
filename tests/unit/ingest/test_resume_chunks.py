"""Attributes and extraction commit per chunk: a crash after N requests, then a rerun with no response cache,
sends at most one chunk of requests more than an uninterrupted build, and the graph is the same."""

from __future__ import annotations

import random

import pytest

from mnemis.ingest.pipeline import BaseGraphBuilder
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import CountingBackend, Killed
from mnemis.store.sqlite import GraphStore
from tests.helpers.ingest import CONVERSATIONS, graph, rule_responder, slice_episodes

CHUNK = 3


def Counting(stage: str | None = None, crash_after: int | None = None) -> CountingBackend:  # noqa: N802
    return CountingBackend(rule_responder, stage=stage, crash_after=crash_after)


def _ingest(path, backend):
    with GraphStore(path) as store:
        BaseGraphBuilder(store, LLM(backend, chunk_size=CHUNK), HashingEmbedder(64),
                         show_progress=False).ingest(slice_episodes())
        return {g: graph(store, g) for g in CONVERSATIONS}, store.get_meta("ingest.stats")


@pytest.mark.parametrize("stage", ["entity_attributes", "extract_entities", "extract_facts"])
def test_crash_mid_stage_loses_at_most_one_chunk(tmp_path, stage):
    ref_backend = Counting()
    ref_graph, ref_stats = _ingest(tmp_path / "ref.db", ref_backend)
    n = ref_backend.sent[stage]
    assert n > CHUNK  # several chunks
    crash = Counting(stage, crash_after=random.Random(stage).randint(CHUNK, n - 1))
    with pytest.raises(Killed):
        _ingest(tmp_path / "run.db", crash)
    again = Counting()
    got_graph, got_stats = _ingest(tmp_path / "run.db", again)
    assert crash.sent.get(stage, 0) + again.sent.get(stage, 0) <= n + CHUNK
    assert again.sent.get(stage, 0) < n  # committed chunks were not asked again
    total = sum(crash.sent.values()) + sum(again.sent.values())
    assert total <= sum(ref_backend.sent.values()) + 2 * CHUNK  # (+ the reflection of the crashed chunk)
    assert got_graph == ref_graph and got_stats == ref_stats
