"""Shards sharing one response cache dir: concurrent writers never corrupt it, and repeated extraction
prompts (filler sessions shared by haystacks) are computed once and replayed, per stage in the ledger."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from mnemis.models.cache import ResponseCache
from mnemis.testing.synth import SynthSpec, write_lme
from mnemis.store.sqlite import GraphStore

SPEC = SynthSpec(groups=6, sessions_per_haystack=3, pool_size=2, overlap=1.0, turns_per_session=6, words_per_turn=4)
WRITER = textwrap.dedent("""
    import sys, time
    from mnemis.models.cache import CachedReply, ResponseCache
    cache, me, n = ResponseCache(sys.argv[1], busy_timeout_s=60), int(sys.argv[2]), int(sys.argv[3])
    print("READY", flush=True)
    while time.time() < float(sys.argv[4]):
        time.sleep(0.01)
    for k in range(n):  # every writer writes the shared keys and its own, in small transactions
        cache.put_many([(f"shared-{k}", "m", "s", CachedReply(f"v{k}", k, 1)),
                        (f"own-{me}-{k}", "m", "s", CachedReply(f"w{me}-{k}", k, 2))])
        got = cache.get_many([f"shared-{k}"])
        assert got[f"shared-{k}"].text == f"v{k}", got
    print("DONE", flush=True)
""")


def _graph(db: Path) -> dict:
    with GraphStore(db) as store:
        groups = sorted(store.groups())
        return {g: {"entities": sorted(e.name for e in store.entities(g)),
                    "facts": sorted((f.fact, tuple(sorted(f.episode_ids))) for f in store.facts(g)),
                    "counts": store.counts(g)} for g in groups}


def _runner(data: Path, shard: str, work: Path, cache: str, tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mnemis.testing.runner", str(data), shard, str(work / f"{tag}.db"),
                             cache, str(work / f"{tag}.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0 and "DONE" in out, err[-3000:]


def test_concurrent_writers_do_not_corrupt_the_cache(tmp_path):
    import time

    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "c"), str(i), "150", str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    _wait(procs)
    cache = ResponseCache(tmp_path / "c")
    assert len(cache) == 150 + 3 * 150
    got = cache.get_many([f"own-{i}-{k}" for i in range(3) for k in range(150)])
    assert all(got[f"own-{i}-{k}"].text == f"w{i}-{k}" for i in range(3) for k in range(150))
    con = sqlite3.connect(cache.path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_shards_sharing_a_cache_reuse_extraction_and_match_an_uncached_build(tmp_path):
    data = write_lme(SPEC, tmp_path / "lme.json")
    cache = str(tmp_path / "shared-cache")
    _wait([_runner(data, "all", tmp_path, "none", "ref")])  # no cache at all: the reference graph
    _wait([_runner(data, s, tmp_path, cache, f"s{i}") for i, s in enumerate(("0/2", "1/2"))])  # at the same time
    ref = json.loads((tmp_path / "ref.json").read_text())
    shards = [json.loads((tmp_path / f"s{i}.json").read_text()) for i in range(2)]
    assert ref["ledger"]["total"]["cache_hits"] == 0
    # the graphs are the same whether prompts were computed or replayed from another shard's cache entries
    assert {**shards[0]["counts"], **shards[1]["counts"]} == ref["counts"]
    merged_graph = {**_graph(tmp_path / "s0.db"), **_graph(tmp_path / "s1.db")}
    assert merged_graph == _graph(tmp_path / "ref.db") and merged_graph
    # reuse is counted per stage: every haystack holds the same 2 pool sessions, so most extraction
    # prompts were computed once (turns whose context window reaches into another session are not shared)
    for stage in ("extract_entities", "extract_facts"):
        sent = sum(s["ledger"]["stages"][stage]["calls"] - s["ledger"]["stages"][stage]["cache_hits"] for s in shards)
        ref_sent = ref["ledger"]["stages"][stage]["calls"]
        assert sent < 0.6 * ref_sent, (stage, sent, ref_sent)
        assert sum(s["ledger"]["stages"][stage]["cache_hits"] for s in shards) == ref_sent - sent
    # a third process replays everything: every extraction request is a cache hit
    _wait([_runner(data, "all", tmp_path, cache, "again")])
    again = json.loads((tmp_path / "again.json").read_text())
    for stage in ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts"):
        st = again["ledger"]["stages"][stage]
        assert st["cache_hits"] == st["calls"] > 0 and st["prompt_tokens"] == 0
    con = sqlite3.connect(Path(cache) / "responses.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_memoised_schemas_keep_cache_keys():
    """Request JSON schemas are built once per class, and the memoised dict keys the cache like a fresh one."""
    from mnemis.models.cache import request_key
    from mnemis.models.llm.base import LLMRequest
    from mnemis.prompts.extract_entities import ExtractedEntities

    reqs = [LLMRequest(messages=[{"role": "user", "content": f"message {k}"}], schema=s, stage="x")
            for k in range(3) for s in (ExtractedEntities, None)]
    assert reqs[0].json_schema() is reqs[2].json_schema()  # memoised: one dict per schema class
    assert reqs[0].json_schema() == ExtractedEntities.model_json_schema()
    keys = [request_key("m", r) for r in reqs]
    assert len(set(keys)) == len(keys)  # the schema (or its absence) is part of the key
    same = LLMRequest(messages=[{"role": "user", "content": "message 0"}], schema=ExtractedEntities, stage="x")
    assert request_key("m", same) == keys[0]  # a new request object, the same key
