"""Load a dataset as configured: ``load_dataset(settings.dataset)``, the typed ``dataset`` section, one loader per
``dataset.name`` (:data:`LOADERS`).

Datasets: ``locomo``, ``longmemeval`` (LongMemEval-S), ``longmemeval_m`` (streamed), ``beam`` (option
``scale``: 100K | 500K | 1M | 10M; ``unknown_types``: error | keep) and ``locomo_plus`` (options ``seed``,
``assign``: random | cycle, ``include_locomo``, ``locomo_path``). ``shard`` (``i/N``) keeps one shard of the
sliced groups (``mnemis.data.shard``); LongMemEval-M applies the group slice and the shard while it streams.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mnemis.data.errors import DataError
from mnemis.data.shard import restrict_dataset
from mnemis.data.slicing import slice_dataset
from mnemis.data.sources import DataDirs
from mnemis.settings import (
    BeamSettings,
    DatasetSettings,
    LocomoPlusSettings,
    LocomoSettings,
    LongMemEvalMSettings,
    LongMemEvalSettings,
)
from mnemis.types import Dataset

log = logging.getLogger(__name__)


def load_dataset(section: DatasetSettings, *, data_dirs: DataDirs | None = None, shard: Any = None) -> Dataset:
    """The dataset of ``section`` (the ``dataset`` settings), sliced by its ``slice`` and cut to ``shard``."""
    data, streamed = LOADERS[section.name](section, data_dirs, shard)
    sl = section.slice
    episodes = getattr(sl, "episodes", None)  # only the datasets whose slice has the key (EpisodeSliceSettings)
    data = slice_dataset(
        data, groups=None if streamed else sl.groups, max_groups=None if streamed else sl.max_groups,
        sessions=tuple(sl.sessions) if sl.sessions else None, max_questions=sl.max_questions,
        categories=sl.categories, episodes=tuple(episodes) if episodes else None,
    )
    return data if streamed else restrict_dataset(data, shard)


def _locomo(s: LocomoSettings, dirs: DataDirs | None, shard: Any) -> tuple[Dataset, bool]:
    from mnemis.data.locomo import load_locomo

    return load_locomo(s.path, dirs=dirs), False


def _longmemeval(s: LongMemEvalSettings, dirs: DataDirs | None, shard: Any) -> tuple[Dataset, bool]:
    from mnemis.data.longmemeval import load_longmemeval

    return load_longmemeval(s.path, download=s.download, dirs=dirs), False


def _longmemeval_m(s: LongMemEvalMSettings, dirs: DataDirs | None, shard: Any) -> tuple[Dataset, bool]:
    """Streamed: the group slice and the shard are applied while the file is read."""
    from mnemis.data.longmemeval_m import load_longmemeval_m

    return load_longmemeval_m(s.path, download=s.download, dirs=dirs, groups=s.slice.groups,
                              max_groups=s.slice.max_groups, shard=shard), True


def _locomo_plus(s: LocomoPlusSettings, dirs: DataDirs | None, shard: Any) -> tuple[Dataset, bool]:
    from mnemis.data.locomo_plus import load_locomo_plus

    return load_locomo_plus(s.path, locomo_path=s.locomo_path, seed=s.seed, assign=s.assign,
                            include_locomo=s.include_locomo, download=s.download, dirs=dirs), False


def _beam(s: BeamSettings, dirs: DataDirs | None, shard: Any) -> tuple[Dataset, bool]:
    from mnemis.data.beam import SCALES, load_beam
    from mnemis.data.beam_files import locate_scale, verify_scale

    if s.scale not in SCALES:
        raise DataError("dataset.scale", f"unknown BEAM scale {s.scale!r} (known: {', '.join(SCALES)})")
    root = s.path or locate_scale(s.scale, dirs, fetch_missing=s.download)
    data = load_beam(root, scale=s.scale, unknown_types=s.unknown_types)
    if s.path is None:  # the pinned (or recorded) files: say so when they differ, as LoCoMo's loader does
        ok, msg = verify_scale(s.scale, root)
        if not ok:
            log.warning("%s; loading anyway", msg)
            data.warnings["checksum_mismatch"] = 1
    return data, False


# each dataset's loader, by ``dataset.name`` (the settings' union is discriminated on it): (data, streamed)
LOADERS: dict[str, Callable[[Any, DataDirs | None, Any], tuple[Dataset, bool]]] = {
    "locomo": _locomo, "longmemeval": _longmemeval, "longmemeval_m": _longmemeval_m, "beam": _beam,
    "locomo_plus": _locomo_plus,
}
DATASETS = tuple(LOADERS)
