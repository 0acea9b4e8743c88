"""The LLM client every stage talks to: cache -> one batched backend call -> validate -> retry.

``LLM.generate(requests)`` looks every request up in the response cache, sends all misses to the
backend in **one** ``complete()`` call, validates each reply against its pydantic schema, and retries
the failures (each retry round is again one batched call) with the bad reply and the validation error
appended to a copy of the conversation. Items that still fail come back as ``LLMResult(error=...)``
and are counted in the ledger; nothing in one item makes the batch raise. The only exception that
escapes is ``CacheMissError`` in ``replay_only`` mode, by design.

Reply budgets: before anything else each request's ``max_tokens`` (and, under ``fit``, its decoding
schema) is set by :func:`mnemis.models.llm.budget.plan`, so a schema-valid reply is never cut off.
Salvage: a reply cut at ``max_tokens`` that has complete items is not re-asked (the same budget would cut
it again); it and any reply still invalid after the retries keep their complete items (:mod:`mnemis.models.llm.salvage`),
counted as ``truncated`` / ``salvaged`` in the ledger.

Exact replay: the cache stores the **final outcome** of every request, failures included (last reply,
error, finish reason), so ``replay_only`` reproduces a run failures and all. A ``readwrite`` run replays
stored failures too and re-asks them only with ``retry_failed=True``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mnemis import progress
from mnemis.models.cache import MODES, CachedReply, CacheMissError, ResponseCache, request_key
from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import Backend, Completion, LLMRequest, LLMResult
from mnemis.models.llm.budget import POLICIES, plan
from mnemis.models.llm.salvage import salvage

log = logging.getLogger(__name__)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_MAX_ERR_CHARS = 1200
RETRY_INSTRUCTION = (
    "Your previous reply could not be used: {error}\n"
    "Reply again with only a JSON value that matches the required schema, and nothing else."
)


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
            return None, f"{type(exc).__name__}: {exc}"[:_MAX_ERR_CHARS]
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
    return msg[:_MAX_ERR_CHARS]


class LLM:
    """Batched, cached, validating front end over a ``Backend``.

    Args:
        backend: anything with ``model_id`` and ``complete(requests) -> list[Completion]``.
        cache_dir: directory of the response cache; None disables caching.
        cache_mode: ``readwrite`` (default), ``replay_only`` (a miss raises ``CacheMissError``) or ``off``.
        max_retries: retry rounds for invalid replies and transport errors.
        ledger: where counters go; a fresh ``Ledger`` if None.
        reply_budget: ``raise`` (default) | ``fit`` | ``off`` (:mod:`mnemis.models.llm.budget`).
        retry_failed: re-ask requests whose stored outcome is a failure (readwrite mode only).
        chunk_size: requests per chunk for stages that commit their results chunk by chunk
            (:func:`mnemis.models.llm.chunks.chunked`); a kill loses at most one chunk.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache_dir: str | Path | None = None,
        cache_mode: str = "readwrite",
        max_retries: int = 2,
        ledger: Ledger | None = None,
        reply_budget: str = "raise",
        retry_failed: bool = False,
        chunk_size: int = 1024,
    ) -> None:
        if cache_mode not in MODES:
            raise ValueError(f"cache_mode must be one of {MODES}, got {cache_mode!r}")
        if cache_mode == "replay_only" and cache_dir is None:
            raise ValueError("cache_mode='replay_only' needs a cache_dir")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if reply_budget not in POLICIES:
            raise ValueError(f"reply_budget must be one of {POLICIES}, got {reply_budget!r}")
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.reply_budget = reply_budget
        self.retry_failed = bool(retry_failed)
        self.chunk_size = int(chunk_size)
        self._budget_notes: set[tuple[str, str]] = set()
        self.backend = backend
        self.cache_mode = cache_mode
        self.max_retries = int(max_retries)
        self.ledger = ledger if ledger is not None else Ledger()
        self.cache: ResponseCache | None = (
            ResponseCache(cache_dir) if cache_dir is not None and cache_mode != "off" else None
        )

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    def generate_one(self, request: LLMRequest) -> LLMResult:
        return self.generate([request])[0]

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """Results for ``requests`` in the same order (see the module docstring for the flow)."""
        requests = [self.budgeted(r) for r in requests]
        if not requests:
            return []
        t0 = time.perf_counter()
        results: list[LLMResult | None] = [None] * len(requests)
        keys = [request_key(self.model_id, r) for r in requests] if self.cache is not None else []
        hits = self.cache.get_many(keys) if self.cache is not None else {}

        todo: list[int] = []
        for i, req in enumerate(requests):
            hit = hits.get(keys[i]) if keys else None
            if hit is not None:
                res = self._from_cache(hit, req)
                if res is not None:
                    results[i] = res
                    continue
            todo.append(i)
        if todo and self.cache_mode == "replay_only":
            raise CacheMissError(requests[todo[0]].stage, len(todo), keys[todo[0]])

        # identical requests inside one batch are sent once when caching is on (same key = same reply)
        leaders: dict[str, int] = {}
        followers: dict[int, int] = {}
        if keys:
            send = []
            for i in todo:
                j = leaders.setdefault(keys[i], i)
                if j == i:
                    send.append(i)
                else:
                    followers[i] = j
        else:
            send = list(todo)

        tokens: Counter = Counter()  # (stage, kind) -> count
        retries_by_stage: Counter[str] = Counter()
        attempts = {i: 0 for i in send}
        used = {i: [0, 0] for i in send}  # prompt / completion tokens over all attempts of an item
        last_text: dict[int, str] = {}
        last_err: dict[int, str] = {}
        last_finish: dict[int, str | None] = {}
        current = {i: list(requests[i].messages) for i in send}
        pending = list(send)
        to_store: list[tuple[str, str, str, CachedReply]] = []  # written in one transaction per round
        round_no = 0
        bar = progress.start(requests[0].stage, len(send))  # counts, rate, ETA per stage (mnemis.progress)
        while pending:
            batch = [requests[i].model_copy(update={"messages": current[i]}) for i in pending]
            completions = self._complete(batch)
            still: list[int] = []
            for i, comp in zip(pending, completions):
                req = requests[i]
                tokens[(req.stage, "prompt")] += comp.prompt_tokens
                tokens[(req.stage, "completion")] += comp.completion_tokens
                used[i][0] += comp.prompt_tokens
                used[i][1] += comp.completion_tokens
                last_finish[i] = comp.finish_reason
                if comp.error is not None:
                    err, text = f"backend error: {comp.error}", comp.text or ""
                    retry_messages = list(requests[i].messages)
                    parsed = None
                else:
                    text = comp.text
                    parsed, err = parse_reply(text, req.schema_)
                    retry_messages = list(requests[i].messages) + [
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": RETRY_INSTRUCTION.format(error=err)},
                    ]
                    if err is None and comp.finish_reason == "length" and req.schema_ is None and not text:
                        err = "empty reply (hit max_tokens)"
                cut = comp.finish_reason == "length"
                kept = None
                if err is not None and comp.error is None and cut and req.salvage:
                    kept = salvage(text, req.schema_)  # re-asking with the same budget would cut it again
                if err is None or kept is not None:
                    results[i] = LLMResult(
                        text=text, parsed=parsed if err is None else kept, prompt_tokens=used[i][0],
                        completion_tokens=used[i][1], retries=attempts[i], truncated=cut,
                        salvaged=err is not None,
                    )
                    if self.cache is not None:
                        to_store.append((keys[i], self.model_id, req.stage,
                                         CachedReply(text, comp.prompt_tokens, comp.completion_tokens,
                                                     finish_reason=comp.finish_reason)))
                    continue
                last_text[i], last_err[i] = text, err
                if round_no < self.max_retries:  # (a cut reply with nothing complete to keep is re-asked)
                    attempts[i] += 1
                    retries_by_stage[req.stage] += 1
                    current[i] = retry_messages
                    still.append(i)
            for i in pending:
                if results[i] is None and i not in still:
                    results[i] = self._final_failure(requests[i], last_text.get(i, ""),
                                                     last_err.get(i, "unknown failure"), last_finish.get(i),
                                                     used[i], attempts[i])
                    if self.cache is not None:
                        res = results[i]
                        to_store.append((keys[i], self.model_id, requests[i].stage, CachedReply(
                            res.text, used[i][0], used[i][1], error=None if res.ok else res.error,
                            finish_reason=last_finish.get(i), retries=attempts[i])))
            if bar is not None:
                bar.update(len(pending) - len(still))
            pending = still
            round_no += 1
            self._store(to_store)
            to_store = []

        if bar is not None:
            bar.close()
        for i, j in followers.items():
            src = results[j]
            assert src is not None
            results[i] = src.model_copy(update={"cached": src.ok})
        self._account(requests, results, tokens, retries_by_stage, time.perf_counter() - t0, bool(send))
        return [r for r in results if r is not None]

    def budgeted(self, request: LLMRequest) -> LLMRequest:
        """``request`` with the reply-budget policy applied (max_tokens, decoding schema)."""
        schema = request.json_schema()
        max_tokens, decode, note = plan(schema, request.sampling.max_tokens, self.reply_budget)
        if not note:
            return request
        if (request.stage, note) not in self._budget_notes:
            self._budget_notes.add((request.stage, note))
            log.info("reply budget of stage %r: %s (max_tokens %d -> %d)", request.stage, note,
                     request.sampling.max_tokens, max_tokens)
        update: dict[str, Any] = {"sampling": request.sampling.model_copy(update={"max_tokens": max_tokens})}
        if decode is not schema:
            update["decode_schema"] = decode
        return request.model_copy(update=update)

    # ---------------------------------------------------------------- internals
    def _from_cache(self, hit: CachedReply, req: LLMRequest) -> LLMResult | None:
        """The stored outcome as a result, or None when it must be (re-)asked."""
        common = {"text": hit.text, "prompt_tokens": hit.prompt_tokens, "completion_tokens": hit.completion_tokens,
                  "cached": True, "retries": hit.retries, "truncated": hit.finish_reason == "length"}
        if hit.error is not None:
            if self.retry_failed and self.cache_mode != "replay_only":
                return None
            return LLMResult(error=hit.error, **common)
        parsed, err = parse_reply(hit.text, req.schema_)
        if err is None:
            return LLMResult(parsed=parsed, **common)
        kept = salvage(hit.text, req.schema_) if req.salvage else None
        return LLMResult(parsed=kept, salvaged=True, **common) if kept is not None else None

    def _final_failure(self, req: LLMRequest, text: str, err: str, finish: str | None, used: list[int],
                       attempts: int) -> LLMResult:
        """A request that failed every attempt: its salvaged complete items, else the failure."""
        kept = salvage(text, req.schema_) if req.salvage and text else None
        common = {"text": text, "prompt_tokens": used[0], "completion_tokens": used[1], "retries": attempts,
                  "truncated": finish == "length"}
        if kept is not None:
            return LLMResult(parsed=kept, salvaged=True, **common)
        return LLMResult(error=err, **common)

    def _complete(self, batch: list[LLMRequest]) -> list[Completion]:
        try:
            out = list(self.backend.complete(batch))
        except Exception as exc:  # noqa: BLE001 - a crashed batch becomes per-item errors (retried)
            msg = f"{type(exc).__name__}: {exc}"[:_MAX_ERR_CHARS]
            return [Completion(text="", error=msg) for _ in batch]
        if len(out) != len(batch):
            msg = f"backend returned {len(out)} completions for {len(batch)} requests"
            return [Completion(text="", error=msg) for _ in batch]
        return [c if isinstance(c, Completion) else Completion(text="", error=f"bad completion {c!r}"[:200])
                for c in out]

    def _store(self, items: list[tuple[str, str, str, CachedReply]]) -> None:
        if self.cache is None or not items:
            return
        try:
            self.cache.put_many(items)
        except Exception:  # noqa: BLE001 - a cache write failure must not lose the result
            import logging

            logging.getLogger(__name__).warning("response cache write failed", exc_info=True)

    def _account(self, requests: list[LLMRequest], results: list[LLMResult | None], tokens: Counter,
                 retries_by_stage: Counter[str], wall: float, sent: bool) -> None:
        """Add this generate() call to the ledger, per stage (wall time split by item count)."""
        per_stage: dict[str, dict[str, float]] = {}
        for req, res in zip(requests, results):
            d = per_stage.setdefault(req.stage, Counter())
            d["calls"] += 1
            d["cache_hits"] += int(bool(res and res.cached))
            d["failures"] += int(bool(res and not res.ok))
            d["truncated"] += int(bool(res and res.truncated))
            d["salvaged"] += int(bool(res and res.salvaged))
        n = len(requests)
        for stage, d in per_stage.items():
            self.ledger.record(
                stage,
                calls=d["calls"], cache_hits=d["cache_hits"], failures=d["failures"],
                truncated=d["truncated"], salvaged=d["salvaged"],
                retries=retries_by_stage[stage],
                prompt_tokens=tokens[(stage, "prompt")], completion_tokens=tokens[(stage, "completion")],
                wall_s=wall * d["calls"] / n, batches=1,
            )
