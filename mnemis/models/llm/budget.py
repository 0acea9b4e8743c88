"""Reply budgets: the largest completion a reply schema allows, and fitting a schema into a budget.

A stage must never cut off a schema-valid reply. From a reply's JSON Schema we build its **worst case**:
every array at ``maxItems`` copies of its worst item, every string at ``maxLength`` characters, every
integer at the widest value its ``minimum``/``maximum`` allow, every enum at its longest option. It is
serialised the way constrained decoding writes JSON (``json.dumps`` separators ``", "`` / ``": "``, no
other whitespace: the vLLM backend decodes with ``disable_any_whitespace``, the HF backend with
``any_whitespace=False``). The token bound is then

    worst_case_tokens = len(serialised worst case) / CHARS_PER_TOKEN + SLACK_TOKENS

with ``CHARS_PER_TOKEN = 1``: every token of a byte-level BPE vocabulary (SmolLM2, Qwen3, GPT-4o)
decodes to at least one byte and an ASCII character is one byte, so no ASCII reply of ``n`` characters
needs more than ``n`` tokens (tested against SmolLM2's tokenizer on adversarial strings). Non-ASCII
characters can take up to four bytes; such a reply may exceed the bound, is then cut, and its complete
items are salvaged (:mod:`mnemis.models.llm.salvage`) and counted. ``SLACK_TOKENS`` covers the
end-of-sequence token and a template's empty think block.

A schema with an unbounded part (a string without ``maxLength``, a list without ``maxItems``, an
integer without both bounds) has no worst case: :func:`worst_case_tokens` returns None.

Policies (``LLM(reply_budget=...)``), applied per request by the client:

* ``raise`` (default): ``max_tokens = max(configured, worst case)``; a reply is never cut.
* ``fit``: keep the configured ``max_tokens`` and lower the schema's ``maxItems``/``maxLength`` (same
  factor everywhere, floors of 1 item and ``MIN_FIT_CHARS`` characters) until its worst case fits; the
  lowered schema is what constrained decoding gets, so a reply is never cut either (small CPU runs).
* ``off``: as configured (replies may be cut; salvage still keeps their complete items).

``max_tokens = 0`` (config ``auto`` / null) means "the worst case" under every policy.

What :func:`plan` returns is a wish: at send time the client lowers it to the room the served model leaves (its
completion cap, its window less the prompt) and counts that clamp per stage (:mod:`mnemis.models.llm.limits`).
"""

from __future__ import annotations

import copy
import json
import math
from functools import lru_cache
from typing import Any

CHARS_PER_TOKEN = 1.0
SLACK_TOKENS = 8
MIN_FIT_CHARS = 10
POLICIES = ("raise", "fit", "off")


class Unbounded(ValueError):
    """The schema allows replies of any length (names the unbounded part)."""


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _int_width(schema: dict[str, Any], where: str) -> int:
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    if lo is None or hi is None:
        raise Unbounded(f"{where}: integer without minimum and maximum")
    return max(len(str(int(lo))), len(str(int(hi))))


