"""The paper's API route against a stub that keeps a served model's limits: how many requests ask for more than
the model allows (the stub refuses them with HTTP 400, in the API's own words) and how many schema requests lose
schema-constrained decoding (sent without ``response_format`` ``json_schema``).

    python experiments/bench/api_route_probe.py --out experiments/results/api_route_probe.json \
        --before-code /path/to/a/checkout/before/the/change   # optional: the same probe on that code too

The paper run (``experiment=paper_locomo_k10``: paper mode with its ``auto`` reply budgets, each stage's schema
worst case) on the quickstart's slice (LoCoMo conv-26, session 1) with ``llm=openai_compat`` (hashing embedder,
cosine reranker: the probe is about LLM requests; our base-graph builder, whose requests go through our LLM layer)
runs once per profile against a stub on 127.0.0.1:

- ``gpt-4.1-mini``: the OpenAI API's limits for GPT-4.1-mini (32,768 completion tokens, a 1,047,576-token window),
  its refusal wording, a ``GET /v1/models`` without a window, no ``/tokenize``;
- ``served-32k``: a vLLM server with ``--max-model-len 32768`` (its wording, ``max_model_len`` on ``GET
  /v1/models``, ``POST /tokenize``); stricter than vLLM 0.32, which would cut a ``max_tokens`` above the window
  less the prompt without a word: the stub refuses it, in older vLLM's wording.

The stub counts one token per UTF-8 byte of the chat as a template renders it: the most a byte-level BPE
vocabulary can need, so it is stricter than any real tokenizer. Its replies are schema instances with up to
``FILL`` items per list and distinct words, so extraction lists many names and the schema's worst cases grow as
on real conversations.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import HEALTH_FILE, LEDGER_FILE

REPO = Path(__file__).resolve().parents[2]
FILL = 10
PROFILES: dict[str, dict[str, Any]] = {
    "gpt-4.1-mini": {"model": "gpt-4.1-mini", "cap": 32_768, "window": 1_047_576, "wording": "openai"},
    "served-32k": {"model": "Qwen/Qwen3-8B", "cap": None, "window": 32_768, "wording": "vllm"},
}
# the paper run (paper mode, its `auto` reply budgets: each stage's schema worst case) on the quickstart's slice;
# hashing embedder and cosine reranker, as the probe is about LLM requests; our batched base-graph builder
# (ingest.builder=mnemis), whose requests go through our LLM layer (graphiti-core's go through its own client)
RUN = ["experiment=paper_locomo_k10", "dataset.slice.groups=[conv-26]", "dataset.slice.sessions=[1,1]",
       "embedder=hashing", "~embedder.dtype", "reranker=cosine", "ingest.builder=mnemis"]
HINT = re.compile(r"JSON schema:\n(\{.*\})\s*$", re.DOTALL)


def rendered_tokens(messages: list[dict[str, Any]]) -> int:
    """The stub's prompt count: UTF-8 bytes of the chat as a ChatML template renders it."""
    text = "".join(f"<|im_start|>{m.get('role')}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
    return len((text + "<|im_start|>assistant\n").encode("utf-8"))


class Filler:
    """Schema instances with lists filled to ``FILL`` items (within minItems / maxItems) and distinct words."""

    def __init__(self, seed: int = 0) -> None:
        self.n = seed

    def value(self, schema: dict[str, Any], root: dict[str, Any]) -> Any:
        while "$ref" in schema:
            node: Any = root
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        self.n += 1
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][self.n % len(schema["enum"])]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
                return self.value(options[0], root)
        typ = schema.get("type")
        if isinstance(typ, list):
            typ = next((t for t in typ if t != "null"), typ[0])
        if typ == "object" or "properties" in schema:
            return {k: self.value(v, root) for k, v in (schema.get("properties") or {}).items()}
        if typ == "array":
            n = max(int(schema.get("minItems", 0)), min(FILL, int(schema.get("maxItems", FILL))))
            return [self.value(schema.get("items") or {}, root) for _ in range(n)]
        if typ == "string":
            word = f"w{self.n}"
            lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
            word = word.ljust(lo, "x")
            return word if hi is None else word[: int(hi)]
        if typ in ("integer", "number"):
            lo = int(schema.get("minimum", 0))
            hi = int(schema.get("maximum", lo + FILL))
            v = lo + self.n % (hi - lo + 1)
            return v if typ == "integer" else float(v)
        if typ == "boolean":
            return self.n % 2 == 0
        return None


