"""The one place episodes are rendered as text for answer prompts (baselines and System-2 reuse it).

Format (the paper): ``[YYYY/MM/DD (Ddd) HH:MM] speaker: text``, one episode per line, sorted
chronologically.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from mnemis.times import comparable
from mnemis.types import Episode

TIMESTAMP_FORMAT = "%Y/%m/%d (%a) %H:%M"


def format_timestamp(dt: datetime | None) -> str:
    """``2023/05/08 (Mon) 13:56``; ``unknown date`` for None."""
    return dt.strftime(TIMESTAMP_FORMAT) if dt is not None else "unknown date"


def format_episode(ep: Episode) -> str:
    """``[2023/05/08 (Mon) 13:56] Caroline: text`` (the speaker is not repeated when the content has it)."""
    content = " ".join(ep.content.split())
    if ep.speaker and not content.startswith(f"{ep.speaker}:"):
        content = f"{ep.speaker}: {content}"
    return f"[{format_timestamp(ep.valid_at)}] {content}"


def sort_episodes(episodes: Iterable[Episode]) -> list[Episode]:
    """Chronological order (timestamp, then position in the group); naive and aware times compare (a naive
    one read as UTC), so a group stored before the one-kind rule of ``mnemis.times`` still renders."""
    return sorted(episodes, key=lambda e: (comparable(e.valid_at), e.position))


def render_episodes(episodes: Iterable[Episode]) -> str:
    """Episodes sorted chronologically, one formatted line each."""
    return "\n".join(format_episode(e) for e in sort_episodes(episodes))
