"""What the paper's ingest settings cost in LLM requests and prompt size, without a model.

Builds the base graph of a LoCoMo slice three times with the rule-based scripted LLM of the scale tests
(``mnemis.testing.responder``: capitalised words are entities, each links to the first; no model, so the
figures are request counts and prompt sizes, not quality) and the hashing embedder:

- ``ours``: the defaults (summaries once at the end, per-item candidate unions);
- ``shared_cap``: the earlier candidate rule (an episode's names / facts share 10 candidates);
- ``paper``: ``mode=paper``'s ingest keys (summaries after every episode, per-item unions).

Per mode it writes requests, generate() calls and prompt words (whitespace tokens) per stage::

    python experiments/bench/ingest_modes.py --group conv-26 --out experiments/results/ingest_modes.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

MODES = {
    "ours": {},
    "shared_cap": {"per_item_candidates": False},
    "paper": {"attribute_refresh": "episode", "per_item_candidates": True},
}


def run(episodes, knobs: dict) -> dict:
    from mnemis.ingest.pipeline import BaseGraphBuilder
    from mnemis.models.embed import HashingEmbedder
    from mnemis.testing.responder import scripted_llm
    from mnemis.store.sqlite import GraphStore

    llm = scripted_llm()
    with tempfile.TemporaryDirectory() as tmp, GraphStore(Path(tmp) / "m.db") as store:
        t0 = time.perf_counter()
        builder = BaseGraphBuilder(store, llm, HashingEmbedder(64), show_progress=False, **knobs)
        stats = builder.ingest(episodes)
        wall = time.perf_counter() - t0
        groups = sorted({e.group_id for e in episodes})
        counts = {k: sum(store.counts(g)[k] for g in groups) for k in ("entities", "facts", "mentions")}
    c = stats.counters
    stages = sorted(k.removeprefix("calls.") for k in c if k.startswith("calls."))
    backend = llm.backend
    return {
        "knobs": knobs,
        "wall_s": round(wall, 2),
        "graph": counts,
        "requests": {s: c[f"calls.{s}"] for s in stages},
        "generate_calls": {s: len(backend.batches_for(s)) for s in stages},
        "prompt_words": {s: c[f"tokens.prompt.{s}"] for s in stages},
        "prompt_words_per_request": {s: round(c[f"tokens.prompt.{s}"] / max(c[f"calls.{s}"], 1), 1)
                                     for s in stages},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", default="conv-26")
    ap.add_argument("--sessions", type=int, nargs="+", default=None, help="default: all of the conversation")
    ap.add_argument("--data", default=None, help="locomo10.json (default: the loader's default path)")
    ap.add_argument("--out", default="experiments/results/ingest_modes.json")
    args = ap.parse_args()

    from mnemis.data.locomo import load_locomo

    ds = load_locomo(args.data)
    eps = [e for e in ds.episodes_of(args.group) if args.sessions is None or e.session in args.sessions]
    eps.sort(key=lambda e: e.position)
    out = {"what": "rule-based scripted LLM (no model) + hashing embedder; prompt sizes in whitespace words",
           "slice": {"group": args.group, "sessions": args.sessions, "episodes": len(eps)},
           "modes": {name: run(eps, knobs) for name, knobs in MODES.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
