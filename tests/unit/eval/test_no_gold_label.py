"""No gold label reaches any prompt that extracts, selects or answers (every mode, every method): two runs whose
questions differ only in category, abstention flag, evidence and gold answer send identical requests to the
model at every stage but the judges'."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from mnemis.app.jobs import run_command
from mnemis.components import _MODELS
from mnemis.config import compose

TURNS = [("Ann", "I adopted a cat named Miso last week."), ("Bob", "Miso is a lovely name! I got a dog."),
         ("Ann", "We should walk your dog and show Miso the park."), ("Bob", "My dog Rex would like that.")]
QUESTION = "What pet did Ann adopt?"
VARIANTS = {  # same question text and date; every gold label differs
    "a": {"question": QUESTION, "answer": "a cat", "evidence": ["D1:1"], "category": 4},
    "b": {"question": QUESTION, "adversarial_answer": "a dog", "evidence": ["D1:2", "D1:4"], "category": 5},
}
LME_VARIANTS = {"a": "q1", "b": "q1_abs"}  # the abstention flag comes from the id
JUDGE_STAGES = ("judge", "leniency")
# LongMemEval's abstention flag comes from the question id, which also names its haystack's group, and store
# ids hash the group: the released selection form shows them, so they are compared by position
_STORE_ID = re.compile(r"\b(cat|ent)_[0-9a-f]{16}\b")


def _locomo(variant: str) -> list[dict]:
    conv = {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(TURNS)]}
    return [{"sample_id": "conv-1", "conversation": conv, "qa": [copy.deepcopy(VARIANTS[variant])],
             "event_summary": {}, "observation": {}, "session_summary": {}}]


def _lme(variant: str) -> list[dict]:
    return [{"question_id": LME_VARIANTS[variant], "question_type": "single-session-user", "question": QUESTION,
             "answer": "a cat" if variant == "a" else "You did not mention a pet.",
             "question_date": "2023/05/30 (Tue) 23:40", "haystack_session_ids": ["s1"],
             "haystack_dates": ["2023/05/20 (Sat) 02:21"],
             "haystack_sessions": [[{"role": "user", "content": t, **({"has_answer": True} if i == 0 else {})}
                                    for i, (_, t) in enumerate(TURNS)]],
             "answer_session_ids": ["s1"] if variant == "a" else []}]


def _requests(tmp_path, dataset: str, variant: str, mode: str) -> list[tuple]:
    data = tmp_path / f"{dataset}_{variant}.json"
    data.write_text(json.dumps(_locomo(variant) if dataset == "locomo" else _lme(variant)))
    methods = "[mnemis,rag,full_context,mem0,mem0g]" if dataset == "locomo" else "[mnemis,rag,full_context]"
    cfg = compose(["command=run", f"dataset={dataset}", f"dataset.path={data}",
                   "llm=schema_fake", "embedder=hashing", "reranker=cosine", f"mode={mode}",
                   # paper mode's graphiti-core builder is sent the episodes alone, through its own server; here our
                   # builder stands in so every request goes through the scripted backend
                   *(["judge_llms.paper=${llm}", "judge.longmemeval_format=reasoned", "ingest.builder=mnemis"]
                     if mode == "paper" else []),
                   "judge.leniency.enabled=false",
                   f"methods={methods}",
                   "cache_mode=off", "preflight=false", f"paths.artifacts_dir={tmp_path}/art_{variant}",
                   f"paths.cache_dir={tmp_path}/cache_{variant}"])
    def backends() -> dict[int, Any]:  # clients with other cache dirs share one backend: count each backend once
        found = (getattr(m, "backend", None) for m in _MODELS.values())
        return {id(b): b for b in found if getattr(b, "batches", None) is not None}

    before = {k: len(b.batches) for k, b in backends().items()}
    run_command(cfg, tmp_path / f"run_{dataset}_{mode}_{variant}")
    sent = []
    for key, backend in backends().items():
        for batch in backend.batches[before.get(key, 0):]:
            sent += [(r.stage, _STORE_ID.sub(r"\1_ID", json.dumps(r.messages)),
                      _STORE_ID.sub(r"\1_ID", json.dumps(r.json_schema(), sort_keys=True)))
                     for r in batch if not r.stage.startswith(JUDGE_STAGES)]
    return sorted(sent)


@pytest.mark.parametrize(("dataset", "mode"), [("locomo", "tuned"), ("locomo", "paper"), ("longmemeval_s", "paper")])
def test_requests_do_not_depend_on_gold_labels(tmp_path, dataset, mode):
    a = _requests(tmp_path, dataset, "a", mode)
    b = _requests(tmp_path, dataset, "b", mode)
    stages = {s for s, _, _ in a}
    assert "answer" in stages and "select" in stages  # answered and walked the hierarchy
    if dataset == "locomo":
        assert {"mem0_extract", "mem0_update"} & stages  # the Mem0 baselines ran too
    assert a == b
