"""Hydra's sweep-end hook: ``mnemis merge`` over a sharded sweep's shards when the multirun ends.

Registered in ``conf/hydra/default.yaml`` (``hydra.callbacks``); lives at the edge, the only place that imports
Hydra, and hands the sweep's folder to :func:`mnemis.scale.merge.merge_sweep`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from mnemis.scale.merge import merge_sweep


class MergeCallback(Callback):
    """``mnemis merge`` over the sweep's shards when a multirun ends; a gap stops the sweep with the merge's error
    (naming the shard, group or method)."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        for out in merge_sweep(sweep):
            print(f"merged shards: {out / 'report.md'}")