class LimitStub:
    """An OpenAI-compatible server on 127.0.0.1 that keeps ``profile``'s limits and counts what it was asked."""

    def __init__(self, profile: dict[str, Any]) -> None:
        self.p = profile
        self.lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        self.largest_asked = 0
        self.rejections: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                row = {"id": outer.p["model"], "object": "model"}
                if outer.p["wording"] == "vllm":
                    row["max_model_len"] = outer.p["window"]
                return self._send(200, {"object": "list", "data": [row]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/tokenize") and outer.p["wording"] == "vllm":
                    return self._send(200, {"count": rendered_tokens(body["messages"]), "tokens": [],
                                            "max_model_len": outer.p["window"]})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                code, reply = outer.answer(body)
                return self._send(code, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LimitStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def refusal(self, asked: int, prompt: int) -> str | None:
        cap, window = self.p["cap"], self.p["window"]
        if self.p["wording"] == "openai":
            if cap is not None and asked > cap:
                return (f"max_tokens is too large: {asked}. This model supports at most {cap} completion tokens, "
                        f"whereas you provided {asked}.")
            if prompt + asked > window:
                return (f"This model's maximum context length is {window} tokens. However, you requested "
                        f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). Please "
                        "reduce the length of the messages or completion.")
            return None
        if asked > window:
            return f"max_tokens={asked} cannot be greater than max_model_len={window}. Please request fewer output tokens."
        if prompt > window:
            return (f"This model's maximum context length is {window} tokens. However, your prompt contains {prompt} "
                    "input tokens, which exceeds this limit even without any output tokens. Please reduce the length "
                    "of the input prompt.")
        if prompt + asked > window:
            return (f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum context "
                    f"length is {window} tokens and your request has {prompt} input tokens "
                    f"({asked} > {window} - {prompt}).")
        return None

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        asked = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        prompt = rendered_tokens(messages)
        fmt = (body.get("response_format") or {}).get("type") or "none"
        schema = None
        if fmt == "json_schema":
            schema = body["response_format"]["json_schema"]["schema"]
        else:
            hint = HINT.search(str(messages[-1].get("content") or ""))
            schema = json.loads(hint.group(1)) if hint else None
        with self.lock:
            self.stats["requests"] += 1
            self.largest_asked = max(self.largest_asked, asked)
            if schema is not None:
                self.stats[f"schema_requests.{fmt}"] += 1
            why = self.refusal(asked, prompt)
            if why is not None:
                self.stats["rejected"] += 1
                if len(self.rejections) < 5:
                    self.rejections.append(why)
                return 400, {"error": {"message": why, "type": "invalid_request_error", "param": "max_tokens",
                                       "code": "context_length_exceeded" if "context length" in why else None}}
        # the reply depends on the request only (not on the order concurrent requests arrive in)
        seed = zlib.crc32(json.dumps(messages, sort_keys=True).encode()) % 100_000
        text = json.dumps(Filler(seed).value(schema, schema)) if schema is not None else "Answer: unknown"
        return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": len(text.encode()),
                               "total_tokens": prompt + len(text.encode())}}

    def summary(self) -> dict[str, Any]:
        schema_requests = {k.split(".", 1)[1]: v for k, v in self.stats.items() if k.startswith("schema_requests.")}
        return {"requests": self.stats["requests"], "rejected": self.stats["rejected"],
                "downgraded": sum(v for k, v in schema_requests.items() if k != "json_schema"),
                "schema_requests_by_format": schema_requests, "largest_max_tokens_asked": self.largest_asked,
                "first_rejections": self.rejections}


def run_profile(name: str, work: Path, code: Path, locomo_dir: Path | None, extra: list[str],
                timeout_s: float) -> dict[str, Any]:
    """One ``mnemis run`` of the probe against a fresh stub keeping profile ``name``'s limits."""
    profile = PROFILES[name]
    work.mkdir(parents=True, exist_ok=True)
    run_dir = work / "run"
    with LimitStub(profile) as stub:
        cmd = [sys.executable, "-m", "mnemis.app.cli", "run", *RUN, "llm=openai_compat", f"llm.backend.base_url={stub.url}", f"llm.backend.model={profile['model']}",
               "llm.backend.extra_body=null", "llm.backend.max_attempts=2", "llm.backend.backoff_s=0.01",
               "judge_llms.paper=${llm}", "preflight=false",
               f"paths.artifacts_dir={work}/artifacts", f"paths.cache_dir={work}/cache", f"hydra.run.dir={run_dir}",
               *([f"paths.shared_data_dir={locomo_dir}"] if locomo_dir else []), *extra]
        env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "OPENAI_API_KEY": "probe"}
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)
        wall = time.monotonic() - t0
        out = {"profile": profile, "exit_code": proc.returncode, "wall_s": round(wall, 1), **stub.summary()}
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-3000:]
    ledger = _json(run_dir / LEDGER_FILE)
    if ledger:
        stages = ledger.get("stages") or {}
        out["ledger"] = {k: {s: c.get(k, 0) for s, c in stages.items() if c.get(k)}
                         for k in ("clamped", "clamped_cut", "over_limit", "unconstrained", "failures")}
    health = _json(run_dir / HEALTH_FILE)
    if health is not None:
        out["health_warnings"] = health.get("warnings") or []
    return out


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--code", type=Path, default=REPO, help="checkout whose mnemis runs (default: this one)")
    ap.add_argument("--before-code", type=Path, default=None, help="another checkout probed the same way ('before')")
    ap.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    ap.add_argument("--locomo-dir", type=Path, default=None, help="folder holding locomo10.json")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--timeout-s", type=float, default=900)
    args, extra = ap.parse_known_args(argv)
    result: dict[str, Any] = {
        "what": "experiment=paper_locomo_k10 (paper mode, auto reply budgets) on the quickstart slice (conv-26 "
                "session 1) with llm=openai_compat against a stub keeping each profile's limits "
                "(HTTP 400 above them): requests, rejected requests, schema requests sent without json_schema "
                "(downgraded), largest max_tokens asked; the run's ledger and Run health",
        "stub_prompt_count": "one token per UTF-8 byte of the ChatML-rendered chat (stricter than any BPE tokenizer)",
        "run": RUN + extra}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        codes = {"after": args.code, **({"before": args.before_code} if args.before_code else {})}
        for label, code in codes.items():
            git = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True)
            # the checkout is named by its commit (a folder path is this machine's, not the result's)
            probed = {"code": "this checkout" if Path(code).resolve() == REPO else "another checkout",
                      "commit": git.stdout.strip() or None, "profiles": {}}
            for name in args.profiles:
                probed["profiles"][name] = run_profile(name, work / label / name, code, args.locomo_dir, extra,
                                                       args.timeout_s)
            result[label] = probed
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return result


if __name__ == "__main__":
    main()
