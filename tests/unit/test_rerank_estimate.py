"""The H200 reranking estimate is plain arithmetic over the measured pairs: checked by hand on a tiny input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def est():
    spec = importlib.util.spec_from_file_location("rerank_estimate", REPO / "experiments/bench/rerank_estimate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["rerank_estimate"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_minutes_follow_from_pairs_tokens_and_the_stated_assumptions(est):
    stats = {"pairs_per_query": {"mean": 100.0}, "reranker_doc_tokens_per_query": {"mean": 2000.0}}
    pairs = {"builds": {"locomo": {"graph": {"questions": 10}, "runs": {"p": {"paper": stats, "default": stats}}}}}
    out = est.estimate(pairs, mfu=0.5)
    a = est.ASSUMED
    rate = a["h200_bf16_peak_flops"] * 0.5 / (a["reranker_parameters"] * a["flop_per_parameter_per_token"])
    row = out["policies"]["p"]["paper"]
    assert row["pairs"] == 1000 and row["document_tokens"] == 20000
    assert row["minutes_documents_only"] == pytest.approx(round(20000 / rate / 60, 1))
    assert row["minutes_every_token"] == pytest.approx(round((20000 + 1000 * a["prefix_tokens_per_pair"]) / rate / 60, 1))
    assert out["tokens_per_second_assumed"] == round(rate) and out["mfu_assumed"] == 0.5
