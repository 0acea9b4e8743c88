"""System-2's weight in reciprocal-rank fusion, swept on a benchmark's archive without a model: evidence recall.

``retrieval.fusion.system2_weight`` scales System-2's vote in ``rrf_routes`` (System-1's weighs 1). This bench reruns
retrieval alone (``mnemis retrieve``) for each weight over the run a tuned benchmark archived (its JSON names the
experiment and every override; its archive holds the base graph, the hierarchy and every selection reply, so
``cache_mode=replay_only`` and no model loads) and records each route's direct evidence recall (the share of a
question's gold turns among its context's episodes) and how many of the fused turns System-2 brought.

The choice, fixed before the sweep ran: the weight with the highest fused evidence recall on the dev slice; among
ties, the largest (the least departure from weighing the routes alike). Tune on dev only: conv-26 is the test.

    python experiments/bench/fusion_weight_sweep.py                      # tuned_dev.json's embed_rrf_sim, the dev slice
    python experiments/bench/fusion_weight_sweep.py --weights 0,0.5,1 --variant embed_rrf
    python experiments/bench/fusion_weight_sweep.py --from experiments/results/tuned_conv26.json \\
        --weights 0.925 --out /tmp/conv26_recall.json   # recall of the chosen weight on the test (after choosing)
    python experiments/bench/fusion_weight_sweep.py --weights 0.925 --out experiments/results/fusion_yes_dev.json \\
        -- reranker=qwen25_coder_1_5b_cpu retrieval.fusion.scorer=reranker retrieval.fusion.max_pairs=100
                                                    # a scorer on top: overrides after -- (this one loads the 1.5B)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import CONTEXTS_FILE, RECALL_FILE
from mnemis.testing import bench_replay

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "experiments" / "results"
WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
ROUTES = ("mnemis/system1", "mnemis/system2", "mnemis/fused")


def sweep_point(run_dir: Path) -> dict[str, Any]:
    """One weight's figures from its run dir: each route's direct recall (overall and by category) and the fused
    turns System-2 brought (a fused hit with an ``s2`` score)."""
    recall = json.loads((run_dir / RECALL_FILE).read_text())
    rows = [json.loads(line) for line in (run_dir / CONTEXTS_FILE).read_text().splitlines() if line.strip()]
    return {
        "direct_recall": {r: round(recall[r]["overall"]["direct"], 4) for r in ROUTES if r in recall},
        "fused_by_category": {c: round(v["direct"], 4) for c, v in recall["mnemis/fused"].items() if c != "overall"},
        "questions": recall["mnemis/fused"]["overall"]["n"],
        "fused_turns": sum(len(r["episodes"]) for r in rows),
        "fused_turns_from_system2": sum(1 for r in rows for h in r["episodes"] if "s2" in (h.get("scores") or {})),
    }


def choose(points: dict[float, dict[str, Any]]) -> float:
    """The weight with the highest fused recall; among ties the largest (the rule fixed before the sweep)."""
    return max(points, key=lambda w: (points[w]["direct_recall"]["mnemis/fused"], w))


def sweep(source: Path, variant: str, weights: Sequence[float], out: Path, work: Path,
          note: str | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
    from mnemis.models.cache_archive import import_archive

    saved = json.loads(source.read_text())
    if variant not in saved["variants"]:
        raise SystemExit(f"{source}: no variant {variant!r} (there: {sorted(saved['variants'])})")
    variant_overrides = saved["variants"][variant]["overrides"]
    archive = bench_replay.archive_path(source)
    if not archive.is_file():
        raise SystemExit(f"{source}: its archive {archive.name} is missing; the sweep replays from it")
    import_archive(archive, work / "cache")
    points: dict[float, dict[str, Any]] = {}
    walls: dict[str, float] = {}
    for w in weights:
        run_dir = work / "runs" / f"w{w:g}"
        t0 = time.perf_counter()
        bench_replay.run_mode("paper", saved["experiment"], run_dir,
                              [f"paths.cache_dir={work / 'cache'}", f"paths.artifacts_dir={work / 'artifacts'}",
                               "cache_mode=replay_only", *saved.get("overrides", []), *variant_overrides,
                               f"retrieval.fusion.system2_weight={w}", *extra], command="retrieve")
        walls[f"{w:g}"] = round(time.perf_counter() - t0, 1)
        points[w] = sweep_point(run_dir)
    chosen = choose(points)
    try:
        src = str(source.resolve().relative_to(REPO))
    except ValueError:
        src = str(source)
    return {
        "what": ("direct evidence recall of System-1, System-2 and the fused context for each System-2 weight in "
                 f"reciprocal-rank fusion (retrieval.fusion.system2_weight), variant {variant} of {src}, "
                 "retrieval replayed from its archive (mnemis retrieve, cache_mode=replay_only: no model)"),
        "command": "python experiments/bench/fusion_weight_sweep.py " + " ".join(
            [f"--from {src}", f"--variant {variant}", "--weights " + ",".join(f"{w:g}" for w in weights),
             *(["--", *extra] if extra else [])]),
        "source": src, "variant": variant, "experiment": saved["experiment"],
        "overrides": [*saved.get("overrides", []), *variant_overrides, *extra],
        "rule": "highest fused direct recall; among ties the largest weight (fixed before the sweep)",
        "weights": {f"{w:g}": p for w, p in points.items()},
        "chosen": chosen,
        "wall_s": walls, "host": bench_replay.host(),
        **({"note": note} if note else {}),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", type=Path, default=RESULTS / "tuned_dev.json",
                    help="a tuned_dev.py JSON whose archive sits beside it")
    ap.add_argument("--variant", default="embed_rrf_sim", help="the variant whose overrides the sweep keeps")
    ap.add_argument("--weights", default=",".join(f"{w:g}" for w in WEIGHTS), help="comma-separated, each >= 0")
    ap.add_argument("--out", type=Path, default=RESULTS / "fusion_weight_dev.json")
    ap.add_argument("--work", type=Path, help="where the replayed runs go (default a new temporary folder)")
    ap.add_argument("--note", help="a sentence kept in the JSON (e.g. how the grid was chosen)")
    ap.add_argument("extra", nargs="*", help="hydra overrides after --, added to every weight's run")
    args = ap.parse_args(argv)
    try:
        weights = [float(w) for w in args.weights.split(",") if w.strip()]
    except ValueError:
        ap.error(f"--weights {args.weights!r}: comma-separated numbers, e.g. 0,0.5,1")
    if not weights or any(not w >= 0 for w in weights):
        ap.error(f"--weights {args.weights!r}: at least one weight, each >= 0")
    work = args.work or Path(tempfile.mkdtemp(prefix="fusion_weight_sweep_"))
    result = sweep(args.source, args.variant, weights, args.out, work, args.note, args.extra)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for w, p in result["weights"].items():
        print(f"system2_weight {w}: fused {p['direct_recall']['mnemis/fused']} (System-1 "
              f"{p['direct_recall']['mnemis/system1']}), {p['fused_turns_from_system2']} of {p['fused_turns']} "
              "fused turns from System-2")
    print(f"chosen: {result['chosen']:g}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
