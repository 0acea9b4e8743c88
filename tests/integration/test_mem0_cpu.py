"""Mem0 on a tiny LoCoMo slice (conv-26, session 1, first 8 turns, 2 questions) with SmolLM2-135M through
vLLM on CPU and the MiniLM embedder, through the shared answerer and judge to metrics (< 3 min).

Checks that the real model path runs end to end and is accounted for (stages, ledger, history,
metrics), not the quality of a 135M model's memories. Metrics are printed and, when
``$MNEMIS_MEM0_METRICS`` is set, written there.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from mnemis.baselines.mem0 import Mem0Config, evaluate_mem0
from mnemis.baselines.mem0.pipeline import STORE_FILE
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.ledger import Ledger
from mnemis.models.llm.client import LLM
from mnemis.types import Dataset

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

GROUP = "conv-26"
QUESTIONS = ("conv-26:q0", "conv-26:q4")


@pytest.fixture(scope="module")
def backend(vllm_backend):
    """The session's shared SmolLM2 engine (tests/integration/conftest.py)."""
    return vllm_backend


def tiny_slice(locomo) -> Dataset:
    eps = [e for e in locomo.episodes if e.group_id == GROUP and e.session == 1][:8]
    qs = [q for q in locomo.questions if q.id in QUESTIONS]
    assert len(eps) == 8 and len(qs) == 2
    return Dataset(name="locomo-tiny", groups=[GROUP], episodes=eps, questions=qs)


def test_mem0_smollm2_vllm_cpu(backend, locomo, tmp_path):
    from mnemis.models.embed import SentenceTransformerEmbedder

    data = tiny_slice(locomo)
    ledger = Ledger()
    # the 135M model pads replies to max_tokens: keep the configured budgets and schemas (a cut reply keeps its
    # complete items), as the quickstart keeps its small budgets
    llm = LLM(backend, cache_dir=tmp_path / "cache", max_retries=1, ledger=ledger, reply_budget="off")
    cfg = Mem0Config(summary_every=4, m=4, k=5, max_facts=3,
                     max_tokens={"mem0_extract": 256, "mem0_update": 128, "mem0_summary": 384})
    t0 = time.perf_counter()
    run, records, metrics = evaluate_mem0(data, llm, SentenceTransformerEmbedder("minilm"), cfg, tmp_path,
                                          judges={"smollm2": llm}, answer_max_tokens=48)
    wall = time.perf_counter() - t0
    stages = ledger.to_dict()["stages"]
    print(json.dumps({"wall_s": round(wall, 1), "stats": run.stats, "contexts": run.contexts,
                      "metrics": metrics, "ledger": stages}, indent=1, default=str))
    if os.environ.get("MNEMIS_MEM0_METRICS"):
        with open(os.environ["MNEMIS_MEM0_METRICS"], "w", encoding="utf-8") as f:
            json.dump({"mem0": metrics}, f, indent=1)

    # 4 message pairs: 4 extraction requests; the summary is due before the pair starting at message 4
    assert stages["mem0_extract"]["calls"] == 4 and stages["mem0_extract"]["batches"] == 4
    assert stages["mem0_summary"]["calls"] == 1
    store = Mem0Store(tmp_path / STORE_FILE)
    history = store.history(GROUP)
    # with compact constrained JSON the 135M model often extracts no candidate fact at all: then no update is
    # asked and nothing is stored; every update that is asked is logged, bad ones as counted NOOPs
    n_updates = stages.get("mem0_update", {}).get("calls", 0)
    assert len(history) == n_updates
    assert stages.get("mem0_update", {}).get("batches", 0) <= 4 * 3  # one batch per fact round (<= max_facts) per step
    assert store.count(GROUP) == sum(h.operation == "ADD" for h in history) - sum(
        h.operation == "DELETE" for h in history)
    assert store.summary(GROUP)[1] == 4
    store.close()
    assert [r.method for r in records] == ["mem0", "mem0"] and len(run.contexts) == 2
    for ctx, ret in zip(run.contexts, run.retrieved):
        assert len(ret.facts) == min(5, run.stats["memories"][GROUP])
        assert ctx.count("\n") + 1 == len(ret.facts) if ret.facts else ctx == ""
        assert all(line.startswith("[2023/05/08 (Mon) ") for line in ctx.splitlines())
    table = metrics["judges"]["smollm2"]["raw"]
    labels = [r.labels["smollm2"] for r in records]
    # judge failures count as wrong and are counted; the schema-constrained judge fails at most one of two
    assert table["judge_failures"] == labels.count(None) <= 1
    assert table["overall"]["correct"] == labels.count(True) and table["overall"]["total"] == 2
    assert stages["answer"]["calls"] == 2
