"""A run's caches as one compressed file, so a benchmark can be replayed on any machine, with no model.

The LLM response cache (``<cache_dir>/llm/responses.sqlite``: every request's final outcome, keyed by model,
prompt, schema and sampling), the token counts recorded beside it (``llm/token_counts.sqlite``,
:mod:`mnemis.models.token_counts`), the reranker score cache (``<cache_dir>/rerank/rerank.sqlite``), the embedding
cache (``<cache_dir>/embed/embed.sqlite``: each embedding call's float32 matrix, :mod:`mnemis.models.embed_cache`)
and the model identities of the embedder and reranker nodes (:mod:`mnemis.models.cache_identity`) hold everything
the models said and every float a replay would otherwise recompute. :func:`export_archive` writes them as
gzip-compressed JSON lines (an embedding call's matrix as base64 of its little-endian float32 bytes);
:func:`import_archive` loads them into a fresh cache dir, after which ``cache_mode=replay_only`` reruns the whole
run with no LLM or reranker call and no embedding computed (so no model is loaded, and the CPU's vector kernels no
longer change a prompt) and reproduces every figure.
"""

from __future__ import annotations

import base64
import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

from mnemis.models.cache import CachedReply, ResponseCache

LLM_DB = Path("llm") / "responses.sqlite"
TOKENS_DB = Path("llm") / "token_counts.sqlite"
RERANK_DB = Path("rerank") / "rerank.sqlite"
EMBED_DB = Path("embed") / "embed.sqlite"
_IDENTITY_DBS = {"embed": EMBED_DB, "rerank": RERANK_DB}
_LLM_COLS = ("key", "model", "stage", "text", "prompt_tokens", "completion_tokens", "error", "finish_reason", "retries")


def _rows(db: Path, sql: str) -> list[tuple]:
    from mnemis.sqlite_file import file_uri

    if not db.is_file():
        return []
    conn = sqlite3.connect(file_uri(db, "ro"), uri=True)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError as exc:  # a cache file without that table (written before it existed)
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


def _extra_rows(cache_dir: Path) -> list[dict[str, Any]]:
    """The archive lines of the embeddings, token counts and model identities of ``cache_dir``, sorted."""
    out: list[dict[str, Any]] = []
    for key, n, dim, vecs in _rows(cache_dir / EMBED_DB, "SELECT key, n, dim, vecs FROM calls ORDER BY key"):
        out.append({"kind": "embed", "key": key, "n": int(n), "dim": int(dim),
                    "vecs": base64.b64encode(bytes(vecs)).decode("ascii")})
    for key, n in _rows(cache_dir / TOKENS_DB, "SELECT key, n FROM counts ORDER BY key"):
        out.append({"kind": "tokens", "key": key, "n": int(n)})
    for cache, db in _IDENTITY_DBS.items():
        for node, identity, dim in _rows(cache_dir / db, "SELECT node, identity, dim FROM identities ORDER BY node"):
            out.append({"kind": "identity", "cache": cache, "node": node, "identity": identity, "dim": dim})
    return out


def export_archive(cache_dir: str | Path, path: str | Path) -> dict[str, int]:
    """Write the caches of ``cache_dir`` to ``path`` (gzip JSON lines, sorted by key, so the same cache gives the
    same file); returns the number of entries of each kind."""
    cache_dir, path = Path(cache_dir), Path(path)
    llm = _rows(cache_dir / LLM_DB, f"SELECT {', '.join(_LLM_COLS)} FROM responses ORDER BY key")
    rerank = _rows(cache_dir / RERANK_DB, "SELECT key, score FROM scores ORDER BY key")
    extra = _extra_rows(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as raw:
        for row in llm:
            raw.write((json.dumps({"kind": "llm", **dict(zip(_LLM_COLS, row))}, ensure_ascii=False) + "\n").encode())
        for key, score in rerank:
            raw.write((json.dumps({"kind": "rerank", "key": key, "score": score}) + "\n").encode())
        for row in extra:
            raw.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
    tmp.replace(path)
    return {"llm": len(llm), "rerank": len(rerank), **_counts(extra)}


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Entries per kind, the kinds present only."""
    n = {kind: sum(r["kind"] == kind for r in rows) for kind in ("embed", "tokens", "identity")}
    return {k: v for k, v in n.items() if v}


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
    from mnemis.sqlite_file import SQLiteFile

    cache_dir = Path(cache_dir)
    llm: list[tuple[str, str, str, CachedReply]] = []
    rerank: list[tuple[str, float]] = []
    extra: list[dict[str, Any]] = []
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
                elif row["kind"] in ("embed", "tokens", "identity"):
                    extra.append(_checked(row))
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
    _load_extra(extra, cache_dir)
    return {"llm": len(llm), "rerank": len(rerank), **_counts(extra)}


def _checked(row: dict[str, Any]) -> dict[str, Any]:
    """An embedding, token-count or identity line with its fields checked (ValueError/KeyError/TypeError)."""
    if row["kind"] == "embed":
        vecs = base64.b64decode(row["vecs"], validate=True)
        if len(vecs) != 4 * int(row["n"]) * int(row["dim"]):
            raise ValueError(f"embedding {row['key'][:16]}: {len(vecs)} bytes for {row['n']} x {row['dim']} float32")
        return {"kind": "embed", "key": str(row["key"]), "n": int(row["n"]), "dim": int(row["dim"]), "vecs": vecs}
    if row["kind"] == "tokens":
        n = row["n"]
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"token count {row['key'][:16]}: {n!r} is not a count")
        return {"kind": "tokens", "key": str(row["key"]), "n": n}
    if row["cache"] not in _IDENTITY_DBS:
        raise ValueError(f"identity of unknown cache {row['cache']!r}")
    return {"kind": "identity", "cache": row["cache"], "node": str(row["node"]), "identity": str(row["identity"]),
            "dim": None if row.get("dim") is None else int(row["dim"])}


def _load_extra(rows: list[dict[str, Any]], cache_dir: Path) -> None:
    from mnemis.models import cache_identity, embed_cache, token_counts
    from mnemis.sqlite_file import SQLiteFile

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"] if r["kind"] != "identity" else "identity:" + r["cache"], []).append(r)
    targets = {"embed": (EMBED_DB, embed_cache.SCHEMA,
                         "INSERT OR REPLACE INTO calls (key, n, dim, vecs) VALUES (?, ?, ?, ?)",
                         lambda r: (r["key"], r["n"], r["dim"], r["vecs"])),
               "tokens": (TOKENS_DB, token_counts.SCHEMA, "INSERT OR REPLACE INTO counts (key, n) VALUES (?, ?)",
                          lambda r: (r["key"], r["n"])),
               **{f"identity:{c}": (db, cache_identity.SCHEMA,
                                    "INSERT OR REPLACE INTO identities (node, identity, dim) VALUES (?, ?, ?)",
                                    lambda r: (r["node"], r["identity"], r["dim"])) for c, db in _IDENTITY_DBS.items()}}
    for kind, items in by_kind.items():
        db_path, schema, sql, values = targets[kind]
        (cache_dir / db_path).parent.mkdir(parents=True, exist_ok=True)
        with SQLiteFile(cache_dir / db_path) as db:
            db._create(schema)
            with db.transaction() as cur:
                cur.executemany(sql, [values(r) for r in items])
