"""A run's response caches as one compressed file, so a benchmark can be replayed on any machine.

The LLM response cache (``<cache_dir>/llm/responses.sqlite``: every request's final outcome, keyed by model,
prompt, schema and sampling) and the reranker score cache (``<cache_dir>/rerank/rerank.sqlite``) hold everything
the models said during a run. :func:`export_archive` writes both as gzip-compressed JSON lines;
:func:`import_archive` loads them into a fresh cache dir, after which ``cache_mode=replay_only`` reruns the whole
run with no LLM or reranker call (a miss is an error) and reproduces every figure.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

from mnemis.models.cache import CachedReply, ResponseCache

LLM_DB = Path("llm") / "responses.sqlite"
RERANK_DB = Path("rerank") / "rerank.sqlite"
_LLM_COLS = ("key", "model", "stage", "text", "prompt_tokens", "completion_tokens", "error", "finish_reason", "retries")


def _rows(db: Path, sql: str) -> list[tuple]:
    from mnemis.store.connection import file_uri

    if not db.is_file():
        return []
    conn = sqlite3.connect(file_uri(db, "ro"), uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def export_archive(cache_dir: str | Path, path: str | Path) -> dict[str, int]:
    """Write the LLM and reranker caches of ``cache_dir`` to ``path`` (gzip JSON lines, sorted by key, so the
    same cache gives the same file); returns the number of entries of each kind."""
    cache_dir, path = Path(cache_dir), Path(path)
    llm = _rows(cache_dir / LLM_DB, f"SELECT {', '.join(_LLM_COLS)} FROM responses ORDER BY key")
    rerank = _rows(cache_dir / RERANK_DB, "SELECT key, score FROM scores ORDER BY key")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as raw:
        for row in llm:
            raw.write((json.dumps({"kind": "llm", **dict(zip(_LLM_COLS, row))}, ensure_ascii=False) + "\n").encode())
        for key, score in rerank:
            raw.write((json.dumps({"kind": "rerank", "key": key, "score": score}) + "\n").encode())
    tmp.replace(path)
    return {"llm": len(llm), "rerank": len(rerank)}


def stage_counts(cache_dir: str | Path) -> dict[str, dict[str, int]]:
    """Per stage, the replies the LLM cache of ``cache_dir`` holds: how many, their prompt and completion tokens,
    and how many were cut at ``max_tokens`` (what a stopped run had done, read without any model)."""
    rows = _rows(Path(cache_dir) / LLM_DB, "SELECT stage, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), "
                 "SUM(finish_reason = 'length') FROM responses GROUP BY stage ORDER BY stage")
    return {stage: {"replies": n, "prompt_tokens": int(pt or 0), "completion_tokens": int(ct or 0), "cut": int(cut or 0)}
            for stage, n, pt, ct, cut in rows}


def import_archive(path: str | Path, cache_dir: str | Path) -> dict[str, int]:
    """Load an archive into ``cache_dir`` (its LLM and reranker caches; existing entries are replaced)."""
    from mnemis.models.rerank_cache import SCHEMA
    from mnemis.store.connection import SQLiteFile

    cache_dir = Path(cache_dir)
    llm: list[tuple[str, str, str, CachedReply]] = []
    rerank: list[tuple[str, float]] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            try:
                row: dict[str, Any] = json.loads(line)
                if row["kind"] == "llm":
                    llm.append((row["key"], row["model"], row.get("stage") or "", CachedReply(
                        row["text"], int(row.get("prompt_tokens") or 0), int(row.get("completion_tokens") or 0),
                        row.get("error"), row.get("finish_reason"), int(row.get("retries") or 0))))
                elif row["kind"] == "rerank":
                    rerank.append((row["key"], float(row["score"])))
                else:
                    raise ValueError(f"unknown kind {row['kind']!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: line {n}: {exc}") from None
    cache = ResponseCache(cache_dir / "llm")
    try:
        cache.put_many(llm)
    finally:
        cache.close()
    if rerank:
        with SQLiteFile(cache_dir / RERANK_DB) as db:
            db._create(SCHEMA)
            with db.transaction() as cur:
                cur.executemany("INSERT OR REPLACE INTO scores (key, score) VALUES (?, ?)", rerank)
    return {"llm": len(llm), "rerank": len(rerank)}
