"""Selection cost of System-2 on the small LoCoMo-like graph of :mod:`mnemis.testing.toy_memory` (also the graph
of ``tests/integration/test_system2_cpu.py``).

Runs the real walk with an *oracle* selector (selects exactly the ancestors of the entities mentioned
in each question's gold evidence, plus those entities; never ``take_all_children``), i.e. the cost of
a perfectly selective model, and a *select-all* selector (what SmolLM2-135M does), the worst case.
Prompt tokens are counted with the SmolLM2 chat template. Also reports the share of prompt tokens
in a prefix shared by another prompt of the same round (what vLLM prefix caching can reuse).

    python experiments/bench/system2_cost.py [out.json]
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.system2 import HierarchyView, System2, selection_cost
from mnemis.testing.toy_memory import QUESTIONS
from mnemis.testing.toy_memory import build_toy_store as _build
from mnemis.types import Episode, Question


def _tokenizer():
    from transformers import AutoTokenizer

    from mnemis.models.tiny import dequantized_smollm2

    return AutoTokenizer.from_pretrained(str(dequantized_smollm2()))


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(out: str | None = None) -> dict:
    tok = _tokenizer()
    store = _build(Path(tempfile.mkdtemp()) / "m.db")
    qs = [Question(group_id=g, id=f"{g}-q{n}", question=t, answer="", category="1",
                   evidence=[Episode.make_id(g, f"D{i // 4 + 1}:{i % 4 + 1}") for i in ev])
          for n, (g, t, ev) in enumerate(QUESTIONS)]
    relevant: dict[str, set[str]] = {}
    for q in qs:
        view = HierarchyView.load(store, q.group_id)
        parents: dict[str, set[str]] = {}
        for p, kids in view.children.items():
            for c in kids:
                parents.setdefault(c, set()).add(p)
        todo = {m.entity_id for m in store.mentions(q.group_id, episode_ids=q.evidence)}
        rel = set(todo)
        while todo:
            todo = {p for c in todo for p in parents.get(c, ())} - rel
            rel |= todo
        relevant[q.question] = {view.nodes[i].name for i in rel}

    def oracle(req):
        user = req.messages[-1]["content"]
        query = user.split('Query: "', 1)[1].split('"\n', 1)[0]
        body = user.split("Available nodes:\n", 1)[1].split("\n\nQuery:", 1)[0]
        cands = [json.loads(line) for line in body.splitlines()]
        return {"selections": [{"id": c["id"], "name": c["name"], "take_all_children": False}
                               for c in cands if c["name"] in relevant[query]]}

    def select_all(req):
        body = req.messages[-1]["content"].split("Available nodes:\n", 1)[1].split("\n\nQuery:", 1)[0]
        return {"selections": [{"id": json.loads(x)["id"], "take_all_children": False} for x in body.splitlines()]}

    report = {}
    for name, fn in (("oracle", oracle), ("select_all", select_all)):
        for entity_round in (True, False):
            backend = ScriptedBackend(fn)
            # the walk as this table measured it: a first round may pick none, one prompt per page of 60
            res = System2(store, LLM(backend), entity_round=entity_round, max_candidates_per_prompt=60,
                          min_top_selections=0, page_by_window=False).select(qs)
            total = shared = 0
            for batch in backend.batches:
                texts = [tok.apply_chat_template(r.messages, add_generation_prompt=True, tokenize=False) for r in batch]
                ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
                for i, a in enumerate(ids):
                    total += len(a)
                    shared += max((_shared_prefix(a, b) for j, b in enumerate(ids) if j < i), default=0)
            cost = selection_cost(res)
            report[f"{name}/entity_round={entity_round}"] = {
                "queries": len(qs), "generate_calls": len(backend.batches), "calls_per_query": cost["calls_per_query"],
                "prompt_tokens_per_query": round(total / len(qs), 1),
                "prefix_cacheable_share": round(shared / total, 3) if total else 0.0,
                "fallbacks": cost["fallbacks"],
                "items_per_query": {k: sum(r.traversal.counts.get(k, 0) for r in res) / len(qs)
                                    for k in ("entities", "facts", "episodes")},
            }
    print(json.dumps(report, indent=1))
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=None, help="where to write the JSON (default: print only)")
    main(ap.parse_args().out)
