"""System-1 defaults chosen out of sample: 2-fold cross-validation over LoCoMo conversations.

The System-1 settings (RRF constant, BM25 weight, episode BM25 text recipe, BM25 analyzer, query
normalisation) were first chosen on all of LoCoMo, the test set. Here they are chosen on 5
conversations and scored on the other 5, both ways (fold A = conv 1-5, fold B = conv 6-10), with the
machinery of ``experiments/bench/system1_recall.py`` (:mod:`mnemis.testing.system1_runs`: same embedder, same
episode-route evidence recall over categories 1-4, the same System-1 code).

How: the cosine list (MiniLM, the turn embedded alone) and one BM25 list per (recipe, analyzer, query
normalisation) are each drawn once with System-1 (20 per list, as System-1 draws 2 x k for k = 10);
every grid point fuses them with :func:`mnemis.index.rrf.rrf` exactly as System-1 does and keeps the top
10. A fold picks the grid point with the best recall@10 on its 5 conversations (ties: best MRR, then
the earlier grid point); that pick is scored on the other 5. The defaults it sets: per setting, the
value both folds picked; where they disagree, the previous default when one fold picked it. Reported
beside it: the untuned plain RRF of the paper (``mode=paper``: sum of 1/rank, equal weights, the turn itself, no stemming or stop words,
the query as asked) and the previous default, on the same folds.

    nice -n 10 python experiments/bench/system1_cv.py [--out experiments/results/system1_cv.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnemis.testing.system1_runs import CachedQueries, run_config

REPO = Path(__file__).resolve().parents[2]

RRF_KS = (0, 10, 30, 60)
BM25_WEIGHTS = (0.5, 1.0, 2.0, 3.0)
ANALYZERS = {"plain": {"stem": False, "stopwords": False}, "stemmed": {"stem": True, "stopwords": True}}


def recipes():
    from mnemis.texts import EpisodeRecipe

    return {"turn": EpisodeRecipe(), "w1_date": EpisodeRecipe(window=1, date=True),
            "w2_date": EpisodeRecipe(window=2, date=True),
            "w2_date_self2": EpisodeRecipe(window=2, date=True, self_weight=2)}


def grid() -> list[dict[str, Any]]:
    """Every setting tried, in product order (recipe, analyzer, normalisation, RRF k, BM25 weight): the
    earlier point wins an exact tie."""
    out = []
    for rec, an, qn, k, w in itertools.product(recipes(), ANALYZERS, (False, True), RRF_KS, BM25_WEIGHTS):
        out.append({"recipe": rec, "analyzer": an, "query_normalize": qn, "rrf_k": k, "bm25_weight": w})
    return out


PAPER = {"recipe": "turn", "analyzer": "plain", "query_normalize": False, "rrf_k": 0, "bm25_weight": 1.0}
PREVIOUS_DEFAULT = {"recipe": "w2_date_self2", "analyzer": "stemmed", "query_normalize": True, "rrf_k": 10,
                    "bm25_weight": 2.0}


def fuse(cos: list[str], bm: list[str], rrf_k: float, bm25_weight: float, limit: int = 10) -> list[str]:
    from mnemis.index.rrf import rrf

    lists = {"cosine": (cos, [0.0] * len(cos)), "bm25": (bm, [0.0] * len(bm))}
    return rrf(lists, k_rrf=rrf_k, weights={"cosine": 1.0, "bm25": bm25_weight}, limit=limit).ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "experiments/results/system1_cv.json"))
    ap.add_argument("--cache", default=str(REPO / ".cache/system1_recall"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from mnemis.data.locomo import load_locomo
    from mnemis.eval.recall import evidence_recall
    from mnemis.ingest.embed_items import embed_missing
    from mnemis.models.embed import SentenceTransformerEmbedder
    from mnemis.store.sqlite import GraphStore
    from mnemis.texts import EMBED_RECIPE

    t0 = time.perf_counter()
    ds = load_locomo()
    questions = [q for q in ds.questions if q.category != "adversarial"]
    gold = [q.evidence for q in questions]
    folds = {"A": set(ds.groups[:5]), "B": set(ds.groups[5:])}
    rows = {f: [i for i, q in enumerate(questions) if q.group_id in g] for f, g in folds.items()}
    emb = CachedQueries(SentenceTransformerEmbedder("minilm", device="cpu"))
    store = GraphStore(Path(args.cache) / "minilm-w0-d0.sqlite")  # system1_recall.py's cache of the turn
    store.upsert_episodes(ds.episodes)
    embed_missing(store, emb, recipe=EMBED_RECIPE)
    turn = recipes()["turn"]
    cos, _ = run_config(store, emb, questions, recipe=turn, bm25=False, weights=None, query_normalize=False)
    bm: dict[tuple[str, str, bool], list[list[str]]] = {}
    for rec, an, qn in itertools.product(recipes(), ANALYZERS, (False, True)):
        bm[(rec, an, qn)], secs = run_config(store, emb, questions, recipe=recipes()[rec], vector=False,
                                             bm25_params=ANALYZERS[an], query_normalize=qn, weights=None)
        print(f"bm25 {rec}/{an}/qn={qn}: {secs:.1f}s", flush=True)

    def ranked(p: dict[str, Any]) -> list[list[str]]:
        lists = bm[(p["recipe"], p["analyzer"], p["query_normalize"])]
        return [fuse(c, b, p["rrf_k"], p["bm25_weight"]) for c, b in zip(cos, lists)]

    def score(r: list[list[str]], idx: list[int]) -> dict[str, float]:
        o = evidence_recall([r[i] for i in idx], [gold[i] for i in idx])["overall"]
        return {"recall@5": round(o["recall@5"], 4), "recall@10": round(o["recall@10"], 4),
                "mrr": round(o["mrr"], 4), "n": int(o["n"])}

    points = grid()
    table = []
    for p in points:
        r = ranked(p)
        table.append({**p, **{f: score(r, idx) for f, idx in rows.items()},
                      "all": score(r, list(range(len(questions))))})

    def pick(fold: str) -> dict[str, Any]:
        return max(table, key=lambda t: (t[fold]["recall@10"], t[fold]["mrr"], -table.index(t)))

    def key(t: dict[str, Any]) -> dict[str, Any]:
        return {k: t[k] for k in PAPER}

    def find(p: dict[str, Any]) -> dict[str, Any]:
        return next(t for t in table if key(t) == p)

    other = {"A": "B", "B": "A"}
    cv = {}
    oof_ranked: list[list[str] | None] = [None] * len(questions)
    for tune, test in other.items():
        best = pick(tune)
        cv[f"tune_{tune}_test_{test}"] = {"picked": key(best), "in_fold_recall@10": best[tune]["recall@10"],
                                          "out_of_fold": best[test]}
        r = ranked(key(best))
        for i in rows[test]:
            oof_ranked[i] = r[i]
    everything = list(range(len(questions)))
    pooled = score(oof_ranked, everything)  # type: ignore[arg-type]
    paper, prev = find(PAPER), find(PREVIOUS_DEFAULT)
    all_pick = max(table, key=lambda t: (t["all"]["recall@10"], t["all"]["mrr"], -table.index(t)))
    picks = [v["picked"] for v in cv.values()]
    # the defaults this run sets: per setting, the value both folds picked; where they disagree, the
    # previous default if a fold picked it, else fold A's pick
    chosen = {k: picks[0][k] if picks[0][k] == picks[1][k] else
              (PREVIOUS_DEFAULT[k] if PREVIOUS_DEFAULT[k] in (picks[0][k], picks[1][k]) else picks[0][k])
              for k in PAPER}
    chosen_row = find(chosen)
    report = {
        "benchmark": "LoCoMo episode-route evidence recall@10, categories 1-4, 2-fold CV over conversations",
        "embedder": emb.model_id, "questions": len(questions),
        "folds": {f: sorted(g) for f, g in folds.items()},
        "grid": {"rrf_k": list(RRF_KS), "bm25_weight": list(BM25_WEIGHTS), "recipe": {k: asdict(v) for k, v in
                 recipes().items()}, "analyzer": ANALYZERS, "query_normalize": [False, True], "points": len(points)},
        "cv": cv,
        "out_of_fold_recall@10": pooled,
        "plain_rrf_paper": {"setting": PAPER, "A": paper["A"], "B": paper["B"], "all": paper["all"]},
        "previous_default": {"setting": PREVIOUS_DEFAULT, "A": prev["A"], "B": prev["B"], "all": prev["all"],
                             "note": "chosen on all 10 conversations (in sample)"},
        "folds_agree": picks[0] == picks[1],
        "picked_on_all_10": {"setting": key(all_pick), "all": all_pick["all"]},
        "chosen_defaults": {"rule": "per setting: the value both folds picked; where they disagree, the previous "
                                    "default if a fold picked it", "setting": chosen, "A": chosen_row["A"],
                            "B": chosen_row["B"], "all": chosen_row["all"],
                            "changed": {k: [PREVIOUS_DEFAULT[k], v] for k, v in chosen.items()
                                        if v != PREVIOUS_DEFAULT[k]}},
        "table": table,
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform()},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for name, v in cv.items():
        print(name, v["picked"], "in", v["in_fold_recall@10"], "out", v["out_of_fold"]["recall@10"])
    print("chosen defaults", chosen, "all R@10", chosen_row["all"]["recall@10"])
    print("out-of-fold R@10", pooled["recall@10"], "| plain RRF", paper["all"]["recall@10"], "| previous default",
          prev["all"]["recall@10"], "| folds agree", report["folds_agree"])
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
