"""Reply budgets per stage: the worst-case completion of each reply schema (mnemis.models.llm.budget), the
configured max_tokens and the effective one under the default, quickstart and paper configs, and how close
the one-token-per-character bound comes to SmolLM2's tokenizer on adversarial worst-case replies.

    python experiments/bench/reply_budgets.py --out experiments/results/reply_budgets.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from mnemis.config import compose, to_plain
from mnemis.models.llm.base import Sampling
from mnemis.models.llm.budget import adversarial_worst_case, plan, worst_case_tokens
from mnemis.settings import load_settings
from mnemis.testing.budgets import stage_reply_schemas

CONFIGS = {"default": [], "quickstart": ["experiment=quickstart"], "paper": ["experiment=paper_locomo_k10"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-tokenizer", action="store_true", help="skip the SmolLM2 tokenizer check")
    args = ap.parse_args()
    out: dict = {"chars_per_token_bound": 1.0, "configs": {}}
    for name, overrides in CONFIGS.items():
        cfg = load_settings(to_plain(compose(overrides)))
        rows = {}
        for stage, (schema, configured) in stage_reply_schemas(cfg).items():
            sc = schema.model_json_schema()
            effective, decode, note = plan(sc, Sampling(max_tokens=configured).max_tokens, cfg.reply_budget)
            rows[stage] = {"configured": configured, "worst_case": worst_case_tokens(sc),
                           "effective": effective, "worst_case_decoded": worst_case_tokens(decode), "note": note}
        out["configs"][name] = {"reply_budget": cfg.reply_budget, "stages": rows}
    if not args.no_tokenizer:
        from mnemis.models.tiny import smollm2_tokenizer

        tok, rng = smollm2_tokenizer(), random.Random(0)
        measured = {}
        for stage, (schema, _) in stage_reply_schemas(load_settings(to_plain(compose([])))).items():
            sc = schema.model_json_schema()
            texts = [adversarial_worst_case(sc, rng) for _ in range(5)]
            n = [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]
            measured[stage] = {"bound": worst_case_tokens(sc), "max_tokens_measured": max(n),
                               "chars": len(texts[0]), "chars_per_token": round(len(texts[0]) / max(n), 3)}
        out["smollm2_adversarial_worst_case"] = measured
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
