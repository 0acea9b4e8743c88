"""One address for a built memory, used by the CLI's artifacts and by a library ``Memory`` alike.

A memory is addressed by a hash of what decides what it holds: the build sections of the config (``dataset`` when
there is one, ``llm``, ``embedder``, ``ingest``, ``hierarchy``), the fingerprints of the build prompts (their
text and schema: :mod:`mnemis.prompts.fingerprint`) and :data:`BUILD_CODE_VERSION`, and by nothing about where
files go or how fast an engine runs (:data:`NOT_BUILD_FIELDS`). ``mnemis build`` / ``run`` keep a memory under
``<paths.artifacts_dir>/<address>/``; ``Memory()`` without a path under ``<paths.artifacts_dir>/memory/<address>/``
(its messages come from the caller, so its address has no dataset).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

# Config sections whose values change what a build produces.
BUILD_KEYS = ("dataset", "llm", "embedder", "ingest", "hierarchy")
# Bump when the extraction / hierarchy logic changes what a build writes (prompts are hashed on their own).
BUILD_CODE_VERSION = 2
# engine resources (threads, memory, batching, parallelism) change how fast a model answers, not what: they
# are left out of the address too, so tuning them reuses a built memory
ENGINE_FIELDS = frozenset({"cpu_threads_bind", "gpu_memory_utilization", "kv_cache_memory_bytes", "max_num_seqs",
                           "max_num_batched_tokens", "enable_prefix_caching", "enforce_eager", "tensor_parallel_size",
                           "data_parallel_size", "lazy", "chunk_size", "in_process"})
NOT_BUILD_FIELDS = frozenset({"cache_dir", "cache_mode", "show_progress"}) | ENGINE_FIELDS


def drop_fields(node: Any, drop: frozenset[str] | set[str]) -> Any:
    """A copy of a plain config node without the keys in ``drop``, at any depth."""
    if isinstance(node, Mapping):
        return {k: drop_fields(v, drop) for k, v in node.items() if k not in drop}
    if isinstance(node, list):
        return [drop_fields(v, drop) for v in node]
    return node


def config_hash(plain: Mapping[str, Any], keys: Sequence[str]) -> str:
    """A short hash of the named top-level sections: equal hashes = reusable artifacts."""
    picked = {k: plain.get(k) for k in sorted(keys)}
    text = json.dumps(picked, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def values(settings: BaseModel | Mapping[str, Any]) -> Mapping[str, Any]:
    """The values an address hashes: a settings record's as the config gave them (the keys it left out stay
    out, so a key added to a record with a default does not move any address), a mapping as it is."""
    if isinstance(settings, BaseModel):
        return settings.model_dump(mode="json", exclude_unset=True)
    return settings


def build_view(settings: BaseModel | Mapping[str, Any], keys: Sequence[str] = BUILD_KEYS, *,
               prompts: str = "build") -> dict[str, Any]:
    """What addresses a built memory: the build sections present in ``settings`` (without file locations or
    engine resources), the prompt fingerprints of ``prompts`` ("build" or "mem0") and the build code version."""
    from mnemis.prompts.fingerprint import build_prompt_fingerprints, mem0_prompt_fingerprints

    plain = values(settings)
    view = {k: drop_fields(plain.get(k), NOT_BUILD_FIELDS) for k in keys if k in plain}
    view["prompts"] = build_prompt_fingerprints() if prompts == "build" else mem0_prompt_fingerprints()
    view["build_code_version"] = BUILD_CODE_VERSION
    return view


def memory_address(settings: BaseModel | Mapping[str, Any], keys: Sequence[str] = BUILD_KEYS) -> str:
    """The address of the memory ``settings`` (the run's or a memory's settings, or a config as plain values)
    builds."""
    view = build_view(settings, keys)
    return config_hash(view, sorted(view))
