"""Slices of a dataset for quick runs: groups, a session range, a question budget."""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.data.errors import DataError
from mnemis.types import Dataset


def slice_dataset(
    data: Dataset,
    *,
    groups: Sequence[str] | None = None,
    max_groups: int | None = None,
    sessions: tuple[int, int] | Sequence[int] | None = None,
    max_questions: int | None = None,
    categories: Sequence[str] | None = None,
    episodes: tuple[int, int] | Sequence[int] | None = None,
) -> Dataset:
    """Keep the named groups (or the first ``max_groups``), sessions ``lo..hi`` (inclusive, 1-based), episodes
    ``first..last`` of each group (inclusive, 1-based positions: for datasets whose sessions are long, such as
    BEAM's), and at most ``max_questions`` questions per group. A question is kept only when all its evidence
    lies inside the slice (questions without evidence are kept only when no session or episode range is set)."""
    keep = list(data.groups)
    if groups:
        unknown = [g for g in groups if g not in data.groups]
        if unknown:
            raise DataError(f"dataset {data.name}", f"unknown group ids {unknown} (known: {data.groups[:5]}...)")
        keep = [g for g in data.groups if g in set(groups)]
    if max_groups is not None:
        keep = keep[:max_groups]
    keep_set = set(keep)
    lo, hi = (None, None)
    if sessions is not None:
        if len(sessions) != 2 or sessions[0] > sessions[1]:
            raise DataError("dataset.slice.sessions", f"expected [first, last], got {list(sessions)}")
        lo, hi = int(sessions[0]), int(sessions[1])
    first, last = (None, None)
    if episodes is not None:
        if len(episodes) != 2 or episodes[0] > episodes[1] or episodes[0] < 1:
            raise DataError("dataset.slice.episodes", f"expected [first, last] from 1, got {list(episodes)}")
        first, last = int(episodes[0]) - 1, int(episodes[1]) - 1
    kept_eps = [
        e for e in data.episodes if e.group_id in keep_set and (lo is None or lo <= e.session <= hi)  # type: ignore[operator]
        and (first is None or first <= e.position <= last)  # type: ignore[operator]
    ]
    kept_ids = {e.id for e in kept_eps}
    questions = []
    per_group: dict[str, int] = {}
    for q in data.questions:
        if q.group_id not in keep_set:
            continue
        if categories and q.category not in categories:
            continue
        if (lo is not None or first is not None) and (not q.evidence or not all(ev in kept_ids for ev in q.evidence)):
            continue
        if max_questions is not None and per_group.get(q.group_id, 0) >= max_questions:
            continue
        per_group[q.group_id] = per_group.get(q.group_id, 0) + 1
        questions.append(q)
    positions: dict[str, int] = {}
    renumbered = []
    for e in kept_eps:
        pos = positions.get(e.group_id, 0)
        positions[e.group_id] = pos + 1
        renumbered.append(e if e.position == pos else e.model_copy(update={"position": pos}))
    return Dataset(name=data.name, groups=keep, episodes=renumbered, questions=questions, warnings=dict(data.warnings))
