"""Reranker pairs and context tokens per query: mode=paper (System-2 output uncut) against our default.

Counted, never capped: the reranker is a counter (every (query, document) pair the fuser sends is one
pair; it scores 0, so the cut to k / 2k / 2k keeps union order), and the answer context is rendered
without a token budget. Token counts use the project's estimate (about 4 characters per token).

Builds, both made here with the scripted LLM (no model), so the graph is only shaped like a real one:

- ``quickstart``: the quickstart slice (LoCoMo conv-26, session 1: 18 turns, its 4 questions);
- ``locomo``: all 10 LoCoMo conversations (5,882 turns), categories 1-4 (1,540 questions).

Base graph: :mod:`mnemis.testing.responder` (capitalised words of a message are its entities, each linked
to the first by a fact). Hierarchy: a rule-based categoriser that groups each prompt's nodes in fours
while the prompt holds more than 12 nodes, and otherwise gives each node its own category (so the layer
does not shrink and construction stops there: top layers of 4-12 nodes). Embedder: 64-d hashing.

System-2 selection is scripted too, by two policies, because the pair count depends on what the LLM picks:

- ``shortcut_top``: one top-layer node with ``take_all_children`` (the one sharing most words with the
  query, else the first): the typical case the paper's selection cost points to (one prompt, ~2
  selections, whole subtrees);
- ``overlap_walk``: every candidate sharing a content word with the query, never a shortcut (a round
  without such a candidate ends the walk; at the top that is the System-1 fallback);
- ``shortcut_all``: every top-layer node with ``take_all_children``: the whole graph of the conversation
  goes to System-2's output (the upper bound).

Each (build, policy) runs twice: ``paper`` = the experiment with ``mode=paper``; ``default`` = the same
with ``mode=tuned`` (our caps, entity round, tuned System-1). Output: mean, p50, p95 and max per query.

    nice -n 10 python experiments/bench/paper_mode_pairs.py [--quick] [--out experiments/results/paper_mode_pairs.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
_NODE = re.compile(r"^(\d+)\. (.*?) \[(.*)\]$")
_LAYER = re.compile(r"^Layer (\d+):", re.MULTILINE)
_CATEGORY = re.compile(r'^Category: "(.*)" \(layer (\d+)')
GROUP, FLAT_AT = 4, 12
POLICIES = ("shortcut_top", "overlap_walk", "shortcut_all")

# build -> (experiment overlay, extra overrides); categories 1-4 as in the paper's headline
BUILDS = {
    "quickstart": ["experiment=quickstart"],
    "locomo": ["experiment=paper_locomo_k10", "dataset.slice.categories=[multi-hop,temporal,open-domain,single-hop]"],
}


def _user(req) -> str:
    return req.messages[-1]["content"]


def categorize_reply(req) -> dict[str, Any]:
    """Groups of ``GROUP`` nodes in prompt order (named after their first and last member), or one
    category per node when the prompt holds ``FLAT_AT`` nodes or fewer."""
    text = _user(req)
    body = text.split("Nodes:\n", 1)[1].split("\n\n", 1)[0]
    names = [m.group(2) for m in map(_NODE.match, body.splitlines()) if m]
    size = GROUP if len(names) > FLAT_AT else 1
    out = []
    for start in range(0, len(names), size):
        members = names[start:start + size]
        words = [w for n in (members[0], members[-1]) for w in re.findall(r"[A-Za-z0-9]+", n)[:2]]
        layer = int(_LAYER.search(text).group(1)) if _LAYER.search(text) else 1
        label = " ".join(dict.fromkeys(words)) or f"Group {start}"
        out.append({"category": f"{label} L{layer}", "indexes": list(range(start + 1, start + len(members) + 1))})
    return {"assignments": out}


def describe_reply(req) -> dict[str, Any]:
    name = _CATEGORY.match(_user(req)).group(1)
    return {"tags": [name.lower()[:30]], "summary": f"{name} groups related memories."}


def _candidates(req) -> list[dict[str, Any]]:
    body = _user(req).split("Available nodes:\n", 1)[1].split("\n\nQuery:", 1)[0]
    return [json.loads(line) for line in body.splitlines()]


def _query(req) -> str:
    return _user(req).split('Query: "', 1)[1].split('"\n', 1)[0]


def select_reply(policy: str) -> Callable[[Any], dict[str, Any]]:
    from mnemis.retrieve.expand import words

    def respond(req) -> dict[str, Any]:
        cands, qw = _candidates(req), words(_query(req))
        overlap = [len(qw & words(" ".join([c["name"], *c.get("tags", [])]))) for c in cands]
        if policy == "shortcut_all":
            return {"selections": [{"id": c["id"], "name": c["name"], "take_all_children": True} for c in cands]}
        if policy == "shortcut_top":
            best = int(np.argmax(overlap)) if cands else 0
            pick = [cands[best]] if cands else []
            return {"selections": [{"id": c["id"], "name": c["name"], "take_all_children": True} for c in pick]}
        pick = [c for c, o in zip(cands, overlap) if o > 0]
        return {"selections": [{"id": c["id"], "name": c["name"], "take_all_children": False} for c in pick]}

    return respond


def responder(policy: str) -> Callable[[Any], Any]:
    from mnemis.hierarchy.build import STAGE_CATEGORIZE, STAGE_DESCRIBE, STAGE_REASK
    from mnemis.prompts.select_nodes import SELECT_NODES
    from mnemis.testing.responder import base_graph_responder

    sel = select_reply(policy)

    def respond(req) -> Any:
        if req.stage in (STAGE_CATEGORIZE, STAGE_REASK):
            return categorize_reply(req)
        if req.stage == STAGE_DESCRIBE:
            return describe_reply(req)
        if req.stage == SELECT_NODES.stage:
            return sel(req)
        return base_graph_responder(req)

    return respond


class CountingReranker:
    """Counts the (query, document) pairs it is sent; scores 0 (the fuser then keeps union order)."""

    model_id = "counter"

    def __init__(self) -> None:
        self.pairs = 0

    def score(self, query, documents):
        self.pairs += len(documents)
        return np.zeros(len(documents), dtype=np.float32)


def union_sizes(store, questions, out, fusion: Any) -> tuple[list[int], list[int]]:
    """Per question: the items the fuser sends to the reranker (the union of the routes, uncut) and their
    reranker-text tokens. Computed with the same ``Fuser`` in ``rrf`` mode and an unbounded budget."""
    from mnemis.retrieve.context import approx_tokens, fetch_items, format_item
    from mnemis.retrieve.fuse import FIELDS, Fuser

    fz = Fuser(store, None, k=10**9, mode=fusion.mode, scorer="rrf")  # fusion: the retrieval settings' section
    unions = fz.fuse(questions, out.system1, out.system2)
    items = fetch_items(store, unions)
    pairs, tokens = [], []
    for ctx in unions:
        found = [items.get((ctx.group_id, h.id)) for f in FIELDS for h in getattr(ctx, f)]
        found = [x for x in found if x is not None]
        pairs.append(len(found))
        tokens.append(sum(approx_tokens(format_item(x)) for x in found))
    return pairs, tokens


def dist(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if not a.size:
        return {"n": 0}
    return {"n": int(a.size), "mean": round(float(a.mean()), 1), "p50": float(np.percentile(a, 50)),
            "p95": round(float(np.percentile(a, 95)), 1), "max": float(a.max())}


def build(overrides: list[str], workdir: Path) -> tuple[Any, list[Any], dict[str, Any]]:
    """Store + hierarchy for the dataset of ``overrides``, built with the scripted LLM; returns the store,
    the questions and build facts."""
    from mnemis.app.jobs import load_configured_dataset
    from mnemis.config import compose, to_plain
    from mnemis.hierarchy import organize
    from mnemis.settings import load_settings
    from mnemis.ingest.pipeline import BaseGraphBuilder
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend
    from mnemis.store.sqlite import GraphStore

    plain = to_plain(compose(overrides))
    data = load_configured_dataset(load_settings(plain))
    llm = LLM(ScriptedBackend(responder("shortcut_top"), model_id="scripted-bench"), max_retries=1)
    emb = HashingEmbedder(64)
    store = GraphStore(workdir / "memory.sqlite")
    t0 = time.perf_counter()
    store.upsert_episodes(data.episodes)
    BaseGraphBuilder(store, llm, emb, show_progress=False).ingest(data.episodes)
    hcfg = {k: v for k, v in plain["hierarchy"].items() if k != "_target_"}
    metrics = organize(store, llm, data.groups, hcfg)
    layers: dict[str, dict[int, int]] = {}
    for g in data.groups:
        for c in store.categories(g):
            layers.setdefault(g, {}).setdefault(c.layer, 0)
            layers[g][c.layer] += 1
    counts = {g: store.counts(g) for g in data.groups}
    facts = {"groups": len(data.groups), "questions": len(data.questions), "build_s": round(time.perf_counter() - t0, 1),
             "episodes": sum(c.get("episodes", 0) for c in counts.values()),
             "entities": sum(c.get("entities", 0) for c in counts.values()),
             "facts": sum(c.get("facts", 0) for c in counts.values()),
             "categories_per_layer": {g: dict(sorted(v.items())) for g, v in layers.items()},
             "hierarchy_ok": {g: bool(m) for g, m in metrics.items()}}
    return store, data.questions, facts


def measure(store, questions, overrides: list[str], policy: str) -> dict[str, Any]:
    """Retrieval under the composed ``overrides``: per-query pairs, reranker tokens and context tokens."""
    from mnemis.config import compose, to_plain
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend
    from mnemis.retrieve.pipeline import run_retrieval
    from mnemis.settings import load_settings

    plain = to_plain(compose(overrides))["retrieval"]  # the settings as composed, for the JSON
    retrieval = load_settings(to_plain(compose(overrides))).retrieval
    uncapped = retrieval.context.model_copy(update={"max_tokens": None})  # count, do not cap
    retrieval = retrieval.model_copy(update={"context": uncapped})
    llm = LLM(ScriptedBackend(responder(policy), model_id=f"scripted-{policy}"), max_retries=0)
    rr = CountingReranker()
    t0 = time.perf_counter()
    out = run_retrieval(store, questions, retrieval, embedder=HashingEmbedder(64), llm=llm, reranker=rr)
    secs = time.perf_counter() - t0
    pairs, doc_tok = union_sizes(store, questions, out, retrieval.fusion)
    if sum(pairs) != rr.pairs:
        raise RuntimeError(f"union sizes {sum(pairs)} != pairs the reranker was sent {rr.pairs}")
    s2 = out.system2 or []
    s2_sizes = {f: dist([r.traversal.counts.get(f, 0) for r in s2]) for f in ("entities", "facts", "episodes")}
    return {
        "pairs_per_query": dist(pairs),
        "reranker_doc_tokens_per_query": dist(doc_tok),
        "context_tokens_per_query": dist([r.tokens for r in out.rendered]),
        "system2_items_per_query": s2_sizes,
        "s2_fallbacks": sum(r.fallback for r in s2),
        "select_calls_per_query": round(sum(r.traversal.calls for r in s2) / max(len(s2), 1), 2),
        "wall_s": round(secs, 1),
        "settings": {k: plain["system2"].get(k) for k in (
            "entity_round", "max_candidates_per_prompt", "max_facts_per_entity", "max_episodes_per_entity",
            "max_neighbours_per_entity", "max_items_per_type")} | {
            k: plain["system1"].get(k) for k in ("rrf_k", "weights", "recipe", "query_normalize")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "experiments/results/paper_mode_pairs.json"))
    ap.add_argument("--quick", action="store_true", help="the quickstart build only")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {
        "what": __doc__.split("\n\n")[0],
        "llm": "scripted (mnemis.testing.responder + rule-based categoriser/selector); embedder: hashing-64",
        "token_estimate": "approx 4 characters per token (mnemis.retrieve.context.approx_tokens)",
        "machine": platform.platform(), "builds": {},
    }
    for name, overrides in BUILDS.items():
        if args.quick and name != "quickstart":
            continue
        with tempfile.TemporaryDirectory() as tmp:
            store, questions, facts = build(overrides, Path(tmp))
            runs: dict[str, Any] = {}
            for policy in POLICIES:
                runs[policy] = {mode: measure(store, questions, [*overrides, f"mode={m}"], policy)
                                for mode, m in (("paper", "paper"), ("default", "tuned"))}
                p, d = runs[policy]["paper"]["pairs_per_query"], runs[policy]["default"]["pairs_per_query"]
                if d.get("mean"):
                    runs[policy]["pairs_ratio_paper_to_default"] = round(p["mean"] / d["mean"], 2)
                print(f"{name}/{policy}: pairs mean paper {p.get('mean')} vs default {d.get('mean')}", flush=True)
            store.close()
        report["builds"][name] = {"overrides": overrides, "graph": facts, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
