"""``from mnemis import Memory``: add in batches and incrementally, organise, search per route, answer,
clear errors for bad input (scripted LLM, hashing embedder: logic, not quality)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mnemis import Memory, Message
from mnemis.models.embed import HashingEmbedder
from mnemis.models.rerank import CosineReranker
from mnemis.testing.responder import scripted_llm

ALICE = [
    {"speaker": "Alice", "text": "I adopted a cat named Miso in Boston.", "time": "2024-05-01T10:00"},
    {"speaker": "Bob", "text": "Miso sounds lovely! Did Carla help you?", "time": "2024-05-01T10:01"},
    Message(speaker="Alice", text="Yes, Carla drove us from Denver.", time="2024-05-01T10:02"),
]
BOB = [{"speaker": "Bob", "content": "Bob: Dana and Eric visited Lisbon.", "time": "2024-06-01T09:00"}]


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "library_quickstart.py"
    spec = importlib.util.spec_from_file_location("library_quickstart", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def _memory(tmp_path, overrides=()):
    emb = HashingEmbedder(64)
    llm = scripted_llm()
    return Memory.from_models(llm, emb, CosineReranker(embedder=emb), path=tmp_path / "mem.db",
                              overrides=["experiment=quickstart", *overrides]), llm


def _calls(llm, prefix: str) -> int:
    return sum(v["calls"] for k, v in llm.ledger.to_dict()["stages"].items() if k.startswith(prefix))


def test_add_is_incremental_and_organize_rebuilds_only_changed_groups(tmp_path):
    mem, llm = _memory(tmp_path)
    with mem:
        mem.add("alice", ALICE[:2])
        first = mem.counts("alice")
        assert first["episodes"] == 2 and first["entities"] >= 3 and first["facts"] >= 1
        mem.add("alice", ALICE[2:])
        mem.add("bob", BOB)
        eps = mem.store.episodes("alice")
        assert [e.position for e in eps] == [0, 1, 2]  # appended after what the group already had
        assert eps[2].content == "Alice: Yes, Carla drove us from Denver."
        assert {e.name for e in mem.store.entities("alice")} >= {"Alice", "Miso", "Carla", "Denver"}
        assert mem.groups() == ["alice", "bob"]
        assert mem.store.episodes("bob")[0].content == "Bob: Dana and Eric visited Lisbon."
        metrics = mem.organize()
        assert set(metrics) == {"alice", "bob"} and metrics["alice"]["entities"] == mem.counts("alice")["entities"]
        built = _calls(llm, "hierarchy.")
        assert built > 0
        mem.organize()  # nothing changed: both hierarchies are kept, no LLM call
        assert _calls(llm, "hierarchy.") == built
        mem.add("bob", [{"speaker": "Bob", "text": "Frank moved to Oslo.", "time": "2024-06-02T09:00"}])
        mem.organize()  # bob's entities changed: only bob is rebuilt
        rebuilt = _calls(llm, "hierarchy.") - built
        assert 0 < rebuilt < built


def test_search_routes_and_answer(tmp_path):
    mem, llm = _memory(tmp_path)
    with mem:
        mem.add("alice", ALICE)
        mem.organize()
        qs = ["Where did Alice adopt Miso?", "Who drove Alice?"]
        s1 = mem.search(qs, group="alice", route="system1")
        assert _calls(llm, "select") == 0 and s1.system2 is None  # System-1 alone asks no LLM
        assert len(s1.contexts) == 2 and all(c.group_id == "alice" for c in s1.contexts)
        assert any(h.id.startswith("alice:") for h in s1.contexts[0].episodes)
        both = mem.search(qs, group="alice")
        assert both.system1 is not None and both.system2 is not None and len(both.texts) == 2
        assert "Miso" in both.texts[0]
        answers = mem.answer(qs, group="alice")
        assert [a.question_id for a in answers] == ["alice:q0", "alice:q1"]
        assert all(a.ok for a in answers)
        assert mem.ledger().stage("answer").calls == 2  # one batch of two questions


def test_bad_input_names_the_item_and_stores_nothing(tmp_path):
    mem, _ = _memory(tmp_path)
    with mem:
        with pytest.raises(ValueError, match=r"messages\[1\]\.speaker"):
            mem.add("alice", [ALICE[0], {"text": "no speaker"}])
        with pytest.raises(ValueError, match=r"messages\[0\]\.time"):
            mem.add("alice", [{"speaker": "A", "text": "x", "time": "yesterday-ish"}])
        with pytest.raises(TypeError, match=r"messages\[0\]"):
            mem.add("alice", ["just a string"])
        with pytest.raises(TypeError, match="list"):
            mem.add("alice", "Alice: hi")
        assert mem.groups() == []  # nothing stored by a rejected batch
        mem.add("alice", ALICE[:1])
        with pytest.raises(ValueError, match=r"questions\[0\]: group 'carol' is not in this memory"):
            mem.search(["Who?"], group="carol")
        with pytest.raises(ValueError, match="needs group"):
            mem.search(["Who?"])
        with pytest.raises(ValueError, match="route='fast'"):
            mem.search(["Who?"], group="alice", route="fast")


def test_reopened_memory_keeps_what_was_added(tmp_path):
    mem, _ = _memory(tmp_path)
    with mem:
        mem.add("alice", ALICE)
        before = mem.counts("alice")
    again, llm = _memory(tmp_path)
    with again:
        assert again.counts("alice") == before
        again.add("alice", [{"speaker": "Bob", "text": "Miso is asleep.", "time": "2024-05-02T08:00"}])
        assert [e.position for e in again.store.episodes("alice")][-1] == 3
        assert llm.ledger.stage("extract_entities").calls == 1  # only the new message was extracted


def test_the_library_example_composes_from_config(tmp_path, monkeypatch, capsys):
    """``examples/library_quickstart.py``'s own entry point (Memory.from_config + overrides) with the CPU default
    embedder, a schema-fake LLM and the cosine reranker (the slow integration test runs it on the real SmolLM2
    engine and reranker)."""
    example = _example()
    monkeypatch.chdir(tmp_path)
    example.main(["llm=schema_fake", "reranker=cosine", f"paths.cache_dir={tmp_path}/cache"])  # MiniLM embeds
    assert (tmp_path / "runs" / "examples" / "library.db").is_file()
    out = capsys.readouterr().out
    assert "memory: 6 messages" in out and out.count("\nQ: ") == 2


def test_the_library_example_reruns_without_rebuilding(tmp_path):
    example = _example()
    mem, llm = _memory(tmp_path)
    with mem:
        example.run(mem)
        before = llm.ledger.to_dict()["stages"]
        example.run(mem)  # the chat is added once and the hierarchy kept: only selection and answers again
        after = llm.ledger.to_dict()["stages"]
        grown = {s for s, v in after.items() if v["calls"] > before.get(s, {}).get("calls", 0)}
        assert "answer" in grown and grown <= {"select", "answer"}, grown
        assert mem.counts("demo")["episodes"] == len(example.CHAT)
