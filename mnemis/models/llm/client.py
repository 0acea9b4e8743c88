"""The LLM client every stage talks to: cache -> one batched backend call -> validate -> retry.

``LLM.generate(requests)`` looks every request up in the response cache, sends all misses to the
backend in **one** ``complete()`` call, validates each reply against its pydantic schema, and retries
the failures (each retry round is again one batched call) with the bad reply and the validation error
appended to a copy of the conversation. Items whose reply still fails come back as ``LLMResult(error=...)``
and are counted in the ledger; a bad reply never makes the batch raise.

Engine failures are errors, never answers (:mod:`mnemis.models.failures`): when the backend raises for a batch
or returns an item without a reply (engine dead, connection refused or reset, out of memory, a batch past its
time limit), those items are sent again after a back-off (``engine_retries``, ``engine_backoff_s``) and then
:class:`~mnemis.models.failures.EngineFailure` is raised, which stops the stage. They are never written to the
cache, so a rerun asks exactly them again. A request the backend refuses itself (``Completion.refused``: longer
than the model's context, a schema it cannot compile) fails as a bad reply does. ``CacheMissError`` in
``replay_only`` mode also escapes, by design.

Reply budgets: before anything else each request's ``max_tokens`` (and, under ``fit``, its decoding
schema) is set by :func:`mnemis.models.llm.budget.plan`, so a schema-valid reply is never cut off.
Model limits: at send time each request's budget is kept within the served model's completion cap and window
less its prompt (:mod:`mnemis.models.llm.limits`); a lowered budget is counted as ``clamped`` per stage, a request
the server refused as over a limit as ``over_limit`` (never re-asked in the run), and a schema request the
backend decoded without its schema as ``unconstrained``. The cache key is the request before that clamp, so a
replay needs neither the server nor its limits. A refusal is stored as a refusal (finish reason
:data:`OVER_LIMIT`, no reply): ``replay_only`` serves it, counted ``over_limit`` as the run counted it, so a replay
without the served model reproduces the run's limits warnings; a ``readwrite`` run asks it again, since the model it
serves now may have other limits.
Salvage: a reply cut at ``max_tokens`` that has complete items is not re-asked (the same budget would cut
it again); it and any reply still invalid after the retries keep their complete items (:mod:`mnemis.models.llm.salvage`),
counted as ``truncated`` / ``salvaged`` in the ledger.

Exact replay: the cache stores the **final outcome** of every request the model answered, failed replies
included (last reply, error, finish reason), so ``replay_only`` reproduces a run failures and all. A
``readwrite`` run replays stored failed replies too and re-asks them only with ``retry_failed=True``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemis import progress
from mnemis.models.cache import MODES, CachedReply, CacheMissError, ResponseCache, request_key
from mnemis.models.failures import RERUN, EngineFailure, backoff_s
from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import Backend, Completion, LLMRequest, LLMResult
from mnemis.models.llm.budget import POLICIES, plan
from mnemis.models.llm.limits import NO_ROOM, SchemaDecodingRefused, estimate_prompt_tokens
from mnemis.models.llm.replies import MAX_ERR_CHARS, parse_reply  # noqa: F401  (parse_reply: re-exported)
from mnemis.models.llm.salvage import salvage

log = logging.getLogger(__name__)
OVER_LIMIT = "over_limit"  # the finish reason a stored refusal carries (no reply was made)
LEGACY_ENGINE_ERROR = "backend error: "  # how caches written before engine failures stopped a run mark them
RETRY_INSTRUCTION = (
    "Your previous reply could not be used: {error}\n"
    "Reply again with only a JSON value that matches the required schema, and nothing else."
)


class LLM:
    """Batched, cached, validating front end over a ``Backend``.

    Args:
        backend: anything with ``model_id`` and ``complete(requests) -> list[Completion]``.
        cache_dir: directory of the response cache; None disables caching.
        cache_mode: ``readwrite`` (default), ``replay_only`` (a miss raises ``CacheMissError``) or ``off``.
        max_retries: retry rounds for replies that fail validation.
        ledger: where counters go; a fresh ``Ledger`` if None.
        reply_budget: ``raise`` (default) | ``fit`` | ``off`` (:mod:`mnemis.models.llm.budget`).
        retry_failed: re-ask requests whose stored outcome is a failed model reply (readwrite mode only; an
            engine failure is never stored, so it is always asked again).
        engine_retries: times the items an engine gave no reply for are sent again before ``EngineFailure``.
        engine_backoff_s: wait before the first of those retries; doubles each time.
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
        engine_retries: int = 3,
        engine_backoff_s: float = 2.0,
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
        if engine_retries < 0 or engine_backoff_s < 0:
            raise ValueError("engine_retries and engine_backoff_s must be >= 0")
        self.engine_retries = int(engine_retries)
        self.engine_backoff_s = float(engine_backoff_s)
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
        keys = [request_key(self.model_id, r) for r in requests] if self.cache is not None else []
        results, todo = self._lookup(requests, keys)
        if todo and self.cache_mode == "replay_only":
            raise CacheMissError(requests[todo[0]].stage, len(todo), keys[todo[0]])
        send, followers = _dedupe(todo, keys)
        tally = _Tally()
        pending = [_Attempt(i, list(requests[i].messages)) for i in send]
        bar = progress.start(requests[0].stage, len(send))  # counts, rate, ETA per stage (mnemis.progress)
        round_no = 0
        try:
            while pending:
                pending = self._round(pending, requests, keys, results, tally, last=round_no >= self.max_retries)
                if bar is not None:
                    bar.update(tally.finished_last_round)
                round_no += 1
        finally:
            if bar is not None:
                bar.close()
        for i, j in followers.items():
            src = results[j]
            assert src is not None
            results[i] = src.model_copy(update={"cached": src.ok})
        self._account(requests, results, tally, time.perf_counter() - t0)
        return [r for r in results if r is not None]

    def _lookup(self, requests: Sequence[LLMRequest], keys: Sequence[str]) -> tuple[list[LLMResult | None], list[int]]:
        """Results served from the cache (None where it has none usable) and the indexes still to ask."""
        results: list[LLMResult | None] = [None] * len(requests)
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        todo = []
        for i, req in enumerate(requests):
            hit = hits.get(keys[i]) if keys else None
            res = self._from_cache(hit, req) if hit is not None else None
            if res is not None:
                results[i] = res
            else:
                todo.append(i)
        return results, todo

    def _round(self, pending: list[_Attempt], requests: Sequence[LLMRequest], keys: Sequence[str],
               results: list[LLMResult | None], tally: _Tally, *, last: bool) -> list[_Attempt]:
        """One backend call for every pending attempt: keep the valid (or salvaged) replies, re-ask the others
        with the validation error unless this is the ``last`` round, record final failures; store the round's
        outcomes in the cache. Returns the attempts to re-ask. Raises ``EngineFailure`` (after storing the
        round's replies) when the engine gave no reply for some attempts."""
        batch = [requests[a.index].model_copy(update={"messages": a.messages}) for a in pending]
        batch, refused = self._fit_limits(batch, pending, tally)
        sent = self._complete([r for k, r in enumerate(batch) if k not in refused])
        completions = [refused[k] if k in refused else sent.pop(0) for k in range(len(batch))]
        still: list[_Attempt] = []
        to_store: list[tuple[str, str, str, CachedReply]] = []
        no_reply: list[str] = []
        for a, comp in zip(pending, completions):
            req = requests[a.index]
            tally.count(req.stage, comp)
            if comp.error is not None and not comp.refused:
                no_reply.append(comp.error)
                continue
            a.record(comp)
            if comp.refused:
                result, retry_messages = None, []
                a.last_text, a.last_err = "", f"request refused: {comp.error}"
            else:
                result, retry_messages = _read_completion(req, comp, a)
            if result is not None:
                results[a.index] = result
                if self.cache is not None:
                    to_store.append((keys[a.index], self.model_id, req.stage, CachedReply(
                        comp.text, comp.prompt_tokens, comp.completion_tokens, finish_reason=comp.finish_reason)))
                continue
            if comp.over_limit:  # the same request would be refused again: stored as a refusal, not as a reply
                results[a.index] = LLMResult(error=a.last_err or comp.error, retries=a.attempts, over_limit=True)
                if self.cache is not None:
                    to_store.append((keys[a.index], self.model_id, req.stage, CachedReply(
                        "", 0, 0, error=a.last_err or comp.error, finish_reason=OVER_LIMIT, retries=a.attempts)))
                continue
            if not last and not comp.refused:  # (a cut reply with nothing complete to keep is re-asked)
                a.attempts += 1
                tally.retries[req.stage] += 1
                a.messages = retry_messages
                still.append(a)
                continue
            res = self._final_failure(req, a.last_text, a.last_err or "unknown failure", a.last_finish,
                                      a.used, a.attempts)
            results[a.index] = res
            if self.cache is not None:
                to_store.append((keys[a.index], self.model_id, req.stage, CachedReply(
                    res.text, a.used[0], a.used[1], error=None if res.ok else res.error,
                    finish_reason=a.last_finish, retries=a.attempts)))
        tally.finished_last_round = len(pending) - len(still)
        self._store(to_store)
        if no_reply:
            stage = requests[pending[0].index].stage
            raise EngineFailure(f"stage {stage!r}: the engine gave no reply for {len(no_reply)} of {len(pending)} "
                                f"request(s) after {self.engine_retries + 1} attempt(s): {no_reply[0]}; {RERUN}",
                                stage=stage, items=len(no_reply))
        return still

    def _fit_limits(self, batch: list[LLMRequest], pending: list[_Attempt],
                    tally: _Tally) -> tuple[list[LLMRequest], dict[int, Completion]]:
        """``batch`` within the served model's limits (:mod:`mnemis.models.llm.limits`): a budget above the room
        left (completion cap, window less the prompt) is lowered to it and counted as clamped; a request whose
        prompt alone fills the window is not sent (its completion says so). Prompts are counted exactly (the
        backend's ``count_prompts``) only where the estimate says a request might not fit."""
        get = getattr(self.backend, "limits", None)
        limits = get() if callable(get) else None
        if limits is None or not limits.known:
            return batch, {}
        est = [estimate_prompt_tokens(r.messages, r.json_schema()) for r in batch]
        unsure = [k for k, r in enumerate(batch) if (room := limits.room(est[k])) is not None
                  and r.sampling.max_tokens > room]
        counted = dict(zip(unsure, self._count_prompts([batch[k] for k in unsure]))) if unsure else {}
        out, refused = list(batch), {}
        for k in unsure:
            room, req = limits.room(counted[k]), batch[k]
            if room is None or req.sampling.max_tokens <= room:
                continue
            if room < 1:
                refused[k] = Completion(text="", over_limit=True, error=(
                    f"not sent: a prompt of {counted[k]:,} tokens {NO_ROOM} ({limits.describe()})"))
                continue
            out[k] = req.model_copy(update={"sampling": req.sampling.model_copy(update={"max_tokens": room})})
            tally.clamp(req.stage, pending[k].index)
            if (req.stage, "clamped") not in self._budget_notes:
                self._budget_notes.add((req.stage, "clamped"))
                log.info("reply budget of stage %r clamped to the model's limits: max_tokens %d -> %d (%s)",
                         req.stage, req.sampling.max_tokens, room, limits.describe())
        return out, refused

    def _count_prompts(self, batch: list[LLMRequest]) -> list[int]:
        count = getattr(self.backend, "count_prompts", None)
        if callable(count):
            return [int(n) for n in count(batch)]
        return [estimate_prompt_tokens(r.messages, r.json_schema()) for r in batch]

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
        if hit.finish_reason == OVER_LIMIT:  # a refusal: replayed as one, asked again by a live run
            return LLMResult(error=hit.error, over_limit=True, **common) if self.cache_mode == "replay_only" else None
        if hit.error is not None:
            if self.cache_mode != "replay_only" and (self.retry_failed or hit.error.startswith(LEGACY_ENGINE_ERROR)):
                return None  # (an engine failure an older version stored is asked again; a replay reproduces it)
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
        """The backend's completions for ``batch``. Items the engine gave no reply for (the call raised, or the
        item came back with an error that is not a refusal) are sent again after a back-off, at most
        ``engine_retries`` times; an item still without a reply keeps its error."""
        if not batch:
            return []
        out = self._call(batch)
        for retry in range(1, self.engine_retries + 1):
            todo = [i for i, c in enumerate(out) if c.error is not None and not c.refused]
            if not todo:
                break
            wait = backoff_s(self.engine_backoff_s, retry)
            log.warning("stage %r: the engine gave no reply for %d of %d request(s) (%s); retry %d of %d in %.1f s",
                        batch[todo[0]].stage, len(todo), len(batch), out[todo[0]].error, retry, self.engine_retries,
                        wait)
            time.sleep(wait)
            for i, c in zip(todo, self._call([batch[i] for i in todo])):
                out[i] = c
        return out

    def _call(self, batch: list[LLMRequest]) -> list[Completion]:
        """One ``backend.complete``; a raising call or a wrong count gives every item an error (no reply)."""
        try:
            out = list(self.backend.complete(batch))
        except SchemaDecodingRefused:  # a setting, not an item: the run stops and says so
            raise
        except Exception as exc:  # noqa: BLE001 - an engine exception: retried by _complete, then EngineFailure
            msg = f"{type(exc).__name__}: {exc}"[:MAX_ERR_CHARS]
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

    def _account(self, requests: list[LLMRequest], results: list[LLMResult | None], tally: _Tally,
                 wall: float) -> None:
        """Add this generate() call to the ledger, per stage (wall time split by item count)."""
        per_stage: dict[str, dict[str, float]] = {}
        for i, (req, res) in enumerate(zip(requests, results)):
            d = per_stage.setdefault(req.stage, Counter())
            d["calls"] += 1
            d["cache_hits"] += int(bool(res and res.cached))
            d["failures"] += int(bool(res and not res.ok))
            d["truncated"] += int(bool(res and res.truncated))
            d["salvaged"] += int(bool(res and res.salvaged))
            d["clamped_cut"] += int(bool(res and res.truncated and not res.cached and i in tally.clamped))
            d["over_limit"] += int(bool(res and res.cached and res.over_limit))  # a replayed refusal
        n = len(requests)
        for stage, d in per_stage.items():
            self.ledger.record(
                stage,
                calls=d["calls"], cache_hits=d["cache_hits"], failures=d["failures"],
                truncated=d["truncated"], salvaged=d["salvaged"],
                retries=tally.retries[stage],
                prompt_tokens=tally.tokens[(stage, "prompt")], completion_tokens=tally.tokens[(stage, "completion")],
                wall_s=wall * d["calls"] / n, batches=1,
                clamped=tally.tokens[(stage, "clamped")], clamped_cut=d["clamped_cut"],
                over_limit=tally.tokens[(stage, "over_limit")] + d["over_limit"], unconstrained=tally.tokens[(stage, "unconstrained")],
            )