def worst_case_value(schema: dict[str, Any], root: dict[str, Any] | None = None, where: str = "$") -> Any:
    """A JSON value of ``schema`` whose serialisation is as long as any valid one (ASCII content)."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return max(schema["enum"], key=lambda v: len(json.dumps(v)))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [worst_case_value(o, root, f"{where}|{i}") for i, o in enumerate(schema[key])]
            return max(options, key=lambda v: len(json.dumps(v)))
    typ = schema.get("type")
    if isinstance(typ, list):
        options = [worst_case_value({**schema, "type": t}, root, where) for t in typ]
        return max(options, key=lambda v: len(json.dumps(v)))
    if typ == "object" or (typ is None and "properties" in schema):
        if schema.get("additionalProperties") not in (None, False) and "properties" not in schema:
            raise Unbounded(f"{where}: object with free keys")
        return {k: worst_case_value(v, root, f"{where}.{k}") for k, v in schema.get("properties", {}).items()}
    if typ == "array":
        if "maxItems" not in schema:
            raise Unbounded(f"{where}: array without maxItems")
        item = worst_case_value(schema.get("items", {}), root, f"{where}[]")
        return [item] * int(schema["maxItems"])
    if typ == "string":
        if "maxLength" not in schema:
            raise Unbounded(f"{where}: string without maxLength")
        return "x" * int(schema["maxLength"])
    if typ == "integer":
        return int("9" * _int_width(schema, where))
    if typ == "boolean":
        return False
    if typ == "null":
        return None
    raise Unbounded(f"{where}: no bound for type {typ!r}")


_ADVERSARIAL = "".join(chr(c) for c in range(32, 127) if chr(c) not in '"\\')


def adversarial_worst_case(schema: dict[str, Any], rng: Any) -> str:
    """The serialised worst case of ``schema`` with every string made of random printable ASCII (no
    escapes): the hardest reply of that length for a tokenizer, used to check the bound against one."""

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return "".join(rng.choice(_ADVERSARIAL) for _ in value) if isinstance(value, str) else value

    return serialise(fill(worst_case_value(schema)))


def serialise(value: Any) -> str:
    """The JSON text constrained decoding writes for ``value`` (fixed separators, no other whitespace)."""
    return json.dumps(value, ensure_ascii=False)


def worst_case_tokens(schema: dict[str, Any] | None) -> int | None:
    """Upper bound on the completion tokens of any reply valid under ``schema`` (None if unbounded)."""
    if schema is None:
        return None
    return _worst_case_tokens(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=4096)
def _worst_case_tokens(schema_json: str) -> int | None:
    try:
        text = serialise(worst_case_value(json.loads(schema_json)))
    except Unbounded:
        return None
    return math.ceil(len(text) / CHARS_PER_TOKEN) + SLACK_TOKENS


def unbounded_part(schema: dict[str, Any]) -> str | None:
    """Where ``schema`` is unbounded (for error messages), or None."""
    try:
        worst_case_value(schema)
    except Unbounded as exc:
        return str(exc)
    return None


def _scaled(schema: Any, factor: float) -> Any:
    """A copy of ``schema`` with every maxItems / maxLength multiplied by ``factor`` (with floors)."""
    if isinstance(schema, list):
        return [_scaled(s, factor) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _scaled(v, factor) for k, v in schema.items()}
    if isinstance(schema.get("maxItems"), int):
        out["maxItems"] = max(min(1, schema["maxItems"]), int(schema["maxItems"] * factor),
                              int(schema.get("minItems", 0)))
    if isinstance(schema.get("maxLength"), int):
        out["maxLength"] = max(min(MIN_FIT_CHARS, schema["maxLength"]), int(schema["maxLength"] * factor),
                               int(schema.get("minLength", 0)))
    return out


def fit_schema(schema: dict[str, Any], max_tokens: int) -> dict[str, Any] | None:
    """``schema`` with its limits lowered by the largest factor (steps of 1/100) whose worst case fits
    ``max_tokens``; ``schema`` itself when it fits already; None when nothing fits (or it is unbounded)."""
    worst = worst_case_tokens(schema)
    if worst is None:
        return None
    if worst <= max_tokens:
        return schema
    lo, hi = 0, 100  # factor = step / 100; find the largest step that fits
    if worst_case_tokens(_scaled(schema, 0.0)) > max_tokens:  # type: ignore[operator]
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if worst_case_tokens(_scaled(schema, mid / 100)) <= max_tokens:  # type: ignore[operator]
            lo = mid
        else:
            hi = mid
    return _scaled(copy.deepcopy(schema), lo / 100)


def plan(schema: dict[str, Any] | None, max_tokens: int, policy: str) -> tuple[int, dict[str, Any] | None, str]:
    """``(max_tokens, decoding schema, note)`` for one request under ``policy``.

    ``note`` is "" when nothing changed, else a short reason (``raised``, ``fitted``, ``auto``,
    ``unbounded``, ``unfittable``) the client counts in its log.
    """
    if policy not in POLICIES:
        raise ValueError(f"reply_budget must be one of {POLICIES}, got {policy!r}")
    worst = worst_case_tokens(schema)
    if max_tokens <= 0:  # auto
        if worst is None:
            raise ValueError("max_tokens=auto needs a reply schema with a finite worst case; "
                             f"unbounded: {unbounded_part(schema) if schema else 'no schema'}")
        return worst, schema, "auto"
    if worst is None:
        return max_tokens, schema, "unbounded" if schema is not None else ""
    if worst <= max_tokens or policy == "off":
        return max_tokens, schema, ""
    if policy == "raise":
        return worst, schema, "raised"
    fitted = fit_schema(schema, max_tokens)  # type: ignore[arg-type]
    if fitted is None:  # even one shortest item does not fit: raise to that minimum instead
        small = _scaled(schema, 0.0)
        return int(worst_case_tokens(small) or max_tokens), small, "unfittable"
    return max_tokens, fitted, "fitted"
