"""The GPU memory plan of every shipped GPU experiment on every known card (no GPU needed).

For each experiment (and the variants the docs recommend), on H100 80GB, H200, A100 80GB and L40S (as many
cards as its largest ``tensor_parallel_size``), :func:`mnemis.gpu_plan.plan_config` walks the run's engines as
vLLM 0.32's start-up check judges them. Writes ``experiments/results/gpu_plans.json`` and the table of
``docs/gpu_plans.md`` (between its ``<!-- plans -->`` markers)::

    python experiments/bench/gpu_plans.py
    python experiments/bench/gpu_plans.py --check     # exit 1 when the JSON or the docs table is stale

The figures are a plan from the models' architectures and vLLM's rule, not a measurement: what needs a GPU
(the engines' real activation and CUDA-graph memory) is measured by ``experiments/bench/gpu_smoke.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "experiments" / "results" / "gpu_plans.json"
DOC = REPO / "docs" / "gpu_plans.md"
BEGIN, END = "<!-- plans -->", "<!-- /plans -->"

SHIPPED = ("paper_locomo_k10", "paper_locomo_k30", "paper_locomo_baselines", "paper_locomo_mem0", "paper_lme_s")
# (experiment, extra overrides, why it is listed): the variants the docs and READMEs point to
VARIANTS = (
    ("paper_locomo_k10", ("reranker=qwen3_8b_vllm",), "the paper's reranker on vLLM's pooling runner"),
    ("paper_locomo_k10", ("reranker=qwen3_0_6b_vllm",), "the small reranker on vLLM's pooling runner"),
    ("paper_locomo_k10", ("llm=qwen3_32b_vllm",), "Qwen3-32B, tensor parallel over 2 GPUs"),
    ("paper_lme_s", ("llm=qwen3_32b_vllm_tp4",), "Qwen3-32B, tensor parallel over 4 GPUs"),
    ("paper_locomo_k10", ("+llm@selector_llm=qwen3_32b_vllm",), "a 32B selector beside the 8B builder"),
    ("paper_locomo_k10", ("+llm@selector_llm=qwen3_32b_vllm", "llm.backend.gpu_memory_utilization=0.3",
                          "selector_llm.backend.gpu_memory_utilization=0.45"),
     "the same, with utilizations that sum"),
)


def cases() -> list[tuple[str, tuple[str, ...], str]]:
    return [(e, (), "shipped") for e in SHIPPED] + list(VARIANTS)


def plans() -> list[dict]:
    from mnemis.config import compose_for_checks
    from mnemis.gpu_plan import CARDS, engines_of, plan_config
    from mnemis.model_roles import ModelRoles
    from mnemis.settings import load_settings

    rows = []
    for experiment, extra, why in cases():
        plain, _ = compose_for_checks([f"experiment={experiment}", *extra])
        roles = ModelRoles.of(load_settings(plain))
        count = max([e.tp for e in engines_of(roles) if e.runtime == "vllm"] or [1])
        for card in CARDS.values():
            p = plan_config(roles, card, count)
            rows.append({"experiment": experiment, "overrides": list(extra), "why": why, **p.to_dict(),
                         "summary": p.summary()})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| Experiment | Card | Engines (GiB on GPU 0) | Peak GPU 0 | Fits |", "|---|---|---|---|---|"]
    for r in rows:
        name = r["experiment"] + "".join(f" `{o}`" for o in r["overrides"])
        engines = "; ".join(
            f"{'+'.join(e['roles'])} {e['model'].split('/')[-1]} {e['runtime']}"
            + (f" @{e['gpu_memory_utilization']}" if e["gpu_memory_utilization"] is not None else "")
            + (f" TP{e['tensor_parallel_size']}" if e["tensor_parallel_size"] > 1 else "")
            + f": {e['gib_per_gpu']:.1f}" + (f" + {e['batch_activation_gib']:.1f} per batch"
                                              if "batch_activation_gib" in e else "")
            for e in r["engines"])
        verdict = "yes" if r["fits"] else "**no**: " + "; ".join(r["problems"]).replace("|", "/")
        lines.append(f"| {name} | {r['gpus']} x {r['card']} ({r['total_gib']:.1f} GiB) | {engines} | "
                     f"{r['peak_gib_gpu0']:.1f} | {verdict} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the JSON or the docs table is stale")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = plans()
    from mnemis.gpu_plan import CARDS, CUDA_CONTEXT_GIB, CUDA_GRAPH_GIB, NON_TORCH_GIB

    doc = {"what": "GPU memory plans (mnemis.gpu_plan): every engine of each experiment walked through the run "
                   "as vLLM 0.32's start-up check judges it; a plan from architectures and vLLM's rule, not a "
                   "measurement",
           "command": "python experiments/bench/gpu_plans.py",
           "cards": {k: {"name": c.name, "total_gib": round(c.total / 1024**3, 2), "source": c.source}
                     for k, c in CARDS.items()},
           "allowances_gib": {"cuda_context_per_process": CUDA_CONTEXT_GIB, "non_torch_per_engine_rank": NON_TORCH_GIB,
                              "cuda_graphs_per_engine_rank": CUDA_GRAPH_GIB},
           "plans": rows}
    text = json.dumps(doc, indent=2) + "\n"
    page = DOC.read_text(encoding="utf-8")
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new_page = f"{head}{BEGIN}\n{table(rows)}\n{END}{tail}"
    if args.check:
        stale = [str(p) for p, t in ((OUT, text), (DOC, new_page)) if not p.is_file() or p.read_text() != t]
        if stale:
            print("stale (run python experiments/bench/gpu_plans.py): " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    DOC.write_text(new_page)
    shipped = [r for r in rows if r["why"] == "shipped" and r["card"] == "h200"]
    print(f"{OUT}: {len(rows)} plans; shipped experiments fitting one H200: "
          f"{sum(r['fits'] for r in shipped)}/{len(shipped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
