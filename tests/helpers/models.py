"""Shared schemas and request builders for the model-layer unit tests."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from pydantic import BaseModel, Field

from mnemis.models.llm.base import LLMRequest, Sampling


class Fact(BaseModel):
    subject: str
    relation: Literal["likes", "owns", "visited"]
    obj: str = Field(min_length=1)


class Facts(BaseModel):
    facts: list[Fact]
    confidence: float = Field(ge=0.0, le=1.0)


def make_request(i: int = 0, stage: str = "extract", schema=Facts, max_tokens: int = 64) -> LLMRequest:
    return LLMRequest(
        messages=[{"role": "system", "content": "Extract facts."}, {"role": "user", "content": f"episode {i}"}],
        schema=schema, sampling=Sampling(max_tokens=max_tokens), stage=stage,
    )


GOOD = {"facts": [{"subject": "Ann", "relation": "likes", "obj": "tea"}], "confidence": 0.9}


def fake_embedding(text: str, dim: int) -> list[float]:
    """A deterministic vector for ``text``: its length, then 1, 2, ... (the fake server's embedding)."""
    return [float(len(text))] + [float(i) for i in range(1, dim)]


REFUSED_FORMAT = ("Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.")


class FakeServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (chat completions and embeddings). Behaviour is
    chosen by the first word of the first message (or of the first embedding input)."""

    def __init__(self, reject_json_schema: bool | str = False, models: list[dict] | None = None) -> None:
        """``reject_json_schema``: answer every ``json_schema`` request HTTP 400 with this message (True: the
        OpenAI API's refusal of the format); ``models``: the rows of ``GET /v1/models``."""
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.reject_json_schema = (REFUSED_FORMAT if reject_json_schema is True else reject_json_schema)
        self.models = models or []
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

            def _embeddings(self, body: dict) -> None:
                texts = body["input"]
                key = texts[0].split()[0] if texts[0].split() else "ok"
                with outer.lock:
                    outer.hits[key] += 1
                    n = outer.hits[key]
                    outer.bodies.append(body)
                if key == "always500" or (key == "flaky500" and n <= 2):
                    return self._send(503, '{"error": {"message": "overloaded"}}')
                if key == "ratelimit" and n == 1:
                    return self._send(429, '{"error": {"message": "slow down"}}')
                if key == "forbidden":
                    return self._send(401, '{"error": {"message": "bad key"}}')
                dim = body.get("dimensions") or 4
                rows = [{"object": "embedding", "index": i, "embedding": fake_embedding(t, dim)}
                        for i, t in enumerate(texts)]
                if key == "short":
                    rows = rows[:-1]
                rows.reverse()  # servers may answer out of order: the index decides
                return self._send(200, json.dumps({"object": "list", "data": rows, "model": body["model"],
                                                   "usage": {"prompt_tokens": 1, "total_tokens": 1}}))

            def do_GET(self):  # noqa: N802
                if self.path.endswith("/models"):
                    return self._send(200, json.dumps({"object": "list", "data": outer.models}))
                return self._send(404, '{"error": {"message": "not found"}}')

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/embeddings"):
                    return self._embeddings(body)
                text = body["messages"][0]["content"]
                key = text.split()[0]
                with outer.lock:
                    outer.hits[key] += 1
                    n = outer.hits[key]
                    outer.bodies.append(body)
                fmt = (body.get("response_format") or {}).get("type")
                if outer.reject_json_schema and fmt == "json_schema":
                    return self._send(400, json.dumps({"error": {"message": outer.reject_json_schema,
                                                                 "type": "invalid_request_error"}}))
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
