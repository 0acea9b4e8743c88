"""Judge leniency: how often a judge accepts answers known to be wrong (``locomo_judge_stress.json``).

Each of LoCoMo's 1,540 category 1-4 questions comes with a ``wrong_specific`` answer (every fact
shifted) and a ``wrong_vague`` one (on topic, commits to nothing). A judge's acceptance rate on them
is its leniency, reported next to every score it gives. The widely used generous gpt-4o-mini judge
accepts 10.6 % / 62.8 % (``REFERENCE_RATES``); the ``generous`` criterion is worded after it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.data.locomo import CATEGORIES
from mnemis.data.shared import load_json_list
from mnemis.data.sources import DataDirs, locate
from mnemis.types import Question

KINDS = ("wrong_specific", "wrong_vague")
REFERENCE_RATES = {"wrong_specific": 0.106, "wrong_vague": 0.628}


def default_stress_path(dirs: DataDirs | None = None, *, fetch_missing: bool = False) -> Path:
    """``locomo_judge_stress.json`` in the data dirs (``mnemis.data.sources``), fetched when asked and missing."""
    return locate("judge_stress", dirs, fetch_missing=fetch_missing)


def load_stress(path: str | Path | None = None) -> list[dict[str, Any]]:
    return load_json_list(path or default_stress_path(fetch_missing=True), "judge stress")


def sample_items(items: Sequence[Mapping[str, Any]], n: int | None = None, seed: int = 0) -> list[Mapping[str, Any]]:
    """All items, or a seeded random sample of ``n`` (kept in file order)."""
    if n is None or n >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


def stress_question(item: Mapping[str, Any]) -> Question:
    """A :class:`Question` for one stress item (group = ``locomo_<conversation index>``)."""
    qid = str(item["question_id"])
    cat = item.get("category")
    return Question(
        id=qid, group_id=qid.rsplit("_qa", 1)[0], question=str(item["question"]),
        answer=str(item["golden_answer"]), category=CATEGORIES.get(int(cat), str(cat)) if cat is not None else "",
        index=int(qid.rsplit("_qa", 1)[1]) if "_qa" in qid else 0,
    )


def acceptance_rates(labels: Sequence[bool | None], kinds: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per kind: accepted / judged (failures excluded from the rate, counted)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(kinds):
        labs = [lab for lab, k in zip(labels, kinds) if k == kind]
        judged = [lab for lab in labs if lab is not None]
        out[kind] = {
            "accepted": sum(bool(x) for x in judged), "judged": len(judged), "failures": len(labs) - len(judged),
            "rate": (sum(bool(x) for x in judged) / len(judged)) if judged else None,
            "reference_rate": REFERENCE_RATES.get(kind),
        }
    return out


def judge_leniency(
    judges: Mapping[str, object],
    *,
    path: str | Path | None = None,
    items: Sequence[Mapping[str, Any]] | None = None,
    n: int | None = None,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
    max_tokens: int = 200,
) -> dict[str, Any]:
    """Acceptance rates of every judge on the wrong answers of ``n`` sampled questions (all if None).

    One batched ``generate`` per judge covering every (question, kind) pair. Returns ``{"n_questions",
    "seed", "judges": {name: {kind: {accepted, judged, failures, rate, reference_rate}}},
    "criteria": {name: criterion}}`` (judges: ``mnemis.eval.judge.Judge`` objects or bare LLMs).
    """
    from mnemis.eval.judge import as_judge, judge_one_llm

    chosen = sample_items(items if items is not None else load_stress(path), n, seed)
    questions, answers, tags = [], [], []
    for item in chosen:
        q = stress_question(item)
        for kind in kinds:
            questions.append(q)
            answers.append(str(item[kind]))
            tags.append(kind)
    result: dict[str, Any] = {"n_questions": len(chosen), "seed": seed, "judges": {},
                              "criteria": {name: as_judge(j).criterion for name, j in judges.items()}}
    for name, llm in judges.items():
        labels = judge_one_llm(llm, questions, answers, max_tokens=max_tokens, stage=f"leniency:{name}")
        result["judges"][name] = acceptance_rates(labels, tags)
    return result
