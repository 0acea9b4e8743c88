"""Mem0 / Mem0g baselines with a scripted LLM and the hashing embedder (logic only, no model)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from mnemis.baselines.mem0.extract import make_pairs
from mnemis.baselines.mem0.graph import build_graph, render_relations, search_graph
from mnemis.baselines.mem0.pipeline import DEFAULT_MAX_TOKENS, Mem0Config, build_mem0, run_mem0
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.types import Dataset, Question
from tests.helpers.mem0 import T0, Decider, block, episodes, live, make_llm, new_messages, stages, text_of

_NUM = re.compile(r"^(\d+)\. (.*)$")
CFG = Mem0Config(pair_size=1, summary_every=0, s=10)
FOUR_OPS = [("Caroline", "Caroline lives in Boston"), ("Caroline", "Caroline has a dog"),
            ("Caroline", "Caroline's dog is named Max"), ("Caroline", "Caroline moved out of Boston"),
            ("Caroline", "Caroline owns a dog")]
PLAN = {
    "Caroline's dog is named Max": ("UPDATE", "Caroline has a dog", "Caroline has a dog named Max"),
    "Caroline moved out of Boston": ("DELETE", "Caroline lives in Boston", ""),
    "Caroline owns a dog": ("NOOP", "Caroline has a dog named Max", ""),
}


def test_each_operation_changes_store_and_history(tmp_path):
    llm, backend = make_llm(Decider(PLAN))
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", FOUR_OPS), llm, HashingEmbedder(), CFG, store)
    assert live(store, "g") == ["Caroline has a dog named Max"]
    all_mems = {m.text: m for m in store.memories("g", include_deleted=True)}
    assert set(all_mems) == {"Caroline lives in Boston", "Caroline has a dog named Max"}
    assert all_mems["Caroline lives in Boston"].deleted
    dog = all_mems["Caroline has a dog named Max"]
    assert dog.created_at == T0 + timedelta(minutes=1) and dog.updated_at == T0 + timedelta(minutes=2)
    assert dog.episode_ids == ["g:D1:2", "g:D1:3"]
    hist = store.history("g")
    assert [(h.operation, h.old_text, h.new_text, h.reason) for h in hist] == [
        ("ADD", None, "Caroline lives in Boston", ""),
        ("ADD", None, "Caroline has a dog", ""),
        ("UPDATE", "Caroline has a dog", "Caroline has a dog named Max", ""),
        ("DELETE", "Caroline lives in Boston", None, ""),
        ("NOOP", None, None, ""),
    ]
    assert hist[3].memory_id == all_mems["Caroline lives in Boston"].id and hist[3].time == T0 + timedelta(minutes=3)
    assert hist[4].memory_id == dog.id
    totals = store.totals("g")
    assert (totals["op.ADD"], totals["op.UPDATE"], totals["op.DELETE"], totals["op.NOOP"]) == (2, 1, 1, 1)
    assert not any(k.startswith("bad.") for k in totals)
    # the updated memory was re-embedded: searching for it finds it first
    vec = HashingEmbedder().encode(["Caroline has a dog named Max"])[0]
    assert float(dog.vec @ vec) == pytest.approx(1.0, abs=1e-5)
    assert [s for s, _ in stages(backend)] == ["mem0_extract", "mem0_update"] * 5


def test_delete_is_recoverable_from_history(tmp_path):
    llm, _ = make_llm(Decider(PLAN))
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", FOUR_OPS), llm, HashingEmbedder(), CFG, store)
    gone = next(m for m in store.memories("g", include_deleted=True) if m.deleted)
    back = store.restore("g", gone.id)
    assert back.text == "Caroline lives in Boston" and not back.deleted
    assert sorted(live(store, "g")) == ["Caroline has a dog named Max", "Caroline lives in Boston"]
    assert store.history("g", gone.id)[-1].operation == "RESTORE"
    with pytest.raises(KeyError):
        store.restore("g", gone.id)  # no longer deleted


def test_bad_operations_are_counted_noops(tmp_path):
    turns = [("Ann", "Ann likes tea"), ("Ann", "unknown op"), ("Ann", "bad id"), ("Ann", "empty update"),
             ("Ann", "delete nothing"), ("Ann", "garbage"), ("Ann", "Ann likes tea"), ("Ann", "date only")]
    plan = {"unknown op": ("MERGE", "Ann likes tea", "x"), "bad id": ("UPDATE", 7, "Ann likes coffee"),
            "empty update": ("UPDATE", "Ann likes tea", "  "), "delete nothing": ("DELETE", -1, ""),
            "garbage": ("ADD", None, ""), "Ann likes tea": ("ADD", None, "Ann likes tea"),
            "date only": ("ADD", None, "2023/05/08")}
    llm, _ = make_llm(Decider(plan))
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", turns), llm, HashingEmbedder(), CFG, store)
    assert live(store, "g") == ["Ann likes tea", "date only"]  # a text without a word: the fact is kept instead
    assert store.count("g", include_deleted=True) == 2
    totals = store.totals("g")
    assert {k: v for k, v in totals.items() if k.startswith("bad.")} == {
        "bad.unknown_op": 1, "bad.bad_id": 2, "bad.empty_text": 1, "bad.failed_reply": 1, "bad.duplicate_add": 1}
    assert totals["op.NOOP"] == 6 and totals["op.ADD"] == 2 and totals["update.text_no_words"] == 1
    reasons = [h.reason for h in store.history("g")]
    assert reasons == ["", "unknown_op", "bad_id", "empty_text", "bad_id", "failed_reply", "duplicate_add", ""]


def test_extracted_facts_are_cleaned_and_capped(tmp_path):
    def responder(req: LLMRequest):
        if req.stage == "mem0_extract":
            assert block(req, "NEW MESSAGES") == ["[2023/05/08 (Mon) 13:00] Ann: hi", "[2023/05/08 (Mon) 13:01] Bob: yo"]
            return {"facts": ["1. Ann likes tea", "- ann likes  TEA", "2023-05-08 13:56", "", "Bob golfs",
                              "Bob sings", "Bob cooks"]}
        return {"operation": "ADD", "id": -1, "text": ""}

    llm, _ = make_llm(responder)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", [("Ann", "hi"), ("Bob", "yo")]), llm, HashingEmbedder(),
               Mem0Config(summary_every=0, max_facts=3), store)
    assert live(store, "g") == ["Ann likes tea", "Bob golfs", "Bob sings"]
    totals = store.totals("g")
    assert totals["extract.skipped_no_words"] == 1 and totals["extract.facts_cut"] == 1
    assert totals["extract.facts"] == 3


def test_summary_refreshed_at_configured_interval(tmp_path):
    turns = [("Ann" if i % 2 == 0 else "Bob", f"message number {i}") for i in range(10)]
    llm, backend = make_llm(Decider())
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(episodes("g", turns), llm, HashingEmbedder(), Mem0Config(pair_size=2, summary_every=4, m=3), store)
    seq = [s for s, _ in stages(backend)]
    # 5 pairs starting at messages 0, 2, 4, 6, 8: refresh before the pairs starting at 4 and 8; each pair
    # has 2 facts, decided in 2 rounds
    assert seq == ["mem0_extract", "mem0_update", "mem0_update", "mem0_extract", "mem0_update", "mem0_update",
                   "mem0_summary", "mem0_extract", "mem0_update", "mem0_update",
                   "mem0_extract", "mem0_update", "mem0_update",
                   "mem0_summary", "mem0_extract", "mem0_update", "mem0_update"]
    summaries = [b[0] for b in backend.batches_for("mem0_summary")]
    assert block(summaries[0], "New messages") == [
        f"[2023/05/08 (Mon) 13:0{i}] {s}: message number {i}" for i, s in enumerate(["Ann", "Bob", "Ann", "Bob"])]
    assert len(block(summaries[1], "New messages")) == 4
    assert "summary of" in block(summaries[1], "Previous summary:")[0]
    extracts = [b[0] for b in backend.batches_for("mem0_extract")]
    assert block(extracts[1], "Conversation summary:") == ["(none yet)"]
    assert block(extracts[2], "Conversation summary:")[0].startswith("summary of")
    assert len(block(extracts[2], "Recent messages:")) == 3  # m = 3
    text, covered = store.summary("g")
    assert covered == 8 and "message number 7" in text
    assert llm.ledger.stage("mem0_summary").calls == 2


def test_one_generate_per_step_across_groups_and_resume(tmp_path):
    eps = episodes("a", [("Ann", "Ann likes tea"), ("Bob", "Bob likes golf"), ("Ann", "Ann runs")]) + \
        episodes("b", [("Cy", "Cy paints"), ("Di", "Di sings")])
    llm, backend = make_llm(Decider())
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(eps, llm, HashingEmbedder(), Mem0Config(pair_size=2, summary_every=0), store)
    # step 0: one pair of each group, its 2 facts decided in 2 rounds batched over both groups;
    # step 1: only group a has a pair left
    assert stages(backend) == [("mem0_extract", 2), ("mem0_update", 2), ("mem0_update", 2), ("mem0_extract", 1),
                               ("mem0_update", 1)]
    assert [new_messages(r) for r in backend.batches[0]] == [["Ann likes tea", "Bob likes golf"],
                                                             ["Cy paints", "Di sings"]]
    assert new_messages(backend.batches[3][0]) == ["Ann runs"]
    assert sorted(live(store, "a")) == ["Ann likes tea", "Ann runs", "Bob likes golf"]
    assert sorted(live(store, "b")) == ["Cy paints", "Di sings"]
    assert all(m.group_id == "b" for m in store.memories("b"))
    n = len(backend.batches)
    build_mem0(eps, llm, HashingEmbedder(), Mem0Config(pair_size=2, summary_every=0), store)
    assert len(backend.batches) == n  # every pair done: nothing re-run
    assert len(make_pairs(episodes("a", [("A", "x")] * 3))) == 2


def test_run_mem0_retrieves_and_renders_with_timestamps(tmp_path):
    eps = episodes("a", [("Ann", "Ann likes green tea"), ("Bob", "Bob plays golf on Sundays")])
    qs = [Question(group_id="a", id="a:q0", question="What does Bob play?", answer="golf", category="single-hop")]
    data = Dataset(name="t", groups=["a"], episodes=eps, questions=qs)
    llm, _ = make_llm(Decider())
    run = run_mem0(data, llm, HashingEmbedder(), Mem0Config(k=1, summary_every=0), tmp_path)
    assert run.method == "mem0" and len(run.contexts) == 1
    assert run.contexts[0] == "[2023/05/08 (Mon) 13:01] Bob plays golf on Sundays"
    assert [h.id for h in run.retrieved[0].episodes] == ["a:D1:1", "a:D1:2"]  # both messages of the pair
    with pytest.raises(ValueError, match="unknown stages"):
        Mem0Config(max_tokens={"mem0_extrct": 3})
    assert Mem0Config(max_tokens={"mem0_update": 7}).max_tokens == {**DEFAULT_MAX_TOKENS, "mem0_update": 7}
    with pytest.raises(ValueError, match="graph_kind"):
        Mem0Config(graph_kind="neo4j")


def test_a_finished_mem0_run_is_recorded_and_a_rerun_sends_nothing(tmp_path):
    """No response cache here: the end of the run is recorded in the work dir, so a rerun on the same questions
    and settings makes no LLM call; other questions or settings search again (the memory itself is reused)."""
    eps = episodes("a", [("Ann", "Ann likes green tea"), ("Bob", "Bob plays golf on Sundays")])
    qs = [Question(group_id="a", id="a:q0", question="What does Bob play?", answer="golf", category="single-hop")]
    data = Dataset(name="t", groups=["a"], episodes=eps, questions=qs)
    cfg = Mem0Config(k=1, summary_every=0)
    llm, backend = make_llm(Decider())
    first = run_mem0(data, llm, HashingEmbedder(), cfg, tmp_path)
    assert backend.batches and (tmp_path / "finished.json").exists()
    llm2, backend2 = make_llm(Decider())
    again = run_mem0(data, llm2, HashingEmbedder(), cfg, tmp_path)
    assert backend2.batches == []
    assert again.contexts == first.contexts and again.stats == first.stats
    assert [r.model_dump() for r in again.retrieved] == [r.model_dump() for r in first.retrieved]
    wider = run_mem0(data, llm2, HashingEmbedder(), Mem0Config(k=2, summary_every=0), tmp_path)  # new settings: searched again
    assert backend2.batches == [] and len(wider.contexts[0].splitlines()) == 2  # the built memory is reused
    (tmp_path / "finished.json").write_text("{torn")
    assert run_mem0(data, llm2, HashingEmbedder(), Mem0Config(k=2, summary_every=0), tmp_path).contexts == wider.contexts


# ------------------------------------------------------------------ Mem0g, "graphiti" ablation
_CAP = re.compile(r"\b[A-Z][a-z]+\b")


def graph_responder(req: LLMRequest):
    stage = req.stage.removeprefix("mem0g_")
    body = text_of(req)
    if stage in ("extract_entities", "query_entities"):
        cur = body.split("CURRENT message", 1)[1].split("\n", 1)[1].split("\nTask:")[0]
        return {"names": [w for w in _CAP.findall(cur) if w not in {"I", "Where", "Does"}]}
    if stage == "extract_facts":
        ents = [m.group(2) for ln in body.splitlines() if (m := _NUM.match(ln))]
        city = re.search(r"live in ([A-Z][a-z]+)", body.split("CURRENT message", 1)[1])
        if not city or city.group(1) not in ents:
            return {"facts": []}
        return {"facts": [{"source": 0, "target": ents.index(city.group(1)), "relation": "LIVES_IN",
                           "fact": f"{ents[0]} lives in {city.group(1)}.", "valid_at": "", "invalid_at": ""}]}
    if stage == "resolve_entities":
        return {"decisions": []}
    if stage == "dedup_facts":
        lines = body.splitlines()
        old = [m.group(2) for ln in lines[1:lines.index(next(x for x in lines if x.startswith("New facts")))]
               if (m := _NUM.match(ln))]
        new = [m.group(2) for ln in lines[lines.index(next(x for x in lines if x.startswith("New facts"))):]
               if (m := _NUM.match(ln))]
        return {"decisions": [{"new": i, "duplicate_of": -1,
                               "contradicts": [j for j, o in enumerate(old) if " lives in " in o and " lives in " in f]}
                              for i, f in enumerate(new)]}
    raise AssertionError(f"unexpected stage {req.stage}")


def test_mem0g_invalidates_contradicted_relation(tmp_path):
    eps = episodes("g", [("Caroline", "I live in Boston"), ("Melanie", "Nice"), ("Caroline", "Now I live in Austin")])
    llm, backend = make_llm(graph_responder)
    store, stats = build_graph(eps, llm, HashingEmbedder(), tmp_path / "mem0g.sqlite")
    facts = {f.fact: f for f in store.facts("g")}
    assert set(facts) == {"Caroline lives in Boston.", "Caroline lives in Austin."}
    old, new = facts["Caroline lives in Boston."], facts["Caroline lives in Austin."]
    assert old.expired_at == T0 + timedelta(minutes=2) and old.invalid_at == new.valid_at
    assert new.expired_at is None and new.invalid_at is None
    assert {b[0].stage for b in backend.batches} <= {"mem0g_extract_entities", "mem0g_extract_facts",
                                                       "mem0g_resolve_entities", "mem0g_dedup_facts"}
    assert llm.ledger.stage("mem0g_dedup_facts").calls == 1
    q = Question(group_id="g", id="g:q", question="Where does Caroline live?", answer="Austin", category="single-hop")
    hits = search_graph(store, llm, HashingEmbedder(), [q], k=5)[0]
    assert {h.id for h in hits} == {old.id, new.id}
    assert all(set(h.scores) <= {"entity", "triple"} and h.scores for h in hits)
    text = render_relations(store, "g", hits)
    assert "Caroline -[LIVES_IN]-> Boston" in text and "[no longer true]" in text
    assert "Caroline -[LIVES_IN]-> Austin: Caroline lives in Austin. (valid 2023-05-08 - now)" in text
    only_valid = search_graph(store, llm, HashingEmbedder(), [q], k=5, include_invalid=False)[0]
    assert [h.id for h in only_valid] == [new.id]


def test_run_mem0g_adds_relations_to_the_context(tmp_path):
    eps = episodes("g", [("Caroline", "I live in Boston"), ("Melanie", "Nice"), ("Caroline", "Now I live in Austin")])
    qs = [Question(group_id="g", id="g:q", question="Where does Caroline live?", answer="Austin", category="single-hop")]
    data = Dataset(name="t", groups=["g"], episodes=eps, questions=qs)
    decider = Decider()

    def responder(req: LLMRequest):
        return graph_responder(req) if req.stage.startswith("mem0g_") else decider(req)

    llm, _ = make_llm(responder)
    run = run_mem0(data, llm, HashingEmbedder(), Mem0Config(graph=True, graph_kind="graphiti", k=2, summary_every=0),
                   tmp_path)
    assert run.method == "mem0g"
    memories, relations = run.contexts[0].split("\n\nRelations:\n")
    assert memories.startswith("Memories:\n[2023/05/08 (Mon) 13:0") and len(memories.splitlines()) == 3
    assert "Caroline -[LIVES_IN]-> Austin" in relations and "Caroline -[LIVES_IN]-> Boston" in relations
    kinds = [h.id.split("_")[0] for h in run.retrieved[0].facts]
    assert kinds == ["mem", "mem", "fact", "fact"]
    assert (tmp_path / "mem0.sqlite").exists() and (tmp_path / "mem0g.sqlite").exists()
    assert run.stats["graph"]["facts"]["g"]["facts"] == 2


def test_update_schema_makes_the_decoder_write_the_memory_id():
    """A constrained decoder may skip optional keys: the 1.5B CPU model answered UPDATE without an id for
    every fact of a session. The JSON Schema lists id (and text) as required; parsing stays lenient."""
    from mnemis.prompts.mem0_update import MEM0_UPDATE, MemoryOperation

    assert set(MemoryOperation.model_json_schema()["required"]) == {"operation", "id", "text"}
    assert MemoryOperation.model_validate({"operation": "NOOP"}).id == -1
    assert "number in front of the memory" in MEM0_UPDATE.render("f", "2023-05-08", ["m"])[0]["content"]
