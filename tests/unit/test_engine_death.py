"""The engine-death probe (experiments/bench/engine_death_probe.py): an engine that dies at any stage stops the run
with ``EngineFailure``, stores nothing as an answer, and a repeat on a healthy engine with the same store and cache
ends identical to a run whose engine never died; in process and over the OpenAI-compatible backend (a loopback
server killed mid-batch)."""

from __future__ import annotations

import pytest

from mnemis.memory import Memory
from mnemis.models.cache import ResponseCache
from mnemis.models.embed import HashingEmbedder
from mnemis.models.rerank import CosineReranker
from tests.helpers.bench import load_bench

probe = load_bench("engine_death_probe")
MESSAGES = probe.conversation(60)
HTTP_MESSAGES = 5  # over HTTP every batch costs a client and an event loop: a short conversation
HEALTHY = lambda: probe.DyingBackend(after=10**9)  # noqa: E731


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    backend = HEALTHY()
    snap = probe.run_flow(tmp_path_factory.mktemp("never-died"), backend, MESSAGES)
    return snap, probe.batches_per_stage(backend)


@pytest.mark.parametrize("point", ["after_second_batch", *probe.STAGES])
def test_an_engine_death_stops_the_run_and_a_repeat_ends_identical(point, reference, tmp_path):
    snap, batches = reference
    assert all(n >= 2 for n in batches.values()), batches  # so each death falls inside its stage
    dying = probe.DyingBackend(None, 2) if point == "after_second_batch" else \
        probe.DyingBackend(probe.STAGES[point], batches[point] // 2)
    out = probe.probe(tmp_path, snap, dying, HEALTHY, MESSAGES)
    assert dying.dead and out["raised"] and out["raised"].startswith("EngineFailure: stage '"), out["raised"]
    if point != "after_second_batch":
        assert out["raised"].startswith(f"EngineFailure: stage '{probe.STAGES[point]}"), out["raised"]
    assert ResponseCache(tmp_path / "cache").failures() == 0  # no engine failure was stored as a reply
    assert out["identical"], out["differs_in"]


def _memory(path, backend):
    emb = HashingEmbedder(64)
    return Memory.from_models(probe.client(backend, path.parent / "cache"), emb, CosineReranker(embedder=emb),
                              path=path, overrides=["experiment=quickstart"])


def test_recover_redoes_exactly_the_unfinished_items(reference, tmp_path):
    snap, batches = reference
    path = tmp_path / "mem.db"
    with _memory(path, probe.DyingBackend("dedup_facts", batches["dedup"] // 2)) as mem, \
            pytest.raises(Exception, match="dedup_facts"):
        mem.add(probe.GROUP, MESSAGES)
    healthy = HEALTHY()
    with _memory(path, healthy) as mem:
        assert 0 < mem.unfinished()[probe.GROUP] < len(MESSAGES)  # messages not yet resolved and deduplicated
        mem.recover()
        assert mem.unfinished() == {}
        asked = {r.stage for r in healthy.requests}
        assert "extract_entities" not in asked and "dedup_facts" in asked  # only what was left undone
        sent = len(healthy.requests)
        mem.add(probe.GROUP, MESSAGES)  # nothing left: a repeated add asks nothing
        assert len(healthy.requests) == sent
        got = probe.snapshot(mem, [], [])
    assert {k: got[k] for k in ("facts", "mentions")} == {k: snap[k] for k in ("facts", "mentions")}


@pytest.fixture(scope="module")
def http_reference(tmp_path_factory):
    registry: dict = {}
    server = probe.StubServer(registry)
    try:
        snap = probe.run_flow(tmp_path_factory.mktemp("http-never-died"), probe.http_backend(server, registry),
                              MESSAGES[:HTTP_MESSAGES], asked=2)
    finally:
        server.stop()
    return snap, registry


@pytest.mark.parametrize("point", ["extraction", "answer"])
def test_a_server_killed_mid_batch_stops_the_run_and_a_repeat_ends_identical(point, http_reference, tmp_path):
    snap, registry = http_reference
    prefix = probe.STAGES[point]
    n = sum(r.stage.startswith(prefix) for r in registry.values())
    dying = probe.StubServer(registry)
    dying.die_at(prefix, n // 2)
    fresh: list = []

    def healthy():
        fresh.append(probe.StubServer(registry))
        return probe.http_backend(fresh[-1], registry)

    try:
        out = probe.probe(tmp_path, snap, probe.http_backend(dying, registry), healthy, MESSAGES[:HTTP_MESSAGES],
                          asked=2)
    finally:
        for s in fresh:
            s.stop()
    assert dying.killed.is_set() and out["raised"].startswith(f"EngineFailure: stage '{prefix}"), out["raised"]
    assert "NoReply" in out["raised"] and ResponseCache(tmp_path / "cache").failures() == 0
    assert out["identical"], out["differs_in"]
