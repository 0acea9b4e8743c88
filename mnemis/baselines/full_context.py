"""Full-context baseline: the whole history of a group in the prompt, truncated to the model window.

Episodes are rendered chronologically (``mnemis.render``); when the history exceeds the token
budget (model window minus a reserve for instructions, question and answer) the OLDEST episodes are
dropped, a warning is logged and the affected questions are counted. Tokens are counted with the
LLM's tokenizer when one can be found, else estimated at ~4 characters per token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemis.method import Method, MethodContexts, json_file
from mnemis.models.token_counts import TokenCounter, estimate_tokens, recorded_counter, token_counter
from mnemis.render import format_episode, sort_episodes
from mnemis.types import Episode, Question

log = logging.getLogger(__name__)


@dataclass
class FullContext:
    """Contexts (one per question, in order) and truncation bookkeeping."""

    contexts: list[str]
    truncated: list[bool]
    kept_episodes: dict[str, int] = field(default_factory=dict)
    total_episodes: dict[str, int] = field(default_factory=dict)
    context_tokens: dict[str, int] = field(default_factory=dict)
    budget: int = 0

    @property
    def n_truncated(self) -> int:
        return sum(self.truncated)

    def summary(self) -> dict[str, Any]:
        return {"budget_tokens": self.budget, "questions": len(self.contexts),
                "truncated_questions": self.n_truncated,
                "truncated_groups": sorted(g for g in self.total_episodes
                                           if self.kept_episodes[g] < self.total_episodes[g]),
                "context_tokens": dict(self.context_tokens)}


def render_history(episodes: Sequence[Episode], budget: int, count: TokenCounter = estimate_tokens
                   ) -> tuple[str, int, int]:
    """The newest episodes that fit ``budget`` tokens, chronological. Returns (text, kept, tokens)."""
    lines = [format_episode(e) for e in sort_episodes(episodes)]
    if not lines:
        return "", 0, 0
    sizes = count(lines)
    used, start = 0, len(lines)
    for i in range(len(lines) - 1, -1, -1):
        cost = sizes[i] + (1 if i < len(lines) - 1 else 0)  # + the newline
        if used + cost > budget:
            break
        used += cost
        start = i
    return "\n".join(lines[start:]), len(lines) - start, used


def full_context(
    episodes: Sequence[Episode],
    questions: Sequence[Question],
    *,
    max_model_len: int = 8192,
    reserve: int = 1024,
    llm: Any = None,
    tokenizer: Any = None,
    count_tokens: TokenCounter | None = None,
) -> FullContext:
    """One context per question: its group's whole history, truncated from the oldest end.

    Args:
        episodes: episodes of (at least) every group asked about.
        max_model_len: the answer model's context window in tokens.
        reserve: tokens kept free for instructions, the question and the answer.
        llm / tokenizer / count_tokens: token counting (see :func:`token_counter`).
    """
    budget = max_model_len - reserve
    if budget <= 0:
        raise ValueError(f"max_model_len ({max_model_len}) must exceed reserve ({reserve})")
    count = count_tokens or token_counter(llm, tokenizer)
    by_group: dict[str, list[Episode]] = {}
    for e in episodes:
        by_group.setdefault(e.group_id, []).append(e)
    result = FullContext(contexts=[], truncated=[], budget=budget)
    rendered: dict[str, str] = {}
    for gid in dict.fromkeys(q.group_id for q in questions):
        eps = by_group.get(gid, [])
        text, kept, used = render_history(eps, budget, count)
        rendered[gid] = text
        result.kept_episodes[gid], result.total_episodes[gid], result.context_tokens[gid] = kept, len(eps), used
    for q in questions:
        rendered_text = rendered[q.group_id]
        result.contexts.append(rendered_text)
        result.truncated.append(result.kept_episodes[q.group_id] < result.total_episodes[q.group_id])
    if result.n_truncated:
        groups = result.summary()["truncated_groups"]
        log.warning("full context: history truncated to %d tokens (oldest episodes dropped) for %d questions "
                    "in %d groups", budget, result.n_truncated, len(groups))
    return result


class FullContextMethod(Method):
    """``full_context`` (``conf/method/full_context.yaml``): :func:`full_context` in the answer model's window
    (``answer_llm``, else ``llm``: its ``backend.max_model_len``, 8,192 when unset), counted with its tokenizer
    (and recorded beside the response cache, so a replay needs none);
    the truncation counts go to ``full_context.json``."""

    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        run = self.run
        answer_node = run.settings.answer_llm or run.settings.llm
        max_len = int(answer_node.get("backend", {}).get("max_model_len") or 8192)

        # counts recorded beside the response cache: a replay needs no tokenizer
        fc = full_context(run.data.episodes, questions, max_model_len=max_len, llm=run.models.answer_llm,
                          count_tokens=recorded_counter(run.models.answer_llm))
        return MethodContexts(fc.contexts, files={f"{self.name}.json": json_file(fc.summary())})
