"""Mem0 stages keep the complete facts of an extraction reply cut at max_tokens (client salvage)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from mnemis.baselines.mem0.pipeline import Mem0Config, build_mem0
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import CountingBackend, Cut, Killed, ScriptedBackend
from mnemis.types import Episode

T0 = datetime(2023, 5, 8, 13, 0)


def test_cut_extraction_keeps_complete_facts(tmp_path):
    def respond(req):
        if req.stage == "mem0_extract":
            text = json.dumps({"facts": ["Ann likes tea", "Ann owns a cat", "Ann plays the violin"]})
            return Cut(text[: text.index("plays") ])  # cut inside the third fact
        return {"operation": "ADD", "id": -1, "text": req.messages[-1]["content"].split("NEW FACT")[1]
                .split("\n")[1].strip()}

    eps = [Episode(group_id="g", id="g:1", source_id="1", name="t", speaker="Ann", content="Ann: hi",
                   valid_at=T0 + timedelta(minutes=1), session=1, turn=0, position=0)]
    llm = LLM(ScriptedBackend(respond), max_retries=2)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    build_mem0(eps, llm, HashingEmbedder(), Mem0Config(pair_size=1, summary_every=0), store)
    assert sorted(m.text for m in store.memories("g")) == ["Ann likes tea", "Ann owns a cat"]
    st = llm.ledger.stage("mem0_extract")
    assert (st.truncated, st.salvaged, st.failures, st.retries) == (1, 1, 0, 0)
    store.close()


def _Counting(crash_after=None):  # noqa: N802
    return CountingBackend(lambda r: {"names": [r.messages[-1]["content"].split("?")[0].split()[-1]]},
                           crash_after=crash_after)


def test_query_entities_resume_from_committed_chunks(tmp_path):
    from mnemis.baselines.mem0.graph import query_entities
    from mnemis.store.sqlite import GraphStore
    from mnemis.types import Question

    qs = [Question(id=f"q{i}", group_id="g", question=f"Who is Person{i}?", answer="x", category="single-hop",
                   index=i) for i in range(7)]
    with GraphStore(tmp_path / "g.db") as store:
        first = _Counting(crash_after=5)
        try:
            query_entities(qs, LLM(first, chunk_size=2), store=store)
        except Killed:
            pass
        assert first.total == 4  # two chunks committed, the third crashed
        again = _Counting()
        names = query_entities(qs, LLM(again, chunk_size=2), store=store)
        assert again.total == 3  # only the questions of the uncommitted chunks were asked
        assert names == [[f"Person{i}"] for i in range(7)]
