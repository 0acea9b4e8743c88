"""Deterministic backends for unit tests of pipeline logic (no model, no network).

``ScriptedBackend`` answers from a responder callable or from canned replies per stage and records
every ``complete()`` batch so tests can assert "one batched call per stage". ``SchemaFakeBackend``
answers every request with a minimal valid instance of its schema.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.limits import ModelLimits, estimate_prompt_tokens


class Cut(str):
    """A scripted reply that stopped at ``max_tokens`` (``finish_reason="length"``)."""


class Refused(Exception):  # noqa: N818 - a scripted outcome, named as the reply it stands for
    """A scripted refusal of the request itself (``Completion.refused``: too long for the context, say)."""


Reply = str | dict | list | BaseModel | Exception
Responder = Callable[[LLMRequest], Reply]


def _to_text(reply: Reply) -> str:
    if isinstance(reply, BaseModel):
        return reply.model_dump_json()
    if isinstance(reply, (dict, list)):
        return json.dumps(reply)
    return str(reply)


def _count_tokens(text: str) -> int:
    return len(text.split())


class ScriptedBackend:
    """Backend whose replies come from a function or from per-stage queues.

    Args:
        responder: ``f(request) -> str | dict | BaseModel | Exception`` (an Exception is the engine giving
            no reply for that item, :class:`Refused` the request refused; a responder that *raises* refuses the
            request), or a mapping ``stage -> list of replies`` consumed in order (a stage whose queue is empty
            gives no reply, naming it).
        model_id: identity used in cache keys.
    """

    def __init__(self, responder: Responder | Mapping[str, Sequence[Reply]], *, model_id: str = "scripted"):
        self.model_id = model_id
        self.batches: list[list[LLMRequest]] = []
        self._lock = threading.Lock()
        if callable(responder):
            self._fn: Responder | None = responder
            self._queues: dict[str, deque[Reply]] = {}
        elif isinstance(responder, Mapping):
            self._fn = None
            self._queues = {k: deque(v) for k, v in responder.items()}
        else:
            raise TypeError("responder must be a callable or a mapping stage -> list of replies")

    @property
    def requests(self) -> list[LLMRequest]:
        """Every request sent so far, flattened in order."""
        return [r for b in self.batches for r in b]

    def batches_for(self, stage: str) -> list[list[LLMRequest]]:
        return [b for b in self.batches if any(r.stage == stage for r in b)]

    def _reply(self, request: LLMRequest) -> Reply:
        if self._fn is not None:
            return self._fn(request)
        queue = self._queues.get(request.stage)
        if not queue:
            return RuntimeError(f"no scripted reply left for stage {request.stage!r}")
        return queue.popleft()

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        with self._lock:
            self.batches.append(list(requests))
            out = []
            for req in requests:
                try:
                    reply = self._reply(req)
                except Exception as exc:  # noqa: BLE001 - a responder that cannot answer refuses the request
                    reply = Refused(f"{type(exc).__name__}: {exc}")
                prompt_tokens = sum(_count_tokens(m.get("content", "")) for m in req.messages)
                if isinstance(reply, Exception):
                    out.append(Completion(text="", prompt_tokens=prompt_tokens, error=str(reply) or "error",
                                          refused=isinstance(reply, Refused)))
                    continue
                text = _to_text(reply)
                out.append(Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=_count_tokens(text),
                                      finish_reason="length" if isinstance(reply, Cut) else "stop"))
            return out


class Killed(BaseException):
    """Stands in for SIGKILL in resume tests: not an ``Exception``, so nothing on the way catches it."""


class CountingBackend(ScriptedBackend):
    """A ``ScriptedBackend`` that counts the requests sent per stage (``sent``) and raises ``Killed``
    instead of sending the batch that would take ``stage`` (any stage if None) past ``crash_after``."""

    def __init__(self, responder: Responder | Mapping[str, Sequence[Reply]], *, crash_after: int | None = None,
                 stage: str | None = None, model_id: str = "scripted") -> None:
        super().__init__(responder, model_id=model_id)
        self.crash_after, self.stage = crash_after, stage
        self.sent: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        st = requests[0].stage if requests else ""
        counted = self.sent.get(st, 0) if self.stage is not None else self.total
        if self.crash_after is not None and (self.stage in (None, st)) and counted + len(requests) > self.crash_after:
            raise Killed
        self.sent[st] = self.sent.get(st, 0) + len(requests)
        return super().complete(requests)


def minimal_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A small JSON value satisfying ``schema`` (pydantic-generated JSON Schema subset), deterministic."""
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = schema["$ref"]
        node: Any = root
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return minimal_instance(node, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = schema[key]
            non_null = [o for o in options if o.get("type") != "null"]
            return minimal_instance((non_null or options)[0], root)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return minimal_instance(merged, root)
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), typ[0])
    if typ == "object" or (typ is None and "properties" in schema):
        props = schema.get("properties", {})
        return {k: minimal_instance(props[k], root) for k in schema.get("required", []) if k in props}
    if typ == "array":
        n = int(schema.get("minItems", 0))
        items = schema.get("items", {})
        prefix = schema.get("prefixItems")
        if prefix:
            return [minimal_instance(p, root) for p in prefix]
        return [minimal_instance(items, root) for _ in range(n)]
    if typ == "string":
        n = max(int(schema.get("minLength", 1)), 1)
        maxlen = schema.get("maxLength")
        s = ("x" * n) if maxlen is None else "x" * min(n, int(maxlen))
        return s
    if typ in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        if lo is not None:
            v = lo + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        elif hi is not None:
            v = min(0, hi - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0))
        else:
            v = 0
        return int(v) if typ == "integer" else float(v)
    if typ == "boolean":
        return False
    if typ == "null":
        return None
    return {}


class SchemaFakeBackend:
    """Answers every request with a minimal valid instance of its schema ("ok" when it has none).

    ``max_completion_tokens`` / ``max_model_len`` give it a served model's limits (prompts counted by the
    estimate of :mod:`mnemis.models.llm.limits`), so a dry run meets the clamps a real run would; a request above
    them fails as a server would refuse it (``over_limit``)."""

    plain_text = False  # it writes no real free text (a yes/no judge cannot use it)

    def __init__(self, *, model_id: str = "schema-fake", max_completion_tokens: int | None = None,
                 max_model_len: int | None = None) -> None:
        self.model_id = model_id
        self.batches: list[list[LLMRequest]] = []
        self._limits = ModelLimits(max_completion_tokens, max_model_len, "config")

    def limits(self) -> ModelLimits:
        return self._limits

    def count_prompts(self, requests: Sequence[LLMRequest]) -> list[int]:
        return [estimate_prompt_tokens(r.messages) for r in requests]

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        self.batches.append(list(requests))
        out = []
        for req in requests:
            room = self._limits.room(estimate_prompt_tokens(req.messages))
            if room is not None and req.sampling.max_tokens > room:
                out.append(Completion(text="", over_limit=True, error=f"max_tokens={req.sampling.max_tokens} is "
                                      f"above the room left ({room}): {self._limits.describe()}"))
                continue
            schema = req.json_schema()
            text = "ok" if schema is None else json.dumps(minimal_instance(schema))
            out.append(Completion(text=text, prompt_tokens=sum(len(m.get("content", "").split())
                                                                 for m in req.messages),
                                  completion_tokens=len(text.split()), finish_reason="stop"))
        return out