@dataclass
class _Attempt:
    """One request on its way through the retry rounds: the messages to send next and what came back so far."""

    index: int
    messages: list[dict[str, str]]
    attempts: int = 0
    used: list[int] = field(default_factory=lambda: [0, 0])  # prompt / completion tokens over all attempts
    last_text: str = ""
    last_err: str | None = None
    last_finish: str | None = None

    def record(self, comp: Completion) -> None:
        self.used[0] += comp.prompt_tokens
        self.used[1] += comp.completion_tokens
        self.last_finish = comp.finish_reason


@dataclass
class _Tally:
    """Token and retry counts of one ``generate`` call, per stage."""

    tokens: Counter = field(default_factory=Counter)  # (stage, kind) -> count (tokens; clamped, refused requests)
    retries: Counter = field(default_factory=Counter)
    clamped: set[int] = field(default_factory=set)  # indexes of the requests sent with a clamped budget
    finished_last_round: int = 0

    def count(self, stage: str, comp: Completion) -> None:
        self.tokens[(stage, "prompt")] += comp.prompt_tokens
        self.tokens[(stage, "completion")] += comp.completion_tokens
        self.tokens[(stage, "over_limit")] += int(comp.over_limit)
        self.tokens[(stage, "unconstrained")] += int(comp.unconstrained)

    def clamp(self, stage: str, index: int) -> None:
        if index not in self.clamped:  # (a retry of a clamped request is the same request)
            self.tokens[(stage, "clamped")] += 1
            self.clamped.add(index)


