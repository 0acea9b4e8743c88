"""OpenAI-compatible HTTP backend (``vllm serve``, hosted APIs): async fan-out behind the batch API.

Each ``complete()`` runs all requests concurrently (bounded by a semaphore) with exponential-backoff
retries on timeouts, connection errors, 429 and 5xx. Structured output uses ``response_format``
``json_schema``. An HTTP 400 is classified by its message (:func:`mnemis.models.llm.limits.classify_rejection`):
a limit error (``max_tokens`` above the cap, prompt + reply above the window) fails that item as ``over_limit``
and never changes the format; only an explicit refusal of ``response_format`` / ``json_schema`` switches the
backend, once and logged as an error, to ``json_object`` with the schema text appended to a copy of the messages
(every such request is marked ``unconstrained``), or, with ``response_format="json_schema_only"``, stops the run
(:class:`~mnemis.models.llm.limits.SchemaDecodingRefused`). A request that still has no reply after its
attempts (server gone, connection refused or reset, 5xx) fails the whole batch with :class:`NoReply`, as does a
batch unfinished after ``batch_timeout_s``: the client retries it and then stops the stage
(:mod:`mnemis.models.failures`). Other HTTP errors come back as ``Completion(error=...)``.

Limits (:meth:`OpenAIBackend.limits`): ``max_completion_tokens`` / ``max_model_len`` as configured, and the
``max_model_len`` a vLLM server reports on ``GET /v1/models`` (the smaller wins). Prompts are counted by a vLLM
server's ``POST /tokenize`` (with the chat template, as the request will be rendered) where the server reported
its window, otherwise by the estimate of :mod:`mnemis.models.llm.limits`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import random
from collections.abc import Sequence
from typing import Any

from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.limits import (
    ESTIMATE,
    FORMAT,
    LIMIT,
    ModelLimits,
    SchemaDecodingRefused,
    classify_rejection,
    estimate_prompt_tokens,
    smaller,
)

log = logging.getLogger(__name__)
FORMATS = ("json_schema", "json_schema_only", "json_object", "none")
SCHEMA_FORMATS = ("json_schema", "json_schema_only")


class NoReply(ConnectionError):
    """The server gave no reply to a request of the batch after every attempt, or the batch ran out of time."""


SCHEMA_HINT = "\n\nReply with only a JSON object that matches this JSON schema:\n{schema}"


class OpenAIBackend:
    """Backend over any OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        model: model name as the server knows it.
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: environment variable holding the key (missing -> "EMPTY", fine for vLLM).
        max_concurrency: requests in flight at once.
        timeout_s: per-request timeout.
        max_attempts: attempts per request for retryable errors.
        backoff_s: first backoff; doubles each attempt (with jitter).
        response_format: "json_schema" (switched once to json_object if the server explicitly refuses it),
            "json_schema_only" (such a refusal stops the run), "json_object" or "none".
        model_id: cache identity; defaults to ``openai:{model}`` (set it to the weights' identity,
            e.g. ``smollm2-135m-instruct@<hash>``, to share cache entries with local backends).
        extra_body: extra JSON fields for every request (e.g. vLLM's ``chat_template_kwargs``).
        max_completion_tokens: the model's completion cap (None: none stated).
        max_model_len: the model's window, prompt + reply (None: the server's ``GET /v1/models``, if it says).
        batch_timeout_s: time limit of a whole ``complete()`` call (None: none beyond ``timeout_s`` per request).
    """

    def __init__(self, model: str, base_url: str, *, api_key_env: str = "OPENAI_API_KEY",
                 max_concurrency: int = 16, timeout_s: float = 120.0, max_attempts: int = 4,
                 backoff_s: float = 1.0, response_format: str = "json_schema", model_id: str | None = None,
                 extra_body: dict[str, Any] | None = None, max_completion_tokens: int | None = None,
                 max_model_len: int | None = None, batch_timeout_s: float | None = None) -> None:
        if response_format not in FORMATS:
            raise ValueError(f"response_format must be one of {FORMATS}, got {response_format!r}")
        if max_concurrency < 1 or max_attempts < 1:
            raise ValueError("max_concurrency and max_attempts must be >= 1")
        self.model = model
        self.base_url = base_url
        self.api_key = os.environ.get(api_key_env) or "EMPTY"
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.response_format = response_format
        self.extra_body = dict(extra_body or {})
        self.batch_timeout_s = batch_timeout_s
        self.model_id = model_id or f"openai:{model}"
        self._stated = ModelLimits(max_completion_tokens, max_model_len, "config")  # checks the values
        self._limits: ModelLimits | None = None  # once the server has been asked
        self.format_downgrade: str | None = None  # the server's refusal, when json_schema was switched off

    # ------------------------------------------------------------------ request building
    def _payload(self, request: LLMRequest) -> dict[str, Any]:
        s = request.sampling
        schema = request.json_schema()
        messages = [dict(m) for m in request.messages]
        kwargs: dict[str, Any] = dict(model=self.model, temperature=s.temperature, top_p=s.top_p,
                                      max_tokens=s.max_tokens, seed=s.seed)
        if schema is not None:
            if self.response_format in SCHEMA_FORMATS:
                name = (request.schema_.__name__ if request.schema_ else "output")[:64]
                kwargs["response_format"] = {"type": "json_schema",
                                             "json_schema": {"name": name, "schema": schema, "strict": True}}
            else:
                hint = SCHEMA_HINT.format(schema=json.dumps(schema))
                if messages and messages[-1].get("role") == "user":
                    messages[-1]["content"] = messages[-1].get("content", "") + hint
                else:
                    messages.append({"role": "user", "content": hint.strip()})
                if self.response_format == "json_object":
                    kwargs["response_format"] = {"type": "json_object"}
        kwargs["messages"] = messages
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    # ------------------------------------------------------------------ async core
    async def _one(self, client, sem: asyncio.Semaphore, request: LLMRequest) -> Completion:
        import openai

        attempt = 0
        last = "no attempt"
        while attempt < self.max_attempts:
            attempt += 1
            mode = self.response_format
            try:
                async with sem:
                    resp = await client.chat.completions.create(**self._payload(request))
            except openai.BadRequestError as exc:
                kind = classify_rejection(*_error_fields(exc))
                if kind == FORMAT and mode in SCHEMA_FORMATS and request.json_schema() is not None:
                    self._refused_schema(exc)
                    attempt -= 1  # the switch is not a failed attempt (happens once per request)
                    continue
                # the server refused this very request: the item fails (a limit refusal is never cached), the stage goes on
                return Completion(text="", error=f"HTTP 400 ({kind}): {exc}"[:1000], over_limit=kind == LIMIT,
                                  refused=True)
            except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
                    openai.InternalServerError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            except openai.APIStatusError as exc:
                if exc.status_code >= 500 or exc.status_code in (408, 409, 429):
                    last = f"HTTP {exc.status_code}: {exc}"
                else:
                    return Completion(text="", error=f"HTTP {exc.status_code}: {exc}"[:1000])
            except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, TypeError) as exc:
                last = f"malformed response: {type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - never raise out of the batch
                return Completion(text="", error=f"{type(exc).__name__}: {exc}"[:1000])
            else:
                try:
                    choice = resp.choices[0]
                    usage = resp.usage
                    return Completion(
                        text=choice.message.content or "",
                        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                        finish_reason=choice.finish_reason,
                        unconstrained=mode not in SCHEMA_FORMATS and request.json_schema() is not None,
                    )
                except Exception as exc:  # noqa: BLE001 - e.g. a body without choices
                    last = f"malformed response: {type(exc).__name__}: {exc}"
            if attempt < self.max_attempts:
                await asyncio.sleep(self.backoff_s * (2 ** (attempt - 1)) * (1 + 0.1 * random.random()))
        raise NoReply(f"no reply after {self.max_attempts} attempts: {last}"[:1000])

    async def _run(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        import openai

        sem = asyncio.Semaphore(self.max_concurrency)
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s,
                                    max_retries=0)
        try:
            batch = asyncio.gather(*(self._one(client, sem, r) for r in requests))
            return list(await asyncio.wait_for(batch, self.batch_timeout_s))
        except asyncio.TimeoutError:
            raise NoReply(f"a batch of {len(requests)} requests was unfinished after {self.batch_timeout_s} s") \
                from None
        finally:
            await client.close()

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        requests = list(requests)
        if not requests:
            return []
        return self._sync(self._run(requests))

    # ------------------------------------------------------------------ format refusal
    def _refused_schema(self, exc: Exception) -> None:
        """The server explicitly refused ``response_format=json_schema``: stop (``json_schema_only``) or switch
        this backend to ``json_object`` once, logged as an error (every later schema request is counted as
        ``unconstrained`` in the ledger)."""
        if self.response_format == "json_schema_only":
            raise SchemaDecodingRefused(
                f"{self.base_url} refused schema-constrained decoding ({exc}); llm.backend.response_format="
                "json_schema_only forbids decoding without the schema: serve a model and server that take "
                "response_format json_schema, or set response_format=json_schema to fall back to json_object")
        if self.response_format == "json_schema":
            self.response_format = "json_object"
            self.format_downgrade = str(exc)[:500]
            log.error("%s refused response_format=json_schema (%s): every later schema request of this run is sent "
                      "as json_object with the schema in the prompt, decoded WITHOUT the schema (counted as "
                      "'unconstrained' in the ledger; llm.backend.response_format=json_schema_only stops instead)",
                      self.base_url, exc)

    # ------------------------------------------------------------------ limits
    def limits(self) -> ModelLimits:
        """The configured limits, narrowed by the window the server reports (``GET /v1/models``, vLLM's
        ``max_model_len``); asked once (again on the next call while the server cannot be reached)."""
        if self._limits is None:
            reported = self._server_window()
            if reported is False:
                return self._stated
            source = "config" if reported is None else (
                "server" if not self._stated.known else "config and server (smaller of each)")
            self._limits = ModelLimits(self._stated.max_completion_tokens,
                                       smaller(self._stated.max_model_len, reported or None),
                                       source if (self._stated.known or reported) else "none",
                                       "the server's /tokenize" if reported else ESTIMATE)
            log.info("%s %s: %s", self.base_url, self.model, self._limits.describe())
        return self._limits

    def _root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")

    def _server_window(self) -> int | None | bool:
        """The ``max_model_len`` the server reports for this model; None if it reports none; False if it could
        not be asked."""
        import httpx

        try:
            resp = httpx.get(self.base_url.rstrip("/") + "/models", timeout=self.timeout_s,
                             headers={"Authorization": f"Bearer {self.api_key}"})
            resp.raise_for_status()
            rows = resp.json().get("data") or []
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning("could not read the model's limits from %s/models (%s); using the configured ones",
                        self.base_url, exc)
            return False
        row = next((r for r in rows if isinstance(r, dict) and r.get("id") == self.model), None)
        value = (row or {}).get("max_model_len")
        return int(value) if isinstance(value, int) and value > 0 else None

    def count_prompts(self, requests: Sequence[LLMRequest]) -> list[int]:
        """Prompt tokens of ``requests`` as they will be sent: the server's ``/tokenize`` (vLLM) where it
        reported its window, else the estimate (an upper bound; :mod:`mnemis.models.llm.limits`)."""
        payloads = [self._payload(r) for r in requests]
        estimates = [estimate_prompt_tokens(p["messages"]) for p in payloads]
        if not requests or self.limits().prompt_count == ESTIMATE:
            return estimates
        try:
            return self._tokenize([p["messages"] for p in payloads])
        except Exception as exc:  # noqa: BLE001 - counting must not fail the batch: the bound still holds
            log.warning("%s/tokenize failed (%s); prompts counted by the estimate", self._root(), exc)
            return estimates

    def _tokenize(self, conversations: list[list[dict[str, Any]]]) -> list[int]:
        import httpx

        extra = {k: v for k, v in self.extra_body.items() if k == "chat_template_kwargs"}

        async def run() -> list[int]:
            sem = asyncio.Semaphore(self.max_concurrency)
            async with httpx.AsyncClient(timeout=self.timeout_s,
                                         headers={"Authorization": f"Bearer {self.api_key}"}) as client:
                async def one(messages: list[dict[str, Any]]) -> int:
                    async with sem:
                        resp = await client.post(self._root() + "/tokenize", json={
                            "model": self.model, "messages": messages, "add_generation_prompt": True, **extra})
                    resp.raise_for_status()
                    return int(resp.json()["count"])

                return list(await asyncio.gather(*(one(m) for m in conversations)))

        return self._sync(run())

    @staticmethod
    def _sync(coro):
        """Run ``coro`` to its end: on a fresh loop, or, called from inside an event loop (notebook, async app),
        on a private loop in a thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()


def _error_fields(exc: Exception) -> tuple[str, str | None, str | None]:
    """``(message, param, code)`` of an OpenAI-style error body (``{"error": {...}}`` or the inner object)."""
    body = getattr(exc, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(inner, dict):
        return str(exc), None, None
    param, code = inner.get("param"), inner.get("code")
    return (str(inner.get("message") or exc), None if param is None else str(param),
            None if code is None else str(code))
