"""Rendering a fused :class:`~mnemis.types.RetrievedContext` as the answer prompt's memory text.

Layout (our layout of the paper's context)::

    ## Categories and entities
    - Health [health, body]: Caroline's health topics ...
    ## Facts
    - Caroline has gastritis (2023-06-17 – now)
    ## Conversation messages
    [2023/05/08 (Mon) 13:56] Caroline: I was diagnosed with gastritis last week.

Episodes are sorted by time and rendered by :func:`mnemis.render.format_episode` (the one
episode formatter). A token budget (≈4 characters per token, or a ``tokenizer`` callable returning
a token count) is filled by rank, interleaving the three lists (episode 1, fact 1, entity 1,
episode 2, ...); an item that does not fit is skipped whole, never cut. The result carries the ids
actually included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from mnemis.render import format_episode, format_timestamp, sort_episodes
from mnemis.store.sqlite import GraphStore
from mnemis.types import Category, Entity, Episode, Fact, RetrievedContext

Item = Episode | Entity | Category | Fact
HEADERS = {
    "entities": "## Categories and entities", "facts": "## Facts", "episodes": "## Conversation messages",
}
FIELDS = ("episodes", "facts", "entities")  # interleaving order when filling the budget
LAYOUT = ("entities", "facts", "episodes")  # section order in the rendered text
FACT_DATES = ("day", "datetime")  # retrieval.context.fact_dates


def approx_tokens(text: str) -> int:
    """The default token estimate: about 4 characters per token."""
    return (len(text) + 3) // 4


def _day(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d") if dt is not None else "unknown"


def format_fact(f: Fact, dates: str = "day") -> str:
    """``Caroline has gastritis (2023-06-17 – now)``; no range when neither date is known. ``dates="datetime"``:
    ``(2023/06/17 (Sat) 13:56 – now)``, the released selector's format (``%Y/%m/%d (%a) %H:%M``)."""
    if dates not in FACT_DATES:
        raise ValueError(f"retrieval.context.fact_dates must be one of {FACT_DATES}, got {dates!r}")
    text = " ".join(f.fact.split()).rstrip(".")
    if f.valid_at is None and f.invalid_at is None:
        return text
    when = _day if dates == "day" else format_timestamp
    end = when(f.invalid_at) if f.invalid_at is not None else "now"
    return f"{text} ({when(f.valid_at)} – {end})"


def format_node(n: Entity | Category) -> str:
    """``name [tag, tag]: summary`` for an entity or a category."""
    tags = f" [{', '.join(n.tags)}]" if n.tags else ""
    summary = " ".join(n.summary.split())
    return f"{n.name}{tags}: {summary}" if summary else f"{n.name}{tags}"


def format_item(item: Item) -> str:
    """The one-line text of any item (also the reranker's document text)."""
    if isinstance(item, Episode):
        return format_episode(item)
    if isinstance(item, Fact):
        return format_fact(item)
    return format_node(item)


def fetch_items(store: GraphStore, contexts: Iterable[RetrievedContext]) -> dict[tuple[str, str], Item]:
    """Every item named by ``contexts``, keyed by ``(group_id, id)``; one store call per group and type."""
    wanted: dict[str, dict[str, set[str]]] = {}
    for ctx in contexts:
        g = wanted.setdefault(ctx.group_id, {k: set() for k in ("episode", "entity", "category", "fact")})
        for hit in (*ctx.episodes, *ctx.entities, *ctx.facts):
            g[hit.kind].add(hit.id)
    out: dict[tuple[str, str], Item] = {}
    for gid, by_kind in wanted.items():
        loaders = {"episode": store.episodes, "entity": store.entities, "fact": store.facts,
                   "category": lambda g, ids: store.categories(g, ids=ids)}
        for kind, ids in by_kind.items():
            if ids:
                for rec in loaders[kind](gid, sorted(ids)):
                    out[(gid, rec.id)] = rec
    return out


class RenderedContext(BaseModel):
    question_id: str
    group_id: str
    text: str
    tokens: int
    included: dict[str, list[str]] = Field(default_factory=dict, description="ids per section, as rendered")
    dropped: int = Field(0, description="items left out for the budget (or missing from the store)")


def _line(field: str, item: Item, fact_dates: str = "day") -> str:
    if isinstance(item, Fact):
        return f"- {format_fact(item, fact_dates)}"
    return format_item(item) if field == "episodes" else f"- {format_item(item)}"


def _fill(
    ctx: RetrievedContext, items: Mapping[tuple[str, str], Item], max_tokens: int | None,
    count: Callable[[str], int], fact_dates: str = "day",
) -> tuple[dict[str, list[Item]], int, int]:
    lists = {f: [items.get((ctx.group_id, h.id)) for h in getattr(ctx, f)] for f in FIELDS}
    dropped = sum(x is None for lst in lists.values() for x in lst)
    lists = {f: [x for x in lst if x is not None] for f, lst in lists.items()}
    chosen: dict[str, list[Item]] = {f: [] for f in FIELDS}
    used = 0
    for rank in range(max((len(v) for v in lists.values()), default=0)):
        for f in FIELDS:
            if rank >= len(lists[f]):
                continue
            item = lists[f][rank]
            cost = count(_line(f, item, fact_dates)) + 1 + (count(HEADERS[f]) + 2 if not chosen[f] else 0)
            if max_tokens is not None and used + cost > max_tokens:
                dropped += 1
                continue
            chosen[f].append(item)
            used += cost
    return chosen, used, dropped


def render_context(
    store: GraphStore,
    contexts: Sequence[RetrievedContext],
    *,
    max_tokens: int | None = 6000,
    tokenizer: Callable[[str], int] | None = None,
    fact_dates: str = "day",
) -> list[RenderedContext]:
    """Render every context (same order) within ``max_tokens`` (None = no budget); facts dated to the day or,
    ``fact_dates="datetime"``, to the minute (``retrieval.context.fact_dates``)."""
    if fact_dates not in FACT_DATES:
        raise ValueError(f"retrieval.context.fact_dates must be one of {FACT_DATES}, got {fact_dates!r}")
    count = tokenizer or approx_tokens
    items = fetch_items(store, contexts)
    out = []
    for ctx in contexts:
        chosen, _, dropped = _fill(ctx, items, max_tokens, count, fact_dates)
        chosen["episodes"] = sort_episodes(chosen["episodes"])  # type: ignore[arg-type]
        sections = []
        for f in LAYOUT:
            if chosen[f]:
                sections.append("\n".join([HEADERS[f], *(_line(f, x, fact_dates) for x in chosen[f])]))
        text = "\n\n".join(sections)
        out.append(RenderedContext(
            question_id=ctx.question_id, group_id=ctx.group_id, text=text, tokens=count(text) if text else 0,
            included={f: [x.id for x in chosen[f]] for f in LAYOUT}, dropped=dropped,
        ))
    return out
