"""``mnemis merge runs=[...] out=...``: merge the run dirs of a sharded run (:mod:`mnemis.scale.merge`) and say where
the report went."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.run_files import RunFileError
from mnemis.scale.merge import MergeError, merge_runs, parse_merge_args


def merge_command(args: Sequence[str]) -> dict[str, Any]:
    """``mnemis merge runs=[...] out=...``: merge and print where the report went (exit 2 on a MergeError)."""
    try:
        runs, out = parse_merge_args(args)
        metrics = merge_runs(runs, out)
    except (MergeError, FileNotFoundError, RunFileError) as exc:  # RunFileError: a damaged shard file, named
        raise SystemExit(f"mnemis merge: {exc}") from None
    print(f"merged {len(runs)} runs into {out}: methods {list(metrics)}; report: {Path(out) / 'report.md'}")
    return metrics
