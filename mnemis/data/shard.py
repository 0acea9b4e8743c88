"""Shard a dataset by memory group: ``shard=i/N`` keeps groups ``i, i+N, i+2N, ...`` of the sorted group ids.

Round-robin over the *sorted* ids is deterministic (it does not depend on the file's order), balances
shard sizes to within one group, and puts every group in exactly one shard. All shards of a sweep see the
same dataset slice, so they agree on the assignment. Each shard is a separate job with its own store
(``sharded_address`` puts the shard into the artifact address) and its own run dir;
``mnemis.scale.merge.merge_runs`` combines the run dirs afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mnemis.data.errors import DataError
from mnemis.types import Dataset

_SPEC = re.compile(r"^\s*(-?\d+)\s*/\s*(-?\d+)\s*$")


class ShardSpecError(DataError):
    """A malformed or out-of-range ``shard=i/N`` value."""


def parse_shard(spec: str | Sequence[int] | None) -> tuple[int, int] | None:
    """``"i/N"`` (or ``[i, N]``) -> ``(i, N)`` with ``0 <= i < N``; ``None``/``""`` -> ``None`` (no sharding)."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return None
    if isinstance(spec, str):
        m = _SPEC.match(spec)
        if not m:
            raise ShardSpecError("shard", f"malformed shard spec {spec!r}: expected 'i/N', e.g. shard=0/8")
        i, n = int(m.group(1)), int(m.group(2))
    elif isinstance(spec, Sequence) and len(spec) == 2 and all(isinstance(x, int) for x in spec):
        i, n = int(spec[0]), int(spec[1])
    else:
        raise ShardSpecError("shard", f"malformed shard spec {spec!r}: expected 'i/N', e.g. shard=0/8")
    if n < 1:
        raise ShardSpecError("shard", f"shard count must be >= 1 in {spec!r}")
    if not 0 <= i < n:
        raise ShardSpecError("shard", f"shard index {i} out of range in {spec!r}: expected 0 <= i < {n}")
    return i, n


def assign_shards(groups: Sequence[str], n: int) -> dict[str, int]:
    """Group id -> shard (0..n-1): round-robin over the sorted, de-duplicated ids."""
    if n < 1:
        raise ShardSpecError("shard", f"shard count must be >= 1, got {n}")
    return {g: k % n for k, g in enumerate(sorted(set(map(str, groups))))}


def shard_groups(groups: Sequence[str], i: int, n: int) -> list[str]:
    """The groups of shard ``i`` of ``n``, in their original order."""
    parse_shard(f"{i}/{n}")
    where = assign_shards(groups, n)
    return [g for g in groups if where[str(g)] == i]


def restrict_dataset(data: Dataset, spec: str | Sequence[int] | None) -> Dataset:
    """``data`` limited to the groups (episodes, questions) of shard ``spec``; unchanged when ``spec`` is None.

    An empty shard (more shards than groups) is allowed and yields an empty dataset.
    """
    parsed = parse_shard(spec)
    if parsed is None:
        return data
    keep = set(shard_groups(data.groups, *parsed))
    return Dataset(
        name=data.name, groups=[g for g in data.groups if g in keep],
        episodes=[e for e in data.episodes if e.group_id in keep],
        questions=[q for q in data.questions if q.group_id in keep], warnings=dict(data.warnings),
    )


def shard_tag(spec: str | Sequence[int] | None) -> str:
    """``"shard-3-of-8"`` for the artifact address and run names; ``""`` when not sharded."""
    parsed = parse_shard(spec)
    return "" if parsed is None else f"shard-{parsed[0]}-of-{parsed[1]}"


def shard_specs(n: int) -> list[str]:
    """All specs of an ``n``-way split: ``["0/n", ..., "n-1/n"]`` (for sweeps: ``",".join(...)``)."""
    if n < 1:
        raise ShardSpecError("shards", f"shard count must be >= 1, got {n}")
    return [f"{i}/{n}" for i in range(n)]


def sharded_address(address: str, shard: str | None) -> str:
    """The build address of a sharded job: ``<address>-shard-i-of-N`` (unchanged when ``shard`` is unset)."""
    tag = shard_tag(shard)
    return f"{address}-{tag}" if tag else address
