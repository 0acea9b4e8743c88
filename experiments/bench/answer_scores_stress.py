"""Judge-free answer scores of known-wrong answers: token F1, BLEU-1 and LoCoMo F1 (``mnemis.eval.answer_scores``)
of the judge stress set's two wrong answers per LoCoMo question (``wrong_specific``: every fact shifted;
``wrong_vague``: on topic, commits to nothing), against the gold answer, overall and per category.

The partial credit these scores give to answers a careful grader marks WRONG is the floor to read any
F1 / BLEU-1 beside; the judges' acceptance rates of the same answers are their leniency. CPU only, seconds.

    python experiments/bench/answer_scores_stress.py [stress.json] [--out experiments/results/answer_scores_stress.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnemis.eval.answer_scores import answer_scores, mean_scores
from mnemis.eval.leniency import KINDS, load_stress, stress_question
from mnemis.eval.metrics import order_categories


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stress", nargs="?", default=None, help="locomo_judge_stress.json (default: ../shared/data)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    items = load_stress(args.stress)
    rows: dict[str, list[tuple[str, dict[str, float]]]] = {k: [] for k in (*KINDS, "gold")}
    for item in items:
        q = stress_question(item)
        for kind in KINDS:
            rows[kind].append((q.category, answer_scores(str(item[kind]), q.answer, q.category)))
        rows["gold"].append((q.category, answer_scores(q.answer, q.answer, q.category)))
    out: dict = {"n_questions": len(items), "kinds": {}}
    for kind, scored in rows.items():
        cats = order_categories({c for c, _ in scored})
        out["kinds"][kind] = {"overall": mean_scores(s for _, s in scored),
                              "by_category": {c: mean_scores(s for cc, s in scored if cc == c) for c in cats}}
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return out


if __name__ == "__main__":
    main()