def _dedupe(todo: list[int], keys: Sequence[str]) -> tuple[list[int], dict[int, int]]:
    """Identical requests inside one batch are sent once when caching is on (same key = same reply): the
    indexes to send and, for every other copy, the index it follows."""
    if not keys:
        return list(todo), {}
    leaders: dict[str, int] = {}
    send, followers = [], {}
    for i in todo:
        j = leaders.setdefault(keys[i], i)
        if j == i:
            send.append(i)
        else:
            followers[i] = j
    return send, followers


def _read_completion(req: LLMRequest, comp: Completion, a: _Attempt) -> tuple[LLMResult | None, list[dict[str, str]]]:
    """``(result, retry messages)`` of one completion: a result when the reply validates (or its complete items
    can be salvaged from a cut reply), else None and the messages that re-ask with the error (``a`` keeps the
    last reply and error)."""
    text = comp.text
    parsed, err = parse_reply(text, req.schema_)
    retry = list(req.messages) + [{"role": "assistant", "content": text},
                                  {"role": "user", "content": RETRY_INSTRUCTION.format(error=err)}]
    if err is None and comp.finish_reason == "length" and req.schema_ is None and not text:
        err = "empty reply (hit max_tokens)"
    cut = comp.finish_reason == "length"
    kept = None
    if err is not None and cut and req.salvage:
        kept = salvage(text, req.schema_)  # re-asking with the same budget would cut it again
    if err is None or kept is not None:
        return LLMResult(text=text, parsed=parsed if err is None else kept, prompt_tokens=a.used[0],
                         completion_tokens=a.used[1], retries=a.attempts, truncated=cut,
                         salvaged=err is not None), retry
    a.last_text, a.last_err = text, err
    return None, retry
