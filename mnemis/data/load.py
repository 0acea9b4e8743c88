"""Load a dataset as configured: ``load_dataset(name, path, slice...)`` (Hydra's ``dataset`` node)."""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.data.errors import DataError
from mnemis.data.slicing import slice_dataset
from mnemis.data.sources import DataDirs
from mnemis.types import Dataset


def load_dataset(
    name: str,
    path: str | None = None,
    *,
    download: bool = True,
    data_dirs: DataDirs | None = None,
    groups: Sequence[str] | None = None,
    max_groups: int | None = None,
    sessions: Sequence[int] | None = None,
    max_questions: int | None = None,
    categories: Sequence[str] | None = None,
) -> Dataset:
    if name == "locomo":
        from mnemis.data.locomo import load_locomo

        data = load_locomo(path, dirs=data_dirs)
    elif name == "longmemeval":
        from mnemis.data.longmemeval import load_longmemeval

        data = load_longmemeval(path, download=download, dirs=data_dirs)
    else:
        raise DataError("dataset.name", f"unknown dataset {name!r} (known: locomo, longmemeval)")
    return slice_dataset(
        data, groups=groups, max_groups=max_groups, sessions=tuple(sessions) if sessions else None,
        max_questions=max_questions, categories=categories,
    )
