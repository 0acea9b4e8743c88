"""mnemis.eval.disagreement: why one method lost the questions another won, from the rows' own recall and ids."""

from __future__ import annotations

from mnemis.eval.disagreement import disagreement, disagreements, item_kind
from mnemis.types import category_id, entity_id, fact_id


def row(method, q, ok, recall=None, ids=(), flags=(), reply="r"):
    return {"method": method, "question_id": q, "labels": {"strict": ok},
            "recall": {} if recall is None else {"episodes_recall": recall},
            "context_ids": list(ids), "flags": list(flags), "reply": reply}


def test_item_kind_reads_the_store_id_prefixes():
    assert item_kind(entity_id("g", "Ann")) == "entities"
    assert item_kind(fact_id("g", "g:D1:1", 0)) == "facts"
    assert item_kind(category_id("g", 1, "Hobbies")) == "categories"
    assert item_kind("conv-26:D1:3") == "episodes"
    assert item_kind("plainid") == "episodes"


def test_buckets_and_why_the_losing_side_lost():
    ent, fact = entity_id("g", "Ann"), fact_id("g", "g:D1:1", 0)
    rows = [
        # q1: both right; q2: both wrong; q3-q6: only rag right, for four different reasons; q7: only mnemis
        row("mnemis", "q1", True, 1.0), row("rag", "q1", True, 1.0),
        row("mnemis", "q2", False, 0.0), row("rag", "q2", False, 0.0),
        row("mnemis", "q3", False, 1.0, ids=["e1", ent, fact], flags=["s2_fallback"]), row("rag", "q3", True, 1.0),
        row("mnemis", "q4", False, 0.5, flags=["s2_fallback", "s2_empty_top_selection"]), row("rag", "q4", True, 1.0),
        row("mnemis", "q5", False, 0.0), row("rag", "q5", True, 1.0),
        row("mnemis", "q6", False, 0.0), row("rag", "q6", True, 0.0),
        row("mnemis", "q7", True, 1.0), row("rag", "q7", False, None),
        row("mnemis", "q8", None, 1.0), row("rag", "q8", True, 1.0),   # a failed judge: left out, counted
        row("full_context", "q1", True),
    ]
    d = disagreement(rows, "mnemis", "rag", judge="strict")
    assert (d["both_correct"], d["both_wrong"], d["a_only"], d["b_only"], d["missing_labels"]) == (1, 1, 1, 4, 1)
    why = {k: v["n"] for k, v in d["why_a_lost"].items()}
    assert why == {"saw_all_evidence": 1, "saw_some_evidence": 1, "missed_evidence_winner_saw_it": 1,
                   "missed_evidence_winner_too": 1}
    assert d["why_a_lost"]["saw_all_evidence"]["question_ids"] == ["q3"]
    assert {k: v["n"] for k, v in d["why_b_lost"].items()} == {"no_evidence_recall": 1}
    assert d["a_flags"]["b_only"] == {"s2_empty_top_selection": 1, "s2_fallback": 2}
    assert d["mean_context_items"]["mnemis"] == {"episodes": 0.12, "entities": 0.12, "facts": 0.12}
    assert d["mean_context_items"]["rag"] == {}


def test_disagreements_only_for_pairs_present_and_per_judge():
    rows = [row("mnemis", "q1", True), row("rag", "q1", False)]
    out = disagreements(rows, [("mnemis", "rag"), ("mnemis", "full_context")], judges=["strict"])
    assert list(out) == ["mnemis_vs_rag"] and list(out["mnemis_vs_rag"]) == ["strict"]
    assert out["mnemis_vs_rag"]["strict"]["a_only"] == 1
    assert out["mnemis_vs_rag"]["strict"]["median_reply_chars"] == {"mnemis": 1.0, "rag": 1.0}
