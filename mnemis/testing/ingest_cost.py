"""Prompt-token cost of base-graph construction per episode and stage, from an LLM ledger."""

from __future__ import annotations

from typing import Any

STAGES = ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts", "resolve_entities",
          "dedup_facts", "entity_attributes")


def cost_report(ledger: Any, n_episodes: int) -> dict[str, Any]:
    """Per stage: calls, batches, prompt/completion tokens, prompt tokens per episode; and the total."""
    stages = {}
    for s in STAGES:
        st = ledger.stage(s)
        stages[s] = {"calls": st.calls, "batches": st.batches, "failures": st.failures, "retries": st.retries,
                     "prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens,
                     "prompt_tokens_per_episode": round(st.prompt_tokens / max(n_episodes, 1), 1)}
    total = sum(v["prompt_tokens"] for v in stages.values())
    return {"episodes": n_episodes, "stages": stages, "prompt_tokens_per_episode": round(total / max(n_episodes, 1), 1)}
