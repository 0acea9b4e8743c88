"""System-1 at 1M facts, the whole call: ``System1.search`` on one group of 1,000,000 facts (and 2,000
entities), one query per call: query embedding, BM25 over the fact texts, vector search, RRF fusion and the
hits, as the retrieval pipeline calls it.

The facts are synthetic sentences (a person, a verb, an object, a place and a month from fixed word lists;
many share words, as real facts do) stored in a real ``GraphStore``. Items and queries are embedded with the
feature-hashing embedder (d=128, the paper's Matryoshka width), so the query encoder's time here is the
hashing one; ``query_encoder`` times the CPU default encoder (MiniLM, int8 query weights as System-1 uses
on CPU) on the same questions, to be added for a neural encoder. Vector search: FAISS IVF
(``--nprobe``) against exact search; recall@10 compares the fused fact top-10 of the IVF call with the
exact call's. Target: p95 <= 100 ms per query, recall@10 >= 0.95.

    HF_HUB_OFFLINE=1 python experiments/bench/system1_million.py [--facts 1000000] [--nprobe 32]

Writes ``experiments/results/system1_million.json``. Needs a quiet machine (2 cores: about 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "experiments" / "results" / "system1_million.json"
PEOPLE = ["Caroline", "Melanie", "Jon", "Gina", "Maria", "John", "Nate", "Joanna", "Tim", "Audrey", "Andrew",
          "Deborah", "Evan", "Sam", "Calvin", "Dave", "Jolene", "James", "Priya", "Leo"]
VERBS = ["adopted", "painted", "visited", "bought", "lost", "repaired", "sold", "found", "borrowed", "planted",
         "cooked", "photographed", "wrote about", "talked about", "gave away", "collected", "trained", "built"]
OBJECTS = ["a puppy", "a sunrise", "the pottery bowl", "a bicycle", "a guitar", "a garden", "a novel", "a kayak",
           "a tent", "the old car", "a violin", "a mural", "a cake", "a telescope", "a quilt", "a drone", "a vase",
           "a tomato plant", "a camera", "a chess set"]
PLACES = ["Boston", "Lisbon", "Denver", "Oslo", "the beach", "the support group", "the park", "the museum",
          "the lake", "the city library", "the school", "the farm", "the studio", "Sweden", "the mountains"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
GROUP = "million"


def _pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2),
            "mean_ms": round(float(a.mean()), 2), "n": len(xs)}


def _sentence(rng: random.Random) -> tuple[int, str]:
    who = rng.randrange(len(PEOPLE))
    return who, (f"{PEOPLE[who]} {rng.choice(VERBS)} {rng.choice(OBJECTS)} at {rng.choice(PLACES)} in "
                 f"{rng.choice(MONTHS)} {rng.randrange(2019, 2025)} (#{rng.randrange(100000)})")


def build_store(path: Path, n_facts: int, n_entities: int, embedder, seed: int = 0) -> dict:
    from mnemis.store import GraphStore
    from mnemis.types import Entity, Fact

    rng = random.Random(seed)
    t0 = time.perf_counter()
    with GraphStore(path) as store:
        ents = [Entity(group_id=GROUP, id=f"e{i}", name=f"{PEOPLE[i % len(PEOPLE)]} {i}",
                       summary=f"{PEOPLE[i % len(PEOPLE)]} likes {rng.choice(OBJECTS)} and {rng.choice(PLACES)}.")
                for i in range(n_entities)]
        store.upsert_entities(ents)
        store.put_embeddings(GROUP, "entity_name", [e.id for e in ents], embedder.encode([e.name for e in ents]))
        store.put_embeddings(GROUP, "entity_summary", [e.id for e in ents],
                             embedder.encode([e.summary for e in ents]))
        step = 100_000
        for s in range(0, n_facts, step):
            rows = [_sentence(rng) for _ in range(min(step, n_facts - s))]
            facts = [Fact(group_id=GROUP, id=f"f{s + j}", source_id=f"e{who}", target_id=f"e{(who * 7 + j) % n_entities}",
                          relation="MENTIONS", fact=text) for j, (who, text) in enumerate(rows)]
            store.upsert_facts(facts)
            store.put_embeddings(GROUP, "fact", [f.id for f in facts], embedder.encode([f.fact for f in facts]))
            print(f"stored {s + len(rows):,} facts ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"store_s": round(time.perf_counter() - t0, 1)}


def questions(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    forms = ["When did {p} visit {pl}?", "What did {p} buy in {m}?", "Who {v} {o}?", "Where did {p} find {o}?",
             "What did {p} do at {pl} in {m}?"]
    return [rng.choice(forms).format(p=rng.choice(PEOPLE), pl=rng.choice(PLACES), m=rng.choice(MONTHS),
                                     v=rng.choice(VERBS), o=rng.choice(OBJECTS)) for _ in range(n)]


def time_calls(system1, qs: list[str]) -> tuple[list[float], list[list[str]]]:
    lat, tops = [], []
    for q in qs:
        t = time.perf_counter()
        ctx = system1.search([(GROUP, q)])[0]
        lat.append(time.perf_counter() - t)
        tops.append([h.id for h in ctx.facts[:10]])
    return lat, tops


def query_encoder(qs: list[str]) -> dict:
    """The CPU default query encoder on the same questions (one per call), to add for a neural encoder."""
    try:
        from mnemis.models.embed import SentenceTransformerEmbedder
    except ImportError as exc:  # pragma: no cover
        return {"skipped": str(exc)}
    enc = SentenceTransformerEmbedder("minilm", device="cpu")
    enc.encode(qs[:3], kind="query")
    lat = []
    for q in qs:
        t = time.perf_counter()
        enc.encode([q], kind="query")
        lat.append(time.perf_counter() - t)
    return {"model": "all-MiniLM-L6-v2 (CPU default)", "per_query": _pct(lat)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=1_000_000)
    ap.add_argument("--entities", type=int, default=2_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--work", type=Path, default=None, help="store folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    import torch

    from mnemis.models.embed import HashingEmbedder
    from mnemis.retrieve.system1 import System1
    from mnemis.store import GraphStore

    work = args.work or Path(tempfile.mkdtemp(prefix="s1m-"))
    work.mkdir(parents=True, exist_ok=True)
    emb = HashingEmbedder(128)
    path = work / "million.sqlite"
    out: dict = {"what": "System1.search whole call (query embedding + BM25 + vector search + RRF), one query per "
                         "call, one group of synthetic facts; hashing embedder d=128 for items and queries",
                 "command": "python experiments/bench/system1_million.py " + " ".join(argv or []),
                 "facts": args.facts, "entities": args.entities, "queries": args.queries,
                 "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                             "platform": platform.platform(), "load_avg_at_start": list(os.getloadavg())}}
    if not path.exists():
        out["build"] = build_store(path, args.facts, args.entities, emb)
    qs = questions(args.queries)
    with GraphStore(path, read_only=True) as store:
        runs = {"exact": ("exact", {}),
                "faiss_ivf": ("faiss_ivf", {"nlist": args.nlist, "nprobe": args.nprobe, "use_gpu": False})}
        tops = {}
        for name, (index, params) in runs.items():
            s1 = System1(store, emb, k=10, routes="graph", index=index, index_params=params, cache_dir=None)
            t = time.perf_counter()
            s1.search([(GROUP, qs[0])])  # first call builds the indexes (BM25, vectors) of the group
            first = time.perf_counter() - t
            lat, tops[name] = time_calls(s1, qs)
            out[name] = {"index_params": params, "first_call_builds_indexes_s": round(first, 1),
                         "per_query": _pct(lat)}
            print(name, out[name], flush=True)
            del s1
    rec = [len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(tops["faiss_ivf"], tops["exact"])]
    out["faiss_ivf"]["fused_fact_recall@10_vs_exact"] = round(float(np.mean(rec)), 4)
    out["query_encoder"] = query_encoder(qs[:50])
    out["target"] = {"p95_ms": 100, "recall@10": 0.95}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
