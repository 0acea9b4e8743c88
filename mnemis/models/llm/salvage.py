"""Keep the complete items of a JSON reply that was cut off (e.g. at ``max_tokens``) or broken late.

``salvage(text, schema)`` scans the reply once, notes every place where a list element (or a member of
the top-level object) has just ended, and tries those prefixes from the longest down: the prefix plus
the brackets still open is parsed and validated against the schema; the first that validates wins. A
partly written element is never kept (the cut is always at an element boundary), so a half-written
fact or decision cannot turn into a default-filled one. Works for every reply schema, so each stage
gets it from the client (:class:`mnemis.models.llm.client.LLM`).
"""

from __future__ import annotations

import json

from pydantic import BaseModel

_CLOSE = {"{": "}", "[": "]"}
MAX_TRIES = 256


def cut_points(text: str) -> list[tuple[int, str]]:
    """``(position, closing brackets)`` after every complete element, in text order."""
    out: list[tuple[int, str]] = []
    stack: list[str] = []
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or _CLOSE[stack[-1]] != ch:
                break  # malformed: nothing after this point can be trusted
            stack.pop()
            if not stack:
                break  # the value is complete: salvage has nothing to add
            if stack[-1] == "[" or len(stack) == 1:
                out.append((i + 1, "".join(_CLOSE[c] for c in reversed(stack))))
        elif ch == "," and stack and (stack[-1] == "[" or len(stack) == 1):
            out.append((i, "".join(_CLOSE[c] for c in reversed(stack))))
    return out


def salvage(text: str, schema: type[BaseModel] | None) -> BaseModel | None:
    """The longest element-boundary prefix of ``text`` that validates against ``schema``, or None."""
    if schema is None or not isinstance(text, str):
        return None
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    body = text[min(starts):]
    for pos, closers in reversed(cut_points(body)[-MAX_TRIES:]):
        try:
            return schema.model_validate(json.loads(body[:pos].rstrip().rstrip(",") + closers))
        except Exception:  # noqa: BLE001 - try a shorter prefix
            continue
    return None
