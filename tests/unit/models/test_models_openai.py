"""OpenAIBackend against a tiny scripted HTTP server on 127.0.0.1 (500s, timeouts, bad JSON, 400s)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from models_helpers import GOOD, Facts, make_request

from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.openai_backend import OpenAIBackend


class FakeServer:
    """Behaviour is chosen by the first word of the first message."""

    def __init__(self, reject_json_schema: bool = False) -> None:
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.reject_json_schema = reject_json_schema
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # silence
                pass

            def _send(self, code: int, body: str | bytes) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][0]["content"]
                key = text.split()[0]
                with outer.lock:
                    outer.hits[key] += 1
                    n = outer.hits[key]
                    outer.bodies.append(body)
                fmt = (body.get("response_format") or {}).get("type")
                if outer.reject_json_schema and fmt == "json_schema":
                    return self._send(400, json.dumps({"error": {"message": "json_schema unsupported"}}))
                if key == "always500":
                    return self._send(500, '{"error": {"message": "boom"}}')
                if key == "flaky500" and n <= 2:
                    return self._send(503, '{"error": {"message": "overloaded"}}')
                if key == "ratelimit" and n == 1:
                    return self._send(429, '{"error": {"message": "slow down"}}')
                if key == "slow" and n == 1:
                    time.sleep(1.5)
                if key == "badjson" and n == 1:
                    return self._send(200, "{not json")
                if key == "forbidden":
                    return self._send(403, '{"error": {"message": "no"}}')
                content = "garbage reply" if key == "invalid" else json.dumps(GOOD)
                if key == "echo":  # reply names the request; later items answer sooner (order scrambled)
                    i = int(text.split()[-1])
                    with outer.lock:
                        outer.in_flight += 1
                        outer.peak = max(outer.peak, outer.in_flight)
                    time.sleep(0.005 * (5 - i % 5))
                    with outer.lock:
                        outer.in_flight -= 1
                    content = json.dumps({"echo": i})
                resp = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                return self._send(200, json.dumps(resp))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _req(word: str, i: int = 0, schema=Facts) -> LLMRequest:
    r = make_request(i, schema=schema)
    return r.model_copy(update={"messages": [{"role": "user", "content": f"{word} item {i}"}]})


def _backend(url: str, **kw) -> OpenAIBackend:
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_attempts", 4)
    return OpenAIBackend("fake-model", url, **kw)


def test_success_retries_and_errors_per_item():
    with FakeServer() as srv:
        be = _backend(srv.url)
        words = ["ok", "flaky500", "ratelimit", "slow", "badjson", "always500", "forbidden"]
        out = be.complete([_req(w) for w in words])
    byword = dict(zip(words, out))
    for w in ["ok", "flaky500", "ratelimit", "slow", "badjson"]:
        assert byword[w].error is None, (w, byword[w].error)
        assert Facts.model_validate_json(byword[w].text) == Facts.model_validate(GOOD)
        assert byword[w].prompt_tokens == 11 and byword[w].completion_tokens == 7
    assert "4 attempts" in byword["always500"].error and srv.hits["always500"] == 4
    assert "403" in byword["forbidden"].error and srv.hits["forbidden"] == 1
    assert srv.hits["flaky500"] == 3 and srv.hits["slow"] == 2
    body = next(b for b in srv.bodies if b["messages"][-1]["content"].startswith("ok"))
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == Facts.model_json_schema()


def test_json_schema_rejected_falls_back_to_json_object():
    with FakeServer(reject_json_schema=True) as srv:
        be = _backend(srv.url)
        out = be.complete([_req("ok", i) for i in range(5)])
        assert all(c.error is None for c in out)
        assert be.response_format == "json_object"
        later = be.complete([_req("ok", 9)])
    assert later[0].error is None
    last = srv.bodies[-1]
    assert last["response_format"] == {"type": "json_object"}
    assert "JSON schema" in last["messages"][-1]["content"]


def test_concurrency_is_bounded_and_order_kept():
    with FakeServer() as srv:
        be = _backend(srv.url, max_concurrency=3, timeout_s=5)
        out = be.complete([_req("echo", i) for i in range(15)])
    assert all(c.error is None for c in out)
    assert [json.loads(c.text)["echo"] for c in out] == list(range(15))  # replies in request order
    assert 2 <= srv.peak <= 3  # never more than the bound in flight, and concurrent


def test_unreachable_endpoint_is_item_error():
    be = OpenAIBackend("m", "http://127.0.0.1:9/v1", timeout_s=0.3, max_attempts=2, backoff_s=0.01)
    (c,) = be.complete([_req("ok")])
    assert c.error and "2 attempts" in c.error


def test_through_client_invalid_reply_counted():
    with FakeServer() as srv:
        llm = LLM(_backend(srv.url), max_retries=1)
        res = llm.generate([_req("ok", 0), _req("invalid", 1), _req("always500", 2)])
    assert [r.ok for r in res] == [True, False, False]
    st = llm.ledger.stage("extract")
    assert st.failures == 2 and st.retries == 2 and st.prompt_tokens >= 11 * 3


def test_empty_batch_and_bad_args():
    assert _backend("http://127.0.0.1:9/v1").complete([]) == []
    with pytest.raises(ValueError):
        OpenAIBackend("m", "http://x", response_format="xml")


def test_missing_key_becomes_empty(monkeypatch):
    monkeypatch.delenv("MNEMIS_TEST_NO_KEY", raising=False)
    assert OpenAIBackend("m", "http://x", api_key_env="MNEMIS_TEST_NO_KEY").api_key == "EMPTY"
