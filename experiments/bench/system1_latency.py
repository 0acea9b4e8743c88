"""System-1 latency on CPU (DESIGN §8): one LoCoMo conversation, 1M vectors in one group (vector search only),
batched grouped top-k.

(a) ``conversation``: the largest LoCoMo conversation (episodes) plus synthetic entities (~300: capitalised
    words of the conversation with a summary built from sentences that mention them) and facts (~1,500:
    sentences of the conversation), all embedded with MiniLM; ``System1.search`` with one query per call
    (batch size 1), timing includes query embedding (int8 query weights by default on CPU; the query
    encoder alone is also timed at the other precisions). Target p95 <= 15 ms.
(b) ``million``: VECTOR SEARCH ONLY, not System-1 (no BM25, no RRF, no query embedding): 1M synthetic
    vectors (d=128, Gaussian mixture around 2k centroids, L2-normalised) in one group; FAISS IVF (and HNSW
    with ``--hnsw``) vs exact: build time, p50/p95 per single query, recall@10 against exact search.
(c) ``batched``: 1,540 queries against 10 groups in one matrix (LoCoMo shape: 5,882 rows, d=384 and 128);
    grouped top-k with the torch reference, FAISS (one flat index per group) and the Triton kernel
    (CUDA only; on a CPU machine it is reported as "needs GPU").

Usage::

    HF_HUB_OFFLINE=1 python experiments/bench/system1_latency.py [--parts a,b,c] [--hnsw] [--threads N]
        [--query-precision auto|same|int8|bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "mean_ms": round(float(a.mean()), 3), "n": len(xs)}


def _synthetic_graph(episodes, group_id: str, n_entities: int = 300, n_facts: int = 1500):
    from mnemis.types import Entity, Fact

    counts: dict[str, int] = {}
    sentences: list[str] = []
    for e in episodes:
        text = e.content.split(": ", 1)[-1]
        for s in re.split(r"(?<=[.!?])\s+", text):
            if len(s.split()) >= 4:
                sentences.append(f"{e.speaker} said: {s}")
        for w in re.findall(r"\b[A-Z][a-z]{2,}\b", text):
            counts[w] = counts.get(w, 0) + 1
    names = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])][:n_entities]
    by_name = {n: [s for s in sentences if n in s][:2] for n in names}
    ents = [Entity(group_id=group_id, id=f"{group_id}:ent{i}", name=n, summary=" ".join(by_name[n])[:300])
            for i, n in enumerate(names)]
    facts = [Fact(group_id=group_id, id=f"{group_id}:fact{i}", source_id=ents[i % len(ents)].id,
                  target_id=ents[(7 * i + 1) % len(ents)].id, relation="MENTIONS", fact=s)
             for i, s in enumerate(sentences[:n_facts])]
    return ents, facts


def part_conversation(cache: Path, n_queries: int = 200, query_precision: str = "auto") -> dict:
    from mnemis.data.locomo import load_locomo
    from mnemis.ingest.embed_items import embed_missing
    from mnemis.models.embed import SentenceTransformerEmbedder
    from mnemis.retrieve.system1 import System1
    from mnemis.store.sqlite import GraphStore
    from mnemis.texts import EpisodeRecipe

    ds = load_locomo()
    gid = max(ds.groups, key=lambda g: len(ds.episodes_of(g)))
    eps = ds.episodes_of(gid)
    ents, facts = _synthetic_graph(eps, gid)
    store = GraphStore(cache / "latency_conversation.sqlite")
    store.upsert_episodes(eps)
    store.upsert_entities(ents)
    store.upsert_facts(facts)
    emb = SentenceTransformerEmbedder("minilm", device="cpu", query_precision=query_precision)
    t = time.perf_counter()
    embed_missing(store, emb, [gid], kinds=("episode", "entity_summary", "fact"), recipe=EpisodeRecipe())
    embed_s = time.perf_counter() - t
    s1 = System1(store, emb, k=10, routes="both", cache_dir=None)
    questions = [q for q in ds.questions_of(gid) if q.category != "adversarial"][:n_queries]
    t = time.perf_counter()
    s1.search(questions[:1])  # builds the indexes (BM25 + exact) once
    build_s = time.perf_counter() - t
    for q in questions[:10]:  # warm-up
        s1.search([q])
    lat, cpu = [], []
    for q in questions:
        t, c = time.perf_counter(), time.process_time()
        s1.search([q])
        lat.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    enc, enc_cpu = [], []
    for q in questions:
        t, c = time.perf_counter(), time.process_time()
        emb.encode([q.question], kind="query")
        enc.append(time.perf_counter() - t)
        enc_cpu.append(time.process_time() - c)
    t = time.perf_counter()
    s1.search(questions)
    batch_s = time.perf_counter() - t
    other_precisions = {}
    texts = [q.question for q in questions]
    for other in ("same", "int8", "bfloat16"):  # the query encoder alone at each precision
        alt = emb if other == emb.query_precision else SentenceTransformerEmbedder("minilm", device="cpu",
                                                                                    query_precision=other)
        for q in texts[:10]:
            alt.encode([q], kind="query")
        times = []
        for q in texts:
            t = time.perf_counter()
            alt.encode([q], kind="query")
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        alt.encode(texts, kind="query")
        other_precisions[other] = {**_pct(times), "all_at_once_ms_per_query": round(1000 * (time.perf_counter() - t) / len(texts), 3)}
    return {"group": gid, "episodes": len(eps), "entities": len(ents), "facts": len(facts),
            "query_precision": emb.query_precision, "query_embedding_by_precision": other_precisions,
            "embed_items_s": round(embed_s, 1), "index_build_s": round(build_s, 3),
            "per_query": _pct(lat), "query_embedding_only": _pct(enc),
            # CPU seconds of this process per query: robust to other processes competing for the cores
            "per_query_cpu_time": _pct(cpu), "query_embedding_only_cpu_time": _pct(enc_cpu),
            "batched_all_queries_ms_per_query": round(1000 * batch_s / len(questions), 3), "target_p95_ms": 15}


def _mixture(n: int, d: int, centroids: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cents = rng.standard_normal((centroids, d)).astype(np.float32)
    cents /= np.linalg.norm(cents, axis=1, keepdims=True)
    x = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 200_000):
        m = min(200_000, n - s)
        x[s : s + m] = cents[rng.integers(0, centroids, m)] + 0.35 * rng.standard_normal((m, d)).astype(np.float32) / np.sqrt(d) * 4
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, cents


def part_million(n: int = 1_000_000, d: int = 128, n_queries: int = 200, hnsw: bool = False) -> dict:
    import torch

    from mnemis.index.vector import ExactIndex, FaissIndex

    t = time.perf_counter()
    x, _ = _mixture(n, d, 2000, seed=0)
    q, _ = _mixture(n_queries, d, 2000, seed=0)  # same centroids (same seed), fresh noise below
    rng = np.random.default_rng(1)
    q = q + 0.1 * rng.standard_normal(q.shape).astype(np.float32) / np.sqrt(d)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    gen_s = time.perf_counter() - t
    ids = [str(i) for i in range(n)]
    out: dict = {"n": n, "d": d, "centroids": 2000, "queries": n_queries, "generate_s": round(gen_s, 1)}

    exact = ExactIndex(d)
    t = time.perf_counter()
    exact.add(ids, x)
    out["exact_build_s"] = round(time.perf_counter() - t, 2)
    truth = exact.search(q, 10)[1]
    lat = []
    for row in q[:20]:
        t = time.perf_counter()
        exact.search(row[None], 10)
        lat.append(time.perf_counter() - t)
    out["exact"] = {"per_query": _pct(lat), "torch_threads": torch.get_num_threads()}
    del exact

    def bench(index, name: str, **params) -> None:
        t = time.perf_counter()
        index.add(ids, x)
        build = time.perf_counter() - t
        for key, val in params.items():
            index.params[key] = val
        index.search(q[:5], 10)
        lat, cpu, found = [], [], []
        for row in q:
            t, c = time.perf_counter(), time.process_time()
            _, got = index.search(row[None], 10)
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            found.append(got[0])
        rec = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)]))
        out[name] = {"build_s": round(build, 1), "per_query": _pct(lat), "per_query_cpu_time": _pct(cpu),
                     "recall@10_vs_exact": round(rec, 4),
                     "params": dict(index.params)}
        print(name, out[name], flush=True)

    ivf = FaissIndex(d, kind="ivf", nlist=1024, nprobe=16, train_per_cell=64, use_gpu=False)
    bench(ivf, "faiss_ivf_nprobe16")
    for nprobe in (8, 32, 64, 128, 256):
        ivf.params["nprobe"] = nprobe
        lat, cpu, found = [], [], []
        for row in q:
            t, c = time.perf_counter(), time.process_time()
            found.append(ivf.search(row[None], 10)[1][0])
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rec = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)]))
        out[f"faiss_ivf_nprobe{nprobe}"] = {"per_query": _pct(lat), "per_query_cpu_time": _pct(cpu),
                                            "recall@10_vs_exact": round(rec, 4)}
        print(nprobe, out[f"faiss_ivf_nprobe{nprobe}"], flush=True)
    del ivf
    if hnsw:
        bench(FaissIndex(d, kind="hnsw", M=16, efConstruction=40, efSearch=64), "faiss_hnsw")
    out["target"] = {"p95_ms": 100, "recall@10": 0.95}
    return out


def _batched_case(d: int, repeats: int) -> dict:
    """One row of part (c): 1,540 queries x 10 groups at dimension ``d``."""
    import torch

    from mnemis.index.vector import FaissIndex
    from mnemis.ops import grouped_topk, grouped_topk_reference, triton_available

    sizes = [588] * 9 + [5882 - 588 * 9]
    g = torch.Generator().manual_seed(0)
    m = torch.nn.functional.normalize(torch.randn(5882, d, generator=g), dim=1)
    rg = torch.repeat_interleave(torch.arange(10), torch.tensor(sizes))
    q = torch.nn.functional.normalize(torch.randn(1540, d, generator=g), dim=1)
    qg = torch.randint(0, 10, (1540,), generator=g)

    def timed(fn) -> float:
        fn()
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    ref_s = timed(lambda: grouped_topk_reference(q, qg, m, rg, 10))
    qn, qgn = q.numpy(), qg.numpy()

    def faiss_per_group(use_gpu: bool):
        flats = []
        for gi in range(10):
            idx = FaissIndex(d, kind="flat", use_gpu=use_gpu)
            rows = (rg == gi).nonzero().flatten()
            idx.add([str(int(r)) for r in rows], m[rows].numpy())
            flats.append(idx)

        def search_all():
            for gi in range(10):
                flats[gi].search(qn[np.flatnonzero(qgn == gi)], 10)

        return search_all

    faiss_s = timed(faiss_per_group(use_gpu=False))
    row = {"torch_reference_ms": round(ref_s * 1000, 2), "faiss_flat_per_group_ms": round(faiss_s * 1000, 2),
           "faiss_over_torch": round(faiss_s / ref_s, 3)}
    import faiss

    if torch.cuda.is_available() and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        row["faiss_gpu_flat_per_group_ms"] = round(timed(faiss_per_group(use_gpu=True)) * 1000, 3)
    if torch.cuda.is_available() and triton_available(torch.device("cuda")):
        qc, qgc, mc, rgc = q.cuda(), qg.cuda(), m.cuda(), rg.cuda()

        def cuda_timed(fn) -> float:
            fn()
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - t) / 20

        k_s = cuda_timed(lambda: grouped_topk(qc, qgc, mc, rgc, 10, backend="triton", presorted=True))
        r_s = cuda_timed(lambda: grouped_topk_reference(qc, qgc, mc, rgc, 10))
        row.update({"triton_cuda_ms": round(k_s * 1000, 3), "torch_cuda_ms": round(r_s * 1000, 3),
                    "torch_cuda_over_triton": round(r_s / k_s, 2), "torch_cpu_over_triton": round(ref_s / k_s, 1),
                    "faiss_cpu_over_triton": round(faiss_s / k_s, 1)})
        if "faiss_gpu_flat_per_group_ms" in row:
            row["faiss_gpu_over_triton"] = round(row["faiss_gpu_flat_per_group_ms"] / 1000 / k_s, 2)
    else:
        row["triton"] = "needs GPU (CUDA); not measured on this machine"
    return row

def part_batched(repeats: int = 5) -> dict:
    out: dict = {}
    for d in (384, 128):
        row = _batched_case(d, repeats)
        out[f"d{d}"] = row
        print(d, row, flush=True)
    out["shape"] = {"queries": 1540, "rows": 5882, "groups": 10, "k": 10}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="a,b,c")
    ap.add_argument("--hnsw", action="store_true", help="also build HNSW over 1M vectors (slow on 2 cores)")
    ap.add_argument("--threads", type=int, default=0, help="torch/faiss threads (0 = library default)")
    ap.add_argument("--query-precision", default="auto", choices=["auto", "same", "int8", "bfloat16"],
                    help="weights that embed queries in (a); auto = int8 on CPU (conf/embedder/minilm.yaml)")
    ap.add_argument("--out", default=str(REPO / "experiments/results/system1_latency.json"))
    ap.add_argument("--cache", default=str(REPO / ".cache/system1_latency"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        import faiss

        faiss.omp_set_num_threads(args.threads)
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    result = json.loads(out_path.read_text()) if out_path.exists() else {}
    result["machine"] = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                         "platform": platform.platform(), "cuda": torch.cuda.is_available(),
                         "load_avg_at_start": os.getloadavg()}
    parts = set(args.parts.split(","))
    for key, fn in [("a", lambda: part_conversation(Path(args.cache), query_precision=args.query_precision)), ("b", lambda: part_million(hnsw=args.hnsw)),
                    ("c", part_batched)]:
        if key in parts:
            t = time.perf_counter()
            name = {"a": "conversation", "b": "million", "c": "batched"}[key]
            result[name] = fn()
            result[name]["wall_s"] = round(time.perf_counter() - t, 1)
            result[name]["torch_threads"] = torch.get_num_threads()
            result[name]["load_avg_after"] = [round(x, 1) for x in os.getloadavg()]
            print(name, json.dumps(result[name])[:600], flush=True)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(result, indent=1))
    print("wrote", out_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
