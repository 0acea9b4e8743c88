"""Load a dataset as configured: ``load_dataset(name, path, slice..., options=...)`` (Hydra's ``dataset`` node).

Datasets: ``locomo``, ``longmemeval`` (LongMemEval-S), ``longmemeval_m`` (streamed), ``beam`` (option
``scale``: 100K | 500K | 1M | 10M; ``unknown_types``: error | keep) and ``locomo_plus`` (options ``seed``,
``assign``: random | cycle, ``include_locomo``, ``locomo_path``). ``shard`` (``i/N``) keeps one shard of the
sliced groups (``mnemis.data.shard``); LongMemEval-M applies the group slice and the shard while it streams.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from mnemis.data.errors import DataError
from mnemis.data.slicing import slice_dataset
from mnemis.data.sources import DataDirs
from mnemis.data.shard import restrict_dataset
from mnemis.types import Dataset

log = logging.getLogger(__name__)
DATASETS = ("locomo", "longmemeval", "longmemeval_m", "beam", "locomo_plus")


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
    episodes: Sequence[int] | None = None,
    options: Mapping[str, Any] | None = None,
    shard: Any = None,
) -> Dataset:
    opts = dict(options or {})
    streamed = False
    if name == "locomo":
        from mnemis.data.locomo import load_locomo

        data = load_locomo(path, dirs=data_dirs)
    elif name == "longmemeval":
        from mnemis.data.longmemeval import load_longmemeval

        data = load_longmemeval(path, download=download, dirs=data_dirs)
    elif name == "longmemeval_m":
        from mnemis.data.longmemeval_m import load_longmemeval_m

        data = load_longmemeval_m(path, download=download, dirs=data_dirs, groups=groups, max_groups=max_groups,
                                  shard=shard)
        streamed = True
    elif name == "beam":
        data = _load_beam(path, opts, download, data_dirs)
    elif name == "locomo_plus":
        from mnemis.data.locomo_plus import load_locomo_plus

        data = load_locomo_plus(path, locomo_path=opts.get("locomo_path"), seed=int(opts.get("seed") or 0),
                                assign=str(opts.get("assign") or "random"),
                                include_locomo=bool(opts.get("include_locomo", True)), download=download,
                                dirs=data_dirs)
    else:
        raise DataError("dataset.name", f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    data = slice_dataset(
        data, groups=None if streamed else groups, max_groups=None if streamed else max_groups,
        sessions=tuple(sessions) if sessions else None, max_questions=max_questions, categories=categories,
        episodes=tuple(episodes) if episodes else None,
    )
    return data if streamed else restrict_dataset(data, shard)


def _load_beam(path: str | None, opts: dict[str, Any], download: bool, dirs: DataDirs | None) -> Dataset:
    from mnemis.data.beam import SCALES, load_beam
    from mnemis.data.beam_files import locate_scale, verify_scale

    scale = str(opts.get("scale") or "100K")
    if scale not in SCALES:
        raise DataError("dataset.scale", f"unknown BEAM scale {scale!r} (known: {', '.join(SCALES)})")
    root = path or locate_scale(scale, dirs, fetch_missing=download)
    data = load_beam(root, scale=scale, unknown_types=str(opts.get("unknown_types") or "error"))
    if path is None:  # the pinned (or recorded) files: say so when they differ, as LoCoMo's loader does
        ok, msg = verify_scale(scale, root)
        if not ok:
            log.warning("%s; loading anyway", msg)
            data.warnings["checksum_mismatch"] = 1
    return data
