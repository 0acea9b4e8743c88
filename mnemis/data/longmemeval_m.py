"""LongMemEval-M: LongMemEval-S's format with ~500 sessions (~1.5M tokens) per question, a 2.7 GB file.

The file is read as a stream (``mnemis.data.json_stream``): one question instance is decoded at a time and
only the selected ones become episodes, so the loader's memory follows the selection, not the file. The
selection is the dataset slice's ``groups`` / ``max_groups`` and the run's ``shard`` (``i/N`` over the sorted
ids of the selected groups, the rule of ``mnemis.data.shard``; a shard needs one extra pass over the file
that keeps only the ids). Each instance is parsed exactly as LongMemEval-S's (``parse_instance``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError, require
from mnemis.data.json_stream import iter_json_array
from mnemis.data.longmemeval import parse_instance
from mnemis.data.sources import DataDirs, locate
from mnemis.data.shard import parse_shard, shard_groups
from mnemis.types import Dataset, Episode, Question

NAME = "longmemeval_m"


def iter_instances(path: str | Path, *, wanted: set[str] | None = None
                   ) -> Iterator[tuple[str, list[Episode], Question]]:
    """``(question_id, episodes, question)`` of each instance in file order (only ``wanted`` ids when given;
    the others are decoded, checked for an id, and dropped)."""
    path = Path(path)
    seen: set[str] = set()
    for qi, item in enumerate(iter_json_array(path)):
        if wanted is not None:
            qid = str(require(item, "question_id", (str, int), f"{path.name}[{qi}]"))
            if qid not in wanted:
                if qid in seen:
                    raise DataError(f"{path.name}:{qid}", "duplicate question_id")
                seen.add(qid)
                continue
        yield parse_instance(item, qi, path.name, seen)


def instance_ids(path: str | Path) -> list[str]:
    """Every question id of the file, in order (one streamed pass; only the ids are kept)."""
    return [str(require(item, "question_id", (str, int), f"{Path(path).name}[{qi}]"))
            for qi, item in enumerate(iter_json_array(path))]


def select(ids: Sequence[str], groups: Sequence[str] | None, max_groups: int | None,
           shard: Any) -> list[str]:
    """The ids a run keeps: ``groups`` (in file order), then the first ``max_groups``, then the shard."""
    keep = list(ids)
    if groups:
        unknown = sorted(set(groups) - set(ids))
        if unknown:
            raise DataError(f"dataset {NAME}", f"unknown group ids {unknown[:5]} (known: {list(ids)[:5]}...)")
        keep = [g for g in keep if g in set(groups)]
    if max_groups is not None:
        keep = keep[:max_groups]
    parsed = parse_shard(shard)
    return shard_groups(keep, *parsed) if parsed else keep


def load_longmemeval_m(path: str | Path | None = None, *, download: bool = True, dirs: DataDirs | None = None,
                       groups: Sequence[str] | None = None, max_groups: int | None = None,
                       shard: Any = None) -> Dataset:
    """The selected instances of LongMemEval-M (every one when nothing is selected: the whole 2.7 GB as
    episodes; select with ``dataset.slice.groups`` / ``max_groups`` or ``shard``)."""
    file = Path(path) if path else locate(NAME, dirs, fetch_missing=download)
    if not file.exists():
        raise DataError(str(file), "LongMemEval-M file not found (leave dataset.path unset and run `mnemis data "
                        "fetch longmemeval_m`, from the Hugging Face dataset xiaowu0162/longmemeval-cleaned)")
    wanted: set[str] | None = None
    order: list[str] | None = None
    if parse_shard(shard) is not None:
        order = select(instance_ids(file), groups, max_groups, shard)
        wanted = set(order)
    elif groups:
        wanted = set(groups)
    out_groups, episodes, questions = [], [], []
    for qid, eps, q in iter_instances(file, wanted=wanted):
        if order is None and max_groups is not None and len(out_groups) >= max_groups:
            break
        out_groups.append(qid)
        episodes.extend(eps)
        questions.append(q)
    if groups and order is None:
        missing = sorted(set(groups) - set(out_groups))
        if missing and (max_groups is None or len(out_groups) < max_groups):
            raise DataError(f"dataset {NAME}", f"unknown group ids {missing[:5]}")
    return Dataset(name=NAME, groups=out_groups, episodes=episodes, questions=questions)
