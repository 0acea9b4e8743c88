"""LoCoMo episode-route evidence recall of System-1 on the CPU defaults (MiniLM + BM25), with baselines.

Questions: LoCoMo categories 1-4 (1,540; the 4 without evidence are skipped by the metric). Each
configuration ranks the episodes of the question's own conversation; nothing reads gold evidence at
search time. Ranked lists are produced with budget 20 and 20 candidates per list, so their top 10 is
exactly the default System-1 result (k=10, pool_factor=2) and recall@20 comes from the same run.

Embeddings are cached per episode-text recipe in ``.cache/system1_recall/`` (gitignored); the first
run embeds 5,882 turns per recipe (a few minutes on 2 cores).

Usage::

    HF_HUB_OFFLINE=1 python experiments/bench/system1_recall.py [--quick] [--out experiments/results/system1_recall.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

from mnemis.testing.system1_runs import CachedQueries, run_config

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "experiments/results/system1_recall.json"))
    ap.add_argument("--cache", default=str(REPO / ".cache/system1_recall"))
    ap.add_argument("--quick", action="store_true", help="baselines and the default only (no sweep)")
    ap.add_argument("--query-precision", default="auto", choices=["auto", "same", "int8", "bfloat16"],
                    help="weights that embed the questions (documents are always fp32); auto = int8 on CPU")
    ap.add_argument("--embed-context", action="store_true",
                    help="also embed turns with one neighbour on each side (a second 5,882-text embedding pass)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from mnemis.data.locomo import load_locomo
    from mnemis.eval.recall import evidence_recall
    from mnemis.ingest.embed_items import embed_missing
    from mnemis.models.embed import SentenceTransformerEmbedder
    from mnemis.store.sqlite import GraphStore
    from mnemis.texts import BM25_RECIPE, EMBED_RECIPE, EpisodeRecipe

    ds = load_locomo()
    questions = [q for q in ds.questions if q.category != "adversarial"]
    gold = [q.evidence for q in questions]
    cats = [q.category for q in questions]
    emb = CachedQueries(SentenceTransformerEmbedder("minilm", device="cpu", query_precision=args.query_precision))
    query_precision = emb.inner.query_precision
    stores: dict[str, GraphStore] = {}

    def store_for(recipe: EpisodeRecipe) -> GraphStore:
        key = f"minilm-w{recipe.window}-d{int(recipe.date)}" + (f"-s{recipe.self_weight}" if recipe.self_weight > 1 else "")
        if key not in stores:
            st = GraphStore(Path(args.cache) / f"{key}.sqlite")
            st.upsert_episodes(ds.episodes)
            t = time.perf_counter()
            n = embed_missing(st, emb, recipe=recipe)["episode"]
            if n:
                print(f"embedded {n} episodes for {key} in {time.perf_counter() - t:.0f}s", flush=True)
            stores[key] = st
        return stores[key]

    results: dict[str, dict] = {}
    halves = {"first5": set(ds.groups[:5]), "last5": set(ds.groups[5:])}

    def evaluate(name: str, embed: EpisodeRecipe = EMBED_RECIPE, bm25_recipe: EpisodeRecipe = BM25_RECIPE,
                 embedder=None, **kw) -> dict:
        ranked, secs = run_config(store_for(embed), embedder or emb, questions, recipe=bm25_recipe, **kw)
        m = evidence_recall(ranked, gold, cats)
        split = {}
        for half, groups in halves.items():
            sel = [i for i, q in enumerate(questions) if q.group_id in groups]
            split[half] = evidence_recall([ranked[i] for i in sel], [gold[i] for i in sel])["overall"]
        precision = (embedder or emb).inner.query_precision
        results[name] = {"config": {"embed_recipe": asdict(embed), "bm25_recipe": asdict(bm25_recipe),
                                    "query_precision": precision, **kw},
                         "metrics": m, "by_half": split, "search_s": round(secs, 2)}
        o = m["overall"]
        print(f"{name:28s} R@5 {o['recall@5']:.3f} R@10 {o['recall@10']:.3f} R@20 {o['recall@20']:.3f} "
              f"MRR {o['mrr']:.3f}  halves R@10 {split['first5']['recall@10']:.3f}/{split['last5']['recall@10']:.3f}"
              f"  ({secs:.1f}s)", flush=True)
        return m

    turn = EpisodeRecipe()  # the turn alone
    plain = {"query_normalize": False, "weights": None}
    evaluate("bm25", bm25_recipe=turn, vector=False, bm25_params={"stem": False}, **plain)
    evaluate("bm25_stemmed", bm25_recipe=turn, vector=False, **plain)
    evaluate("minilm", bm25_recipe=turn, bm25=False, **plain)
    evaluate("rrf_plain_k60", bm25_recipe=turn, rrf_k=60, **plain)
    evaluate("rrf_plain_k0", bm25_recipe=turn, rrf_k=0, **plain)
    default = evaluate("default")  # System1 defaults (BM25_RECIPE text, DEFAULT_WEIGHTS, DEFAULT_RRF_K)

    for other in ("same", "int8", "bfloat16"):  # what the query weights cost (documents stay fp32)
        if other != query_precision:
            alt = CachedQueries(SentenceTransformerEmbedder("minilm", device="cpu", query_precision=other))
            evaluate(f"minilm_query_{other}", bm25_recipe=turn, bm25=False, embedder=alt, **plain)
            evaluate(f"default_query_{other}", embedder=alt)

    rrf_k_sweep = {}
    if not args.quick:
        evaluate("default_bm25_only", vector=False)
        evaluate("default_unweighted", weights=None)
        evaluate("default_no_query_normalize", query_normalize=False)
        for label, r in [("turn", turn), ("w1", EpisodeRecipe(window=1)), ("w1_date", EpisodeRecipe(window=1, date=True)),
                         ("w2_date", EpisodeRecipe(window=2, date=True)), ("w2_date_self2", BM25_RECIPE),
                         ("w2_self2", EpisodeRecipe(window=2, self_weight=2)),
                         ("w3_date_self2", EpisodeRecipe(window=3, date=True, self_weight=2))]:
            evaluate(f"bm25_text_{label}", bm25_recipe=r)
        for b in (0.2, 0.75, 0.9):
            evaluate(f"bm25_b{b}", bm25_params={"b": b})
        for k in (0, 10, 30, 60, 100):
            rrf_k_sweep[str(k)] = evaluate(f"rrf_k{k}", rrf_k=k)["overall"]["recall@10"]
        if args.embed_context:
            evaluate("embed_w1", embed=EpisodeRecipe(window=1))

    out = {
        "benchmark": "LoCoMo episode-route evidence recall, categories 1-4 (recall@k = share of gold evidence turns in the top k)",
        "questions": len(questions),
        "embedder": emb.model_id,
        "query_precision": query_precision,
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform()},
        "default": default,
        "baselines": {k: results[k]["metrics"] for k in ("bm25", "bm25_stemmed", "minilm", "rrf_plain_k60", "rrf_plain_k0")},
        "rrf_k_sweep_recall@10": rrf_k_sweep,
        "runs": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
