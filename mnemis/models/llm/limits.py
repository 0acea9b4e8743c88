"""What a served model accepts, and how a server says a request asked for more.

Every model has a **completion cap** (the most tokens one reply may have: GPT-4.1-mini 32,768) and a **window**
(prompt + reply: GPT-4.1-mini 1,047,576; a vLLM engine its ``max_model_len``). A request may ask for at most

    room = min(max_completion_tokens, max_model_len - prompt tokens)

(:meth:`ModelLimits.room`). The client (:mod:`mnemis.models.llm.client`) lowers a budget above ``room`` to it
before sending (a *clamp*, counted per stage in the ledger) and sends no request whose prompt alone fills the
window. Limits come from the backend: stated in its config (``max_completion_tokens`` / ``max_model_len``) and,
for an OpenAI-compatible server, read from ``GET /v1/models`` (vLLM reports ``max_model_len`` there); where both
exist the smaller wins.

Prompt tokens are counted with the model's tokenizer where the backend has one (in-process vLLM and transformers,
a vLLM server's ``POST /tokenize``); otherwise, and as the cheap first test of every request, by the
**estimate** :func:`estimate_prompt_tokens`: UTF-8 bytes of the messages (and of the reply schema, which a
``json_object`` backend appends to the prompt) plus ``PER_MESSAGE_TOKENS`` per message and ``FIXED_TOKENS``
for the chat template. It is an upper bound for byte-level BPE and byte-fallback vocabularies (GPT-4o's,
Qwen3's, SmolLM2's, Llama's): each token stands for at least one byte, and the markers a chat template adds
per message, or a default system prompt it inserts, fit the allowances.

A server's HTTP 400 is classified by its message (:func:`classify_rejection`): a **limit** error (a
``max_tokens`` above the cap, a prompt + reply above the window, in the OpenAI API's or vLLM's wording) is
never a reason to change the reply format; only an explicit refusal of ``response_format`` / ``json_schema``
is a **format** error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PER_MESSAGE_TOKENS = 16
FIXED_TOKENS = 64
ESTIMATE = f"estimate (UTF-8 bytes + {PER_MESSAGE_TOKENS} a message + {FIXED_TOKENS})"


# the words of a request refused before sending because its prompt alone fills the window (a caller that can
# shorten its prompt, e.g. System-2 by splitting a page, reads a refusal by them as a window error)
NO_ROOM = "leaves no room for a reply"


@dataclass(frozen=True)
class ModelLimits:
    """A served model's completion cap and window (None = not known / none), where they come from and how
    prompts are counted against them."""

    max_completion_tokens: int | None = None
    max_model_len: int | None = None
    source: str = "none"
    prompt_count: str = ESTIMATE

    def __post_init__(self) -> None:
        for name in ("max_completion_tokens", "max_model_len"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or null, got {value!r} ({self.source})")

    @property
    def known(self) -> bool:
        return self.max_completion_tokens is not None or self.max_model_len is not None

    def room(self, prompt_tokens: int) -> int | None:
        """The largest ``max_tokens`` a request with this many prompt tokens may ask for (None: no limit)."""
        caps = [c for c in (self.max_completion_tokens,
                            None if self.max_model_len is None else self.max_model_len - prompt_tokens)
                if c is not None]
        return min(caps) if caps else None

    def describe(self) -> str:
        cap = "none" if self.max_completion_tokens is None else f"{self.max_completion_tokens:,}"
        win = "none" if self.max_model_len is None else f"{self.max_model_len:,}"
        return f"completion cap {cap}, window {win} ({self.source}; prompts counted by {self.prompt_count})"


def smaller(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional limits (None = no limit)."""
    return b if a is None else a if b is None else min(a, b)


def stated_limits(max_completion_tokens: int | None, max_model_len: int | None, *, source: str = "config",
                  prompt_count: str = ESTIMATE) -> ModelLimits:
    """Limits stated in a backend's config (checked: positive integers or null)."""
    known = max_completion_tokens is not None or max_model_len is not None
    return ModelLimits(max_completion_tokens, max_model_len, source if known else "none", prompt_count)


def estimate_prompt_tokens(messages: Sequence[dict[str, Any]], schema: dict[str, Any] | None = None) -> int:
    """An upper bound on the prompt tokens of ``messages`` (see the module docstring); ``schema`` counts too
    (a ``json_object`` backend appends it to the prompt)."""
    size = sum(len(str(m.get("content") or "").encode("utf-8")) + len(str(m.get("role") or "")) for m in messages)
    if schema is not None:
        size += len(json.dumps(schema).encode("utf-8")) + 80  # the appended instruction line
    return size + PER_MESSAGE_TOKENS * len(messages) + FIXED_TOKENS


# --------------------------------------------------------------------------------------- HTTP 400 classes
LIMIT, FORMAT, OTHER = "limit", "format", "other"
# The OpenAI API: "max_tokens is too large: 56779. This model supports at most 32768 completion tokens, whereas
# you provided 56779." / "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens
# (64 in the messages, 8192 in the completion). ..." (code context_length_exceeded). vLLM 0.32's server:
# "max_tokens=40000 cannot be greater than max_model_len=32768. Please request fewer output tokens." / "This
# model's maximum context length is 2048 tokens. However, your prompt contains 2100 input tokens, ..." /
# "Input length (2100) exceeds model's maximum context length (2048)." / "The decoder prompt (length 2100) is
# longer than the maximum model length of 2048."; older vLLM: "'max_tokens' or 'max_completion_tokens' is too
# large: 64000. This model's maximum context length is 64001 tokens and your request has 24235 input tokens".
_LIMIT = re.compile(
    r"maximum context length|context[_ ]length|max_model_len|maximum model length|context window"
    r"|(max_tokens|max_completion_tokens|max_output_tokens)\W.{0,40}(too large|cannot be greater|exceed|at most)"
    r"|supports at most \d+ completion tokens|input length|too many tokens|prompt is too long",
    re.IGNORECASE | re.DOTALL)
# "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model." / "invalid
# value: `json_schema`, supported values are: `json_object` and `text`" (param response_format.type) /
# "Unsupported parameter: 'response_format'"
# (a schema the grammar compiler cannot take names neither the parameter nor the quoted type: not a format refusal)
_FORMAT_NAMED = re.compile(r"response_format|['`\"]json_schema['`\"]", re.IGNORECASE)
_FORMAT_REFUSED = re.compile(r"not supported|unsupported|invalid value|supported values|not allowed|unrecognized"
                             r"|is not valid", re.IGNORECASE)


def classify_rejection(message: str, param: str | None = None, code: str | None = None) -> str:
    """``limit``, ``format`` or ``other`` for a server's HTTP 400 (its message, ``param`` and ``code``)."""
    text = " ".join(str(x) for x in (message, param or "", code or ""))
    if (code or "") in ("context_length_exceeded", "string_above_max_length") or _LIMIT.search(text):
        return LIMIT
    names_format = bool(_FORMAT_NAMED.search(message)) or str(param or "").startswith("response_format")
    if names_format and _FORMAT_REFUSED.search(message):
        return FORMAT
    return OTHER


class SchemaDecodingRefused(RuntimeError):
    """The server refused schema-constrained decoding and the config forbids another format
    (``response_format: json_schema_only``): the run stops rather than decode without the schema."""
