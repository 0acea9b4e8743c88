"""A loopback OpenAI-compatible server that answers graphiti-core's structured requests with scripted JSON: the
names in the current message (its speaker first, then its capitalised words), one fact between the first two
listed entities (by id and by name: releases differ), no duplicates, no missed items, a one-line summary; any
other schema gets its minimal instance."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mnemis.models.llm.scripted import minimal_instance

SKIP = {"The", "This", "That", "What", "When", "Yes", "Thanks", "Wow", "Hey", "And", "But", "It's", "I'm"}


def _between(text: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>\s*(.*?)\s*</{tag}>", text, re.S)
    return m.group(1) if m else None


def _names(text: str) -> list[str]:
    message = _between(text, "CURRENT MESSAGE") or _between(text, "CURRENT_MESSAGE") or ""
    speaker, _, said = message.partition(":")
    words = [w for w in re.findall(r"\b[A-Z][a-z]{2,}\b", said) if w not in SKIP]
    return list(dict.fromkeys([speaker.strip(), *words]))[:4] if speaker.strip() else []


def _listed(text: str) -> list[dict[str, Any]]:
    raw = _between(text, "ENTITIES")
    try:
        items = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [i for i in items if isinstance(i, dict)]


def reply(schema_name: str, schema: dict[str, Any], prompt: str) -> Any:
    if schema_name == "ExtractedEntities":
        return {"extracted_entities": [{"name": n, "entity_type_id": 0} for n in _names(prompt)]}
    if schema_name == "ExtractedEdges":
        ents = _listed(prompt)
        when = (_between(prompt, "REFERENCE_TIME") or "").split("#")[0].strip() or None
        if len(ents) < 2:
            return {"edges": []}
        a, b = ents[0], ents[1]
        return {"edges": [{"relation_type": "TALKS_ABOUT", "source_entity_id": a.get("id", 0),
                           "target_entity_id": b.get("id", 1), "source_entity_name": a.get("name"),
                           "target_entity_name": b.get("name"), "fact": f"{a.get('name')} talks about {b.get('name')}",
                           "valid_at": when, "invalid_at": None}]}
    if schema_name == "EntitySummary":
        return {"summary": "Mentioned in the conversation."}
    return minimal_instance(schema)


class GraphitiStub:
    """``/v1/chat/completions`` answering by the requested schema's name (``schemas`` counts them)."""

    def __init__(self) -> None:
        self.schemas: Counter = Counter()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fmt = (body.get("response_format") or {}).get("json_schema") or {}
                name, schema = str(fmt.get("name") or ""), fmt.get("schema") or {}
                outer.schemas[name] += 1
                prompt = "\n".join(str(m.get("content")) for m in body.get("messages", []))
                content = json.dumps(reply(name, schema, prompt) if schema else {})
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "stub",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": content}}],
                                   "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 7,
                                             "total_tokens": len(prompt) // 4 + 7}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def requests(self) -> int:
        return sum(self.schemas.values())

    def close(self) -> None:
        self.httpd.shutdown()
