"""Per-layer progress records of a hierarchy build, so a killed build resumes at its first unfinished layer.

After every layer, each group that took part stores its categories and edges so far (``replace_hierarchy``)
and a ``LayerProgress`` record under the meta key ``hierarchy.progress:<group>``, in one transaction. The
record carries a fingerprint of what the build depends on (the group's entities, the hierarchy config,
the model); a rerun with the same fingerprint restores the group from the store and skips its finished
layers without any LLM call, anything else starts the group afresh (a rebuild from scratch).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from mnemis.types import Entity

PROGRESS_KEY = "hierarchy.progress:{}"


class LayerProgress(BaseModel):
    """Where one group's build stands after its last committed layer, with the counters its metrics need."""

    fingerprint: str = ""
    next_layer: int = Field(1, ge=1, description="the first layer still to build")
    done: bool = False
    stop_reason: str = ""
    discarded: int | None = None
    dissolved: int = 0
    reasked: int = 0
    llm_calls: int = 0
    llm_failures: int = 0
    repairs: dict[str, Any] = Field(default_factory=dict)


def fingerprint(entities: Sequence[Entity], cfg: BaseModel, model_id: str) -> str:
    """Hash of everything a group's hierarchy depends on: its entities (as the build sees them), the
    hierarchy config and the model's identity."""
    body = {
        "entities": [[e.id, e.name, list(e.tags), e.summary, e.is_speaker] for e in entities],
        "config": cfg.model_dump(mode="json"),
        "model": model_id,
    }
    return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_progress(store: Any, group_id: str, fp: str) -> LayerProgress | None:
    """The group's stored record if it belongs to a build with fingerprint ``fp``, else None."""
    raw = store.get_meta(PROGRESS_KEY.format(group_id))
    if not raw:
        return None
    rec = LayerProgress.model_validate(raw)
    return rec if rec.fingerprint == fp else None


def save_progress(store: Any, group_id: str, rec: LayerProgress) -> None:
    """Write the record (call inside the transaction that stores the layer)."""
    store.set_meta(PROGRESS_KEY.format(group_id), rec.model_dump(mode="json"))
