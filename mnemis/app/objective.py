"""The number a hyper-parameter sweep optimises: one figure read from a finished run directory.

``optimized_metric: <file>#<key path>`` (``conf/hparams_search/*.yaml``) names a JSON file of the run dir and
a dotted key path inside it, as the docs cite figures: ``recall.json#mnemis/system1.overall.mrr``. The CLI
returns that figure from the job, which is what a Hydra sweeper that optimises (Optuna) reads; with
``optimized_metric: null`` (the default) a job returns nothing, as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_metric(run_dir: str | Path, spec: str) -> float:
    """The number at ``spec`` (``file.json#a.b.c``) in ``run_dir``; a clear error naming what is missing."""
    file, sep, path = spec.partition("#")
    if not sep or not file or not path:
        raise ValueError(f"optimized_metric={spec!r}: expected '<file>.json#<key>.<key>...', "
                         "e.g. 'recall.json#mnemis/system1.overall.mrr'")
    where = Path(run_dir) / file
    if not where.is_file():
        raise ValueError(f"optimized_metric={spec!r}: the run wrote no {file} ({where})")
    node: Any = json.loads(where.read_text(encoding="utf-8"))
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            have = sorted(node) if isinstance(node, Mapping) else type(node).__name__
            raise ValueError(f"optimized_metric={spec!r}: no key {key!r} in {where} (there: {have})")
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise TypeError(f"optimized_metric={spec!r}: {where} holds {node!r} there, not a number")
    value = float(node)
    if math.isnan(value):
        raise ValueError(f"optimized_metric={spec!r}: {where} holds NaN there")
    return value


def sweep_objective(cfg: Mapping[str, Any], run_dir: str | Path) -> float | None:
    """The job's return value: ``optimized_metric`` of the run dir, or None when none is configured."""
    spec = cfg.get("optimized_metric")
    return None if not spec else read_metric(run_dir, str(spec))
