"""Bind a config node to its ``_target_``'s signature without building it (no model is loaded): used by the
model-config tests and the paper-experiment tests."""

from __future__ import annotations

import importlib
import inspect


def _import(target: str):
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def bind_targets(node: dict, where: str) -> int:
    """Bind ``node`` (and nested ``_target_`` nodes) to their targets; returns how many were checked."""
    checked = 0
    kwargs = {}
    for key, value in node.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict) and "_target_" in value:
            checked += bind_targets(value, f"{where}.{key}")
            kwargs[key] = object()
        else:
            kwargs[key] = value
    target = _import(node["_target_"])
    sig = inspect.signature(target)
    try:
        (sig.bind_partial if node.get("_partial_") else sig.bind)(**kwargs)
    except TypeError as exc:
        raise AssertionError(f"{where}: {node['_target_']}{sig} does not accept {sorted(kwargs)}: {exc}") from exc
    return checked + 1
