"""Reading a model's reply against its schema: the JSON value inside whatever text came back, validated.

Tolerates ```json fences, prose before or after the value, and an unclosed value at the end; a validation error
is shortened to what a retry prompt can show (:data:`mnemis.models.llm.client.RETRY_INSTRUCTION`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
MAX_ERR_CHARS = 1200
def _candidates(text: str) -> list[str]:
    """Substrings of ``text`` that may hold the JSON value: fenced blocks first, then the whole text."""
    out = [m.group(1).strip() for m in _FENCE.finditer(text)]
    out.append(text.strip())
    # an opening fence with no closing one (truncated reply)
    if "```" in text and not out[:-1]:
        out.append(text.split("```", 1)[1].removeprefix("json").removeprefix("JSON").strip())
    return out


def _first_json_value(text: str) -> Any:
    """The first JSON object/array in ``text`` (after leading prose); raises ValueError if none."""
    decoder = json.JSONDecoder()
    last_err: Exception | None = None
    starts = [i for i, ch in enumerate(text) if ch in "{["][:64]
    for i in starts:
        try:
            value, _ = decoder.raw_decode(text, i)
            return value
        except RecursionError as exc:  # absurdly deep nesting: give up rather than rescan
            raise ValueError(f"JSON nested too deeply ({exc})") from None
        except (json.JSONDecodeError, ValueError) as exc:
            last_err = exc
            if _unclosed(text, i):  # a cut-off value: later starts lie inside it, and an inner
                break  # fragment must not pass for the reply (salvage keeps its complete items)
    raise ValueError(f"no JSON object or array found ({last_err})" if last_err else "no JSON object found")


def _unclosed(text: str, start: int) -> bool:
    """Whether the bracket opened at ``start`` is still open at the end of ``text`` (strings respected)."""
    depth, in_str, esc = 0, False, False
    for ch in text[start:]:
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return False
    return True


def parse_reply(text: str, schema: type[BaseModel] | None) -> tuple[BaseModel | None, str | None]:
    """Validate a raw reply against ``schema``.

    Returns ``(parsed, None)`` on success and ``(None, error_message)`` on failure; never raises.
    Tolerates ```json fences and prose before/after the JSON value.
    """
    if schema is None:
        return None, None
    if not isinstance(text, str):
        return None, f"reply is not text ({type(text).__name__})"
    first_error: str | None = None
    try:
        return schema.model_validate_json(text), None
    except ValidationError as exc:
        first_error = _short_error(exc)
    except Exception as exc:  # noqa: BLE001 - a broken reply must never escape
        first_error = f"{type(exc).__name__}: {exc}"
    for cand in _candidates(text):
        try:
            value = _first_json_value(cand)
        except (ValueError, RecursionError):
            continue
        try:
            return schema.model_validate(value), None
        except ValidationError as exc:
            return None, _short_error(exc)
        except Exception as exc:  # noqa: BLE001
            return None, f"{type(exc).__name__}: {exc}"[:MAX_ERR_CHARS]
    if not text.strip():
        return None, "empty reply"
    return None, first_error or "reply is not valid JSON"


def _short_error(exc: ValidationError) -> str:
    try:
        parts = []
        for e in exc.errors()[:8]:
            loc = ".".join(str(x) for x in e.get("loc", ())) or "<root>"
            parts.append(f"{loc}: {e.get('msg', '')}")
        msg = "; ".join(parts)
    except Exception:  # noqa: BLE001
        msg = str(exc)
    return msg[:MAX_ERR_CHARS]
