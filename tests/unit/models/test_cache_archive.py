"""A run's response and reranker caches survive as one compressed file and replay exactly."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mnemis.models.cache_archive import export_archive, import_archive, stage_counts
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.models.rerank_cache import CachedReranker


class _Scorer:
    model_id = "overlap"

    def __init__(self):
        self.calls = 0

    def score(self, queries, documents):
        self.calls += 1
        return np.array([len(set(q.split()) & set(d.split())) for q, d in zip(queries, documents)], dtype=float)


def _req(i):
    return LLMRequest(messages=[{"role": "user", "content": f"question {i}"}], sampling=Sampling(max_tokens=8),
                      stage="answer")


def test_export_import_replays_without_a_model(tmp_path):
    src = tmp_path / "src"
    llm = LLM(ScriptedBackend(lambda r: "answer to " + r.messages[0]["content"]), cache_dir=src / "llm")
    first = [r.text for r in llm.generate([_req(i) for i in range(3)])]
    CachedReranker(_Scorer(), src / "rerank").score("a b", ["a", "b c", "d"])
    counts = export_archive(src, tmp_path / "run.cache.jsonl.gz")
    assert counts == {"llm": 3, "rerank": 3}
    again = export_archive(src, tmp_path / "again.cache.jsonl.gz")
    assert again == counts and gzip.decompress((tmp_path / "run.cache.jsonl.gz").read_bytes()) == \
        gzip.decompress((tmp_path / "again.cache.jsonl.gz").read_bytes())  # deterministic

    dst = tmp_path / "dst"
    assert import_archive(tmp_path / "run.cache.jsonl.gz", dst) == counts
    dead = ScriptedBackend(lambda r: pytest.fail("a replay must not call the model"))
    replayed = LLM(dead, cache_dir=dst / "llm", cache_mode="replay_only").generate([_req(i) for i in range(3)])
    assert [r.text for r in replayed] == first and all(r.cached for r in replayed)
    scorer = _Scorer()
    assert CachedReranker(scorer, dst / "rerank").score("a b", ["a", "b c", "d"]).tolist() == [1.0, 1.0, 0.0]
    assert scorer.calls == 0
    counts = stage_counts(dst)  # what a stopped run holds, per stage, without a model
    assert set(counts) == {"answer"} and counts["answer"]["replies"] == 3 and counts["answer"]["cut"] == 0
    assert counts["answer"]["completion_tokens"] >= 0 and stage_counts(tmp_path / "nowhere") == {}


def test_a_broken_archive_names_the_line(tmp_path):
    path = tmp_path / "bad.cache.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"kind": "llm", "key": "k"}\n'))
    with pytest.raises(ValueError, match=r"bad\.cache\.jsonl\.gz: line 1"):
        import_archive(path, tmp_path / "c")
