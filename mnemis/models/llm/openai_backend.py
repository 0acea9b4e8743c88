"""OpenAI-compatible HTTP backend (``vllm serve``, hosted APIs): async fan-out behind the batch API.

Each ``complete()`` runs all requests concurrently (bounded by a semaphore) with exponential-backoff
retries on timeouts, connection errors, 429 and 5xx. Structured output uses ``response_format``
``json_schema``; a server that rejects it (HTTP 400) is switched to ``json_object`` with the schema
text appended to a copy of the messages, for the rest of the run. A request that still has no reply after its
attempts (server gone, connection refused or reset, 5xx) fails the whole batch with :class:`NoReply`, as does a
batch unfinished after ``batch_timeout_s``: the client retries it and then stops the stage
(:mod:`mnemis.models.failures`). Other HTTP errors come back as ``Completion(error=...)``.
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

log = logging.getLogger(__name__)
FORMATS = ("json_schema", "json_object", "none")


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
        response_format: "json_schema", "json_object" or "none".
        model_id: cache identity; defaults to ``openai:{model}`` (set it to the weights' identity,
            e.g. ``smollm2-135m-instruct@<hash>``, to share cache entries with local backends).
        extra_body: extra JSON fields for every request (e.g. vLLM's ``chat_template_kwargs``).
        batch_timeout_s: time limit of a whole ``complete()`` call (None: none beyond ``timeout_s`` per request).
    """

    def __init__(self, model: str, base_url: str, *, api_key_env: str = "OPENAI_API_KEY",
                 max_concurrency: int = 16, timeout_s: float = 120.0, max_attempts: int = 4,
                 backoff_s: float = 1.0, response_format: str = "json_schema", model_id: str | None = None,
                 extra_body: dict[str, Any] | None = None, batch_timeout_s: float | None = None) -> None:
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

    # ------------------------------------------------------------------ request building
    def _payload(self, request: LLMRequest) -> dict[str, Any]:
        s = request.sampling
        schema = request.json_schema()
        messages = [dict(m) for m in request.messages]
        kwargs: dict[str, Any] = dict(model=self.model, temperature=s.temperature, top_p=s.top_p,
                                      max_tokens=s.max_tokens, seed=s.seed)
        if schema is not None:
            if self.response_format == "json_schema":
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
                if mode == "json_schema" and request.schema_ is not None:
                    if self.response_format == "json_schema":
                        log.warning("server rejected response_format=json_schema (%s); using json_object", exc)
                        self.response_format = "json_object"
                    attempt -= 1  # the fallback is not a failed attempt (happens once per request)
                    continue
                return Completion(text="", error=f"HTTP 400: {exc}"[:1000])
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
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._run(requests))
        # called from inside an event loop (notebook, async app): run on a private loop in a thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self._run(requests)).result()
