"""Window-sized pages of a System-2 candidate list (``retrieval.system2.page_by_window``).

A selection prompt lists every candidate of a round; a flat layer of a few hundred nodes is longer than a small
model's window (8,192 tokens for Qwen2.5-Coder-1.5B on CPU). The list is split into consecutive pages whose
estimated prompt plus reply budget fits the window; all pages of all questions go to the model in one batch and
their selections are merged by the caller. The estimate counts characters (:data:`PROMPT_CHARS_PER_TOKEN`, below
what JSON lines of names and tags take under a BPE vocabulary, about 3) and the reply's budget: the configured
``max_tokens``, or the schema's worst case per candidate when it is ``auto``. A page the engine still rejects as too
long is split again by the caller (:func:`is_window_error`), so an estimate that is off never ends a walk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mnemis.models.llm.limits import NO_ROOM

PROMPT_CHARS_PER_TOKEN = 2.5
TEMPLATE_TOKENS = 64  # chat-template markers around the messages
_WINDOW_ERRORS = ("maximum context length", "context_length_exceeded", "context length", "prompt is too long",
                  "input is too long", "too many tokens", NO_ROOM)  # (the last: refused by our limits, unsent)


def text_tokens(chars: int) -> int:
    """Estimated tokens of ``chars`` characters of prompt text."""
    return math.ceil(chars / PROMPT_CHARS_PER_TOKEN)


def messages_tokens(messages: Sequence[dict[str, str]]) -> int:
    """Estimated prompt tokens of chat ``messages``."""
    return text_tokens(sum(len(m.get("content", "")) for m in messages)) + TEMPLATE_TOKENS


def is_window_error(error: str | None) -> bool:
    """Whether a failed request's error says its prompt did not fit the model's window (vLLM, OpenAI-style)."""
    text = (error or "").lower()
    return any(p in text for p in _WINDOW_ERRORS)


def split_pages(items: Sequence[str], costs: Sequence[int], room: int) -> list[list[str]]:
    """``items`` in order, cut into consecutive pages whose ``costs`` sum to at most ``room`` (an item larger than
    ``room`` gets a page of its own); pages are then balanced so that none is much smaller than the others."""
    if len(items) != len(costs):
        raise ValueError(f"{len(items)} items but {len(costs)} costs")
    if not items:
        return []
    n_pages, used = 1, 0
    for c in costs:
        if used and used + c > room:
            n_pages, used = n_pages + 1, 0
        used += c
    if n_pages == 1:
        return [list(items)]
    return _balanced(list(items), list(costs), n_pages, room)


def _balanced(items: list[str], costs: list[int], n_pages: int, room: int) -> list[list[str]]:
    """Consecutive pages of about equal cost, each within ``room`` (more pages when balance would break it)."""
    total = sum(costs)
    while True:
        pages: list[list[str]] = [[]]
        used = done = 0  # cost of the open page; cost of everything before the current item
        for item, c in zip(items, costs):
            # a new page when this one is full, or when the item's middle lies past this page's share of the total
            past_share = done + c / 2 > total * len(pages) / n_pages and len(pages) < n_pages
            if pages[-1] and (used + c > room or past_share):
                pages.append([])
                used = 0
            pages[-1].append(item)
            used += c
            done += c
        if len(pages) <= n_pages or n_pages >= len(items):
            return pages
        n_pages += 1


def window_pages(items: Sequence[str], *, overhead: int, line_chars: Callable[[int], int], reply_fixed: int,
                 reply_per_item: int, window: int) -> list[list[str]]:
    """Pages of ``items`` for a window of ``window`` tokens: ``overhead`` tokens of prompt without candidates,
    ``line_chars(j)`` characters for candidate ``j``, a reply of ``reply_fixed + reply_per_item * len(page)``."""
    room = window - overhead - reply_fixed
    costs = [text_tokens(line_chars(j) + 1) + reply_per_item for j in range(len(items))]
    return split_pages(items, costs, max(room, 1))
