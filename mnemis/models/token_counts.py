"""Token counts recorded beside the response cache, so a replay counts tokens without the model's tokenizer.

A run that fits text to a model window (the full-context baseline) counts tokens with the model's tokenizer. To
replay that run with no model installed, the counts it used are recorded in ``<llm cache dir>/token_counts.sqlite``
(keyed by sha256(model identity, text)) and travel in the run's archive (:mod:`mnemis.models.cache_archive`).
:func:`recorded_counter` gives the counter for an LLM client: a ``readwrite`` run counts as it always did
(:func:`token_counter`: the model's tokenizer, else ~4 characters a token) and records what it counted; a
``replay_only`` run reads the recorded counts, and a text with none is a :class:`~mnemis.models.cache.CacheMissError`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mnemis.models.cache import CacheMissError
from mnemis.sqlite_file import SQLiteFile

DB_NAME = "token_counts.sqlite"
SCHEMA = "CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL)"
STAGE = "token_count"  # what a replay miss names
_LOOKUP_CHUNK = 500
CHARS_PER_TOKEN = 4.0
TokenCounter = Callable[[Sequence[str]], list[int]]


def estimate_tokens(texts: Sequence[str]) -> list[int]:
    """~4 characters per token (the fallback counter)."""
    return [max(1, math.ceil(len(t) / CHARS_PER_TOKEN)) for t in texts]


def _find_tokenizer(llm: Any) -> Any | None:
    """A HF-style tokenizer reachable from an LLM client or backend (duck-typed), else None."""
    candidates = [llm, getattr(llm, "backend", None)]
    candidates.append(getattr(candidates[-1], "_llm", None))  # the vllm.LLM engine, if started
    for obj in candidates:
        if obj is None:
            continue
        tok = getattr(obj, "tokenizer", None)
        if tok is not None and hasattr(tok, "encode"):
            return tok
        get = getattr(obj, "get_tokenizer", None)
        if callable(get):
            try:
                tok = get()
            except Exception:  # noqa: BLE001 - fall back to the estimate
                continue
            if tok is not None and hasattr(tok, "encode"):
                return tok
    return None


def token_counter(llm: Any = None, tokenizer: Any = None) -> TokenCounter:
    """Counter using ``tokenizer`` (object with ``encode`` or a path/HF id), the LLM's tokenizer, or the estimate."""
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    tok = tokenizer if tokenizer is not None else (_find_tokenizer(llm) if llm is not None else None)
    if tok is None:
        return estimate_tokens
    return lambda texts: [len(tok.encode(t, add_special_tokens=False)) for t in texts]




def count_key(identity: str, text: str) -> str:
    blob = json.dumps([identity, text], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def lookup(db: SQLiteFile, keys: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    uniq = list(dict.fromkeys(keys))
    for s in range(0, len(uniq), _LOOKUP_CHUNK):
        chunk = uniq[s : s + _LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        out.update((k, int(n)) for k, n in db._rows(f"SELECT key, n FROM counts WHERE key IN ({marks})", chunk))
    return out


def record(db: SQLiteFile, counts: dict[str, int]) -> None:
    with db.transaction() as cur:
        cur.executemany("INSERT OR REPLACE INTO counts (key, n) VALUES (?, ?)", list(counts.items()))


def recorded_counter(llm: Any) -> Callable[[Sequence[str]], list[int]] | None:
    """The token counter of ``llm`` (an :class:`~mnemis.models.llm.client.LLM`) that records its counts in the
    LLM's cache dir (readwrite) or reads them from there (replay_only); None when the client has no cache."""
    cache = getattr(llm, "cache", None)
    if cache is None:
        return None
    path = Path(cache.dir) / DB_NAME
    identity = llm.model_id
    replay = llm.cache_mode == "replay_only"

    def count(texts: Sequence[str]) -> list[int]:
        keys = [count_key(identity, t) for t in texts]
        with SQLiteFile(path) as db:
            db._create(SCHEMA)
            if replay:
                known = lookup(db, keys)
                missing = [k for k in keys if k not in known]
                if missing:
                    raise CacheMissError(STAGE, len(set(missing)), missing[0])
                return [known[k] for k in keys]
            sizes = [int(n) for n in token_counter(llm)(list(texts))]
            record(db, dict(zip(keys, sizes)))
            return sizes

    return count
