"""A small run directory for the explorer tests: one group with a three-layer hierarchy, three questions
answered by two methods, judge rationales, System-2 walks and System-1 lists."""

from __future__ import annotations

import json
from pathlib import Path

G = "conv-1"
NODES = {"cat_top": ("Life", 2), "cat_pets": ("Pets", 1), "cat_trips": ("Trips", 1),
         "ent_miso": ("Miso", 0), "ent_alice": ("Alice", 0), "ent_oslo": ("Oslo", 0)}
CHILDREN = {"cat_top": ["cat_pets", "cat_trips"], "cat_pets": ["ent_miso", "ent_alice"], "cat_trips": ["ent_oslo"]}
LINE1 = "[2024/05/01 (Wed) 10:00] Alice: I adopted a cat named Miso."
LINE2 = "[2024/05/02 (Thu) 09:00] Alice: Off to Oslo </script> tomorrow."
QUESTIONS = [  # id, category, question, gold, evidence, {method: (answer, correct, context ids)}
    ("q0", "single-hop", "What is the cat's name?", "Miso", [("conv-1:D1:1", LINE1)],
     {"mnemis": ("Miso", True, ["conv-1:D1:1"]), "rag": ("Miso", True, ["conv-1:D1:1"])}),
    ("q1", "temporal", "When did Alice go to Oslo?", "2 May 2024", [("conv-1:D1:2", LINE2)],
     {"mnemis": ("in June", False, ["conv-1:D1:1"]), "rag": ("2 May", True, ["conv-1:D1:2"])}),
    ("q2", "temporal", "When was Miso adopted?", "1 May 2024", [("conv-1:D1:1", LINE1)],
     {"mnemis": ("1 May 2024", True, ["conv-1:D1:1"]), "rag": ("unknown", False, ["conv-1:D1:2"])}),
]


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "progress").mkdir(parents=True)
    rows, reasons = [], {"mnemis": [], "rag": []}
    for qid, cat, question, gold, ev, methods in QUESTIONS:
        for method, (answer, ok, ctx) in methods.items():
            rows.append({"method": method, "seed": 0, "question_id": f"{G}:{qid}", "group_id": G, "category": cat,
                         "question": question, "gold": gold, "answer": answer, "labels": {"generous": ok},
                         "context_ids": ctx})
            reasons[method].append({"key": qid, "question_id": f"{G}:{qid}", "label": ok,
                                    "reasoning": f"{method} {qid}: {'matches' if ok else 'differs from'} the gold"})
    (run / "questions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for method, rs in reasons.items():
        (run / "progress" / f"judge.{method}.0.generous.jsonl").write_text("\n".join(json.dumps(r) for r in rs))
    metrics = {m: {"headline_judge": "generous", "n_questions": 3, "judges": {"generous": {"raw": {"overall": {
        "accuracy": acc, "correct": round(acc * 3), "total": 3, "ci": [0.0, 1.0]}}}}} for m, acc in
        (("mnemis", 2 / 3), ("rag", 2 / 3))}
    (run / "metrics.json").write_text(json.dumps(metrics))
    graph = {"groups": {G: {"nodes": {k: {"name": n, "layer": lay} for k, (n, lay) in NODES.items()},
                            "children": CHILDREN, "layers": {"1": ["cat_pets", "cat_trips"], "2": ["cat_top"]}}},
             "evidence": {f"{G}:{q[0]}": [{"id": i, "line": line} for i, line in q[4]] for q in QUESTIONS}}
    (run / "explorer_graph.json").write_text(json.dumps(graph))
    (run / "hierarchy_metrics.json").write_text(json.dumps({G: {"entities": 3, "layers": 2,
                                                                "nodes_per_layer": [3, 2, 1], "coverage": 1.0}}))
    rounds = [
        {"round": 0, "layer": 2, "candidates": ["cat_top"], "prompts": 1, "selected": ["cat_top"]},
        {"round": 1, "layer": 1, "candidates": ["cat_pets", "cat_trips"], "prompts": 1, "selected": ["cat_pets"],
         "flagged": ["cat_trips"]},
        {"round": 2, "layer": 0, "candidates": ["ent_miso", "ent_alice"], "prompts": 1, "selected": ["ent_miso"],
         "invented": 1},
    ]
    (run / "traversal.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "rounds": rounds, "selected_nodes": 3}) for q in QUESTIONS))
    (run / "contexts.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "text": f"## Conversation messages\n{LINE1}\n{LINE2}"})
        for q in QUESTIONS))
    (run / "system1.jsonl").write_text("\n".join(json.dumps(
        {"question_id": f"{G}:{q[0]}", "group_id": G, "episodes": ["conv-1:D1:2", "conv-1:D1:1"], "entities": [],
         "facts": []}) for q in QUESTIONS))
    return run
