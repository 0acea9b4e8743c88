"""What ``Memory.add`` accepts: every bad argument named, message identities (caller ids, repeated batches),
and one time rule (aware, in the memory's zone) so naive, aware and missing times mix without breaking a
group (scripted LLM, hashing embedder)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from mnemis import Memory
from mnemis.models.embed import HashingEmbedder
from mnemis.models.rerank import CosineReranker
from mnemis.testing.responder import scripted_llm
from mnemis.types import Episode

UTC = timezone.utc
OK = [{"speaker": "Alice", "text": "I adopted a cat named Miso."}]


def _memory(tmp_path, name="mem.db", **options):
    emb = HashingEmbedder(64)
    return Memory.from_models(scripted_llm(), emb, CosineReranker(embedder=emb), path=tmp_path / name,
                              overrides=["experiment=quickstart"], **options)


BAD = [  # (group, messages, error, message)
    ("g", None, TypeError, r"^messages: expected a list of messages .*got NoneType"),
    ("g", 5, TypeError, r"^messages: .*got int"),
    ("g", {"speaker": "A", "text": "x"}, TypeError, r"^messages: .*got dict \(wrap a single message in \[\.\.\.\]\)"),
    ("g", (m for m in OK), TypeError, r"^messages: .*got generator"),
    ("g", [None], TypeError, r"^messages\[0\]: expected a dict"),
    ("g", [OK[0], 3], TypeError, r"^messages\[1\]: expected a dict .*got int"),
    ("g", [OK[0], {"speaker": "B", "text": ""}], ValueError, r"^messages\[1\]\.text"),
    ("g", [{**OK[0], "id": "a"}, {"speaker": "B", "text": "y", "id": "a"}], ValueError,
     r"^messages\[1\]\.id: 'a' is also the id of messages\[0\]"),
    ("g", [{**OK[0], "id": "a\nb"}], ValueError, r"^messages\[0\]\.id"),
    (None, OK, TypeError, r"^group: expected a non-empty string, got NoneType"),
    ("  ", OK, ValueError, r"^group: expected a non-empty string"),
    ("a\x00b", OK, ValueError, r"^group: .*control characters"),
    (3, OK, TypeError, r"^group: .*got int"),
]


def test_every_bad_argument_is_named_and_nothing_is_stored(tmp_path):
    with _memory(tmp_path) as mem:
        for group, messages, error, match in BAD:
            with pytest.raises(error, match=match):
                mem.add(group, messages)
        assert mem.groups() == []


def test_a_repeated_add_is_recognised_and_caller_ids_are_identities(tmp_path):
    with _memory(tmp_path) as mem:
        chat = [{"speaker": "Alice", "text": "Hi Bob.", "time": "2024-05-01T10:00"}, {"speaker": "Bob", "text": "Hi."}]
        first = mem.add("g", chat)
        assert first.counters["add.new"] == 2
        again = mem.add("g", chat)  # the same batch (a retry): nothing stored twice
        assert again.counters["add.repeated"] == 2 and again.counters["add.new"] == 0
        assert len(mem.store.episodes("g")) == 2
        mem.add("g", [{"speaker": "Bob", "text": "Hi.", "time": "2024-05-02T09:00"}])  # the same words, later
        mem.add("g", [{"speaker": "Bob", "text": "Hi.", "id": "own-1"}, {"speaker": "Bob", "text": "Hi.", "id": "own-2"}])
        eps = mem.store.episodes("g")
        assert [e.content for e in eps] == ["Alice: Hi Bob.", "Bob: Hi.", "Bob: Hi.", "Bob: Hi.", "Bob: Hi."]
        assert [e.position for e in eps] == [0, 1, 2, 3, 4] and eps[3].id == "g:own-1"
        assert mem.add("g", [{"speaker": "Bob", "text": "Hi.", "id": "own-2"}]).counters["add.repeated"] == 1
        with pytest.raises(ValueError, match=r"messages\[0\]\.id: 'own-1' is already stored in group 'g'"):
            mem.add("g", [{"speaker": "Bob", "text": "Bye.", "id": "own-1"}])
        assert len(mem.store.episodes("g")) == 5


def test_naive_aware_and_missing_times_mix_across_adds_then_search(tmp_path):
    """The issue's case: README-style naive times, then an add without a time (now), then an aware time; every
    stored time is aware UTC and search and answer work on the group."""
    with _memory(tmp_path) as mem:
        mem.add("alice", [{"speaker": "Alice", "text": "I adopted a cat named Miso in Boston.",
                           "time": "2024-05-01T10:00"}])
        mem.add("alice", [{"speaker": "Bob", "text": "Carla drove Miso from Denver."}])
        mem.add("alice", [{"speaker": "Alice", "text": "Miso likes Oslo.", "time": "2024-05-02T09:00+02:00"},
                          {"speaker": "Bob", "text": "Frank met Miso.", "time": datetime(2024, 5, 2, 8, 30)}])
        eps = mem.store.episodes("alice")
        assert all(e.valid_at.utcoffset() == timedelta(0) for e in eps)
        assert eps[0].valid_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
        assert eps[2].valid_at == datetime(2024, 5, 2, 7, 0, tzinfo=UTC)
        assert abs(eps[1].valid_at - datetime.now(UTC)) < timedelta(minutes=5)
        mem.organize()
        for route in ("system1", "both"):
            res = mem.search(["Where did Alice adopt Miso?"], group="alice", route=route)
            assert "Miso" in res.texts[0]
        text = mem.search(["Who met Miso?"], group="alice", route="system1").texts[0]
        lines = [ln for ln in text.splitlines() if ln.startswith("[2024")]
        assert lines == sorted(lines)  # chronological: 07:00 UTC before 08:30 on May 2
        assert all(a.ok for a in mem.answer(["Who met Miso?"], group="alice"))


def test_a_stated_zone_reads_naive_times_in_it(tmp_path):
    with _memory(tmp_path, time_zone="Europe/Paris") as mem:
        mem.add("g", [{"speaker": "A", "text": "Lunch with Carla.", "time": "2024-05-01T12:00"},
                      {"speaker": "B", "text": "Dinner with Dana.", "time": "2024-05-01T18:00Z"}])
        paris = ZoneInfo("Europe/Paris")
        assert [e.valid_at for e in mem.store.episodes("g")] == [datetime(2024, 5, 1, 12, 0, tzinfo=paris),
                                                                datetime(2024, 5, 1, 20, 0, tzinfo=paris)]
    with pytest.raises(ValueError, match="time_zone='Mars/Base'"):
        _memory(tmp_path, "other.db", time_zone="Mars/Base")


def _naive(g: str, i: int) -> Episode:
    return Episode(group_id=g, id=f"{g}:D1:{i}", source_id=f"D1:{i}", name=f"turn {i}", speaker="Ann",
                   content=f"Ann: Miso visited Lisbon on day {i}.", valid_at=datetime(2023, 5, 8, 13, i),
                   session=1, turn=i, position=i)


def test_a_benchmark_group_stays_naive_and_a_group_never_mixes_kinds(tmp_path):
    with _memory(tmp_path) as mem:
        mem.add_episodes([_naive("conv", 0), _naive("conv", 1)])  # as the benchmark loaders give them
        mem.add("conv", [{"speaker": "Bob", "text": "Carla says hi.", "time": "2024-05-01T10:00+02:00"},
                         {"speaker": "Bob", "text": "Dana says hi."}])
        eps = mem.store.episodes("conv")
        assert all(e.valid_at.tzinfo is None for e in eps) and eps[2].valid_at == datetime(2024, 5, 1, 8, 0)
        aware = _naive("conv", 5).model_copy(update={"valid_at": datetime(2024, 1, 1, tzinfo=UTC)})
        with pytest.raises(ValueError, match=r"episode conv:D1:5: its time .* is aware but group 'conv' holds naive"):
            mem.add_episodes([aware])
        assert len(mem.store.episodes("conv")) == 4
        assert "Miso" in mem.search(["Where did Miso go?"], group="conv", route="system1").texts[0]


def test_a_group_stored_with_mixed_times_before_the_rule_still_searches(tmp_path):
    with _memory(tmp_path) as mem:
        mem.add_episodes([_naive("old", 0)])
        late = _naive("old", 1).model_copy(update={"valid_at": datetime(2023, 5, 8, 14, 0, tzinfo=UTC)})
        mem.store.upsert_episodes([late])  # what an older mnemis wrote: a naive and an aware time in one group
        text = mem.search(["Where did Miso go?"], group="old", route="system1").texts[0]
        assert "day 0" in text and "day 1" in text


def test_dates_the_llm_writes_follow_the_kind_of_the_episode_times(tmp_path):
    """A fact's dates come from the LLM as naive dates; next to aware message times they are read in the message's
    zone, so comparing them (an end before its start, a contradiction) never mixes kinds."""
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend
    from mnemis.testing.responder import base_graph_responder

    def responder(req):
        reply = base_graph_responder(req)
        if req.stage == "extract_facts":
            for i, fact in enumerate(reply["facts"]):
                fact.update({"valid_at": "" if i % 2 else "2024-04-01", "invalid_at": "2024-06-01"})
        return reply

    emb = HashingEmbedder(64)
    llm = LLM(ScriptedBackend(responder), cache_dir=None, cache_mode="off", max_retries=1)
    with Memory.from_models(llm, emb, CosineReranker(embedder=emb), path=tmp_path / "m.db",
                            overrides=["experiment=quickstart"]) as mem:
        mem.add("g", [{"speaker": "Alice", "text": "Miso met Carla and Dana in Denver.", "time": "2024-05-01T10:00"}])
        facts = mem.store.facts("g")
        assert len(facts) >= 2
        assert {f.valid_at for f in facts} == {datetime(2024, 4, 1, tzinfo=UTC), datetime(2024, 5, 1, 10, tzinfo=UTC)}
        assert {f.invalid_at for f in facts} == {datetime(2024, 6, 1, tzinfo=UTC)}
