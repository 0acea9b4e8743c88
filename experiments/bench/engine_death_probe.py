"""The engine-death probe: an engine that dies mid-run, then the same run repeated on a healthy engine.

``Memory.add`` of a 60-message conversation, ``organize``, ``answer`` of a few questions and a judge, on a scripted
model (rule-based valid replies, :mod:`mnemis.testing.responder`). The engine dies (raises on every batch from then
on, as a dead vLLM engine does) either after its second batch (the original probe) or at a chosen stage; the
same flow is then repeated with a healthy engine on the same store, response cache and judge progress. The repeat
must end identical to a run whose engine never died: same facts, mentions, entities, hierarchy, answers and
labels. ``--http`` runs it over the OpenAI-compatible backend against a loopback stub server that is killed
mid-batch (connections refused from then on) and restarted for the repeat::

    python experiments/bench/engine_death_probe.py --label after --out experiments/results/engine_death_probe.json

writes (or updates, keyed by ``--label``) the JSON: per death point whether the dead run raised, whether the
repeat is identical to the never-died run, the counts of both, and wall times. No model, no GPU; a few seconds.
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mnemis.memory import Memory
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.models.rerank import CosineReranker
from mnemis.testing.responder import base_graph_responder, user_text
from mnemis.types import Question

GROUP = "chat"
MODEL_ID = "probe-scripted"
CHUNK = 16  # requests per committed chunk: extraction, answers and verdicts come in several batches
# death point -> the stage prefix whose batches are counted
STAGES = {"extraction": "extract_entities", "reflection": "reflect_entities", "resolution": "resolve_entities",
          "dedup": "dedup_facts", "attributes": "entity_attributes", "hierarchy": "hierarchy.",
          "selection": "select", "answer": "answer", "judge": "judge:"}
PEOPLE = ["Carla", "Dana", "Eric", "Frank", "Gina", "Hugo", "Ivan", "Julia"]
PLACES = ["Boston", "Denver", "Lisbon", "Oslo", "Paris", "Rome"]
PETS = ["Miso", "Pepper", "Biscuit"]
_CAP = re.compile(r"\b[A-Z][a-z]{2,}\b")


def conversation(n: int = 60) -> list[dict[str, str]]:
    """``n`` messages between Alice and Bob about a few people, places and pets; short forms ("Car" for Carla)
    make resolution merge names, repeated sentences make dedup find duplicates."""
    out = []
    for i in range(n):
        person, place, pet = PEOPLE[i % len(PEOPLE)], PLACES[(i // 2) % len(PLACES)], PETS[(i // 3) % len(PETS)]
        text = [f"{person} visited {place} with {pet}.", f"{person[:3]} said {place} was lovely.",
                f"I saw {person} and {pet} near {place}."][i % 3]
        out.append({"speaker": "Alice" if i % 2 == 0 else "Bob", "text": text, "id": f"m{i}",
                    "time": f"2024-05-{1 + i // 10:02d}T10:{i:02d}"})
    return out


def questions(n: int = 24) -> list[Question]:
    """``n`` questions about the conversation (more than one chunk, so answers and verdicts die mid-stage)."""
    out = []
    for i in range(n):
        person, place = PEOPLE[i % len(PEOPLE)], PLACES[i % len(PLACES)]
        q, gold = [(f"Where did {person} travel?", place), (f"Who was seen near {place}?", person),
                   (f"Which pet went with {person}?", PETS[i % len(PETS)])][i % 3]
        out.append(Question(group_id=GROUP, id=f"q{i}", question=q, answer=gold, category="single-hop", index=i))
    return out


def responder(req: LLMRequest) -> Any:
    """Valid replies for every stage: the base-graph rules, answers that list the names the retrieved memory shows
    (so a hole in the memory changes them), verdicts CORRECT when the gold name is among them."""
    if req.stage == "answer":
        return " ".join(sorted(set(_CAP.findall(user_text(req))))[:12]) or "nothing"
    if req.stage.startswith("judge:"):
        text = user_text(req)
        gold = re.search(r"Gold answer: (\w+)", text)
        said = text.split("Generated answer:")[-1]
        label = "CORRECT" if gold and gold.group(1) in said else "WRONG"
        return {"reasoning": "names compared", "label": label}
    return base_graph_responder(req)


class EngineDead(RuntimeError):
    """What the dying engine raises (as vLLM's ``EngineDeadError``)."""


class DyingBackend(ScriptedBackend):
    """Answers with :func:`responder` until it dies: at the batch after the ``after``-th batch holding a request of
    ``stage`` (a prefix; None: any batch), and on every batch from then on, it raises :class:`EngineDead`."""

    def __init__(self, stage: str | None = None, after: int = 2) -> None:
        super().__init__(responder, model_id=MODEL_ID)
        self.stage, self.after, self.seen, self.dead = stage, after, 0, False

    def complete(self, requests: Sequence[LLMRequest]) -> list:
        if not self.dead and (self.stage is None or any(r.stage.startswith(self.stage) for r in requests)):
            self.seen += 1
            self.dead = self.seen > self.after
        if self.dead:
            raise EngineDead("EngineCore encountered an issue")
        return super().complete(requests)


# ---------------------------------------------------------------- the OpenAI-compatible path
class StubServer:
    """A loopback OpenAI-compatible chat server answering with :func:`responder`. The requests it is sent are
    registered by the client side (:class:`Registered`) so it knows each one's stage. ``die_at(stage, after)``:
    once ``after`` requests of ``stage`` have been answered, the next request of it kills the server: that
    connection is dropped without a reply and the port refuses connections from then on."""

    def __init__(self, registry: dict[str, LLMRequest]) -> None:
        self.registry, self.stage, self.after, self.seen = registry, None, 0, 0
        self.lock = threading.Lock()
        self.killed = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                req = outer.registry[json.dumps(body["messages"], sort_keys=True)]
                if outer.dies_now(req):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # mid-batch: no reply, connection reset
                    threading.Thread(target=outer.stop, daemon=True).start()
                    return
                reply = responder(req)
                text = reply if isinstance(reply, str) else json.dumps(reply)
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": text}}],
                                   "usage": {"prompt_tokens": len(str(body["messages"]).split()),
                                             "completion_tokens": len(text.split())}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def die_at(self, stage: str | None, after: int) -> None:
        self.stage, self.after = stage, after

    def dies_now(self, req: LLMRequest) -> bool:
        with self.lock:
            if self.killed.is_set():
                return True
            if self.stage is None or not req.stage.startswith(self.stage):
                return False
            self.seen += 1
            if self.seen > self.after:
                self.killed.set()
            return self.killed.is_set()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Registered:
    """An ``OpenAIBackend`` that first registers its requests with the stub server (which cannot see stages)."""

    def __init__(self, backend: Any, registry: dict[str, LLMRequest]) -> None:
        self.backend, self.registry, self.model_id = backend, registry, backend.model_id

    def complete(self, requests: Sequence[LLMRequest]) -> list:
        for r in requests:
            self.registry[json.dumps(r.messages, sort_keys=True)] = r
        return self.backend.complete(requests)


def http_backend(server: StubServer, registry: dict[str, LLMRequest]) -> Registered:
    from mnemis.models.llm.openai_backend import OpenAIBackend

    return Registered(OpenAIBackend("probe", server.url, model_id=MODEL_ID, max_attempts=2, backoff_s=0.01,
                                    timeout_s=10, max_concurrency=8), registry)


# ---------------------------------------------------------------- one run, and the probe
def client(backend: Any, cache_dir: Path) -> LLM:
    """The LLM client of the probe (engine retries without waiting: the dead engine stays dead)."""
    fast = {"engine_retries": 2, "engine_backoff_s": 0.0} if "engine_retries" in inspect.signature(LLM).parameters \
        else {}  # (settings absent before engine failures stopped a run)
    return LLM(backend, cache_dir=cache_dir, max_retries=1, chunk_size=CHUNK, **fast)


def run_flow(workdir: Path, backend: Any, messages: Sequence[dict[str, str]], asked: int = 24) -> dict[str, Any]:
    """add, organize, answer ``asked`` questions and judge them on the memory, cache and judge progress in
    ``workdir``: the snapshot."""
    from mnemis.eval.judge import judge_answers

    emb = HashingEmbedder(64)
    llm = client(backend, workdir / "cache")
    with Memory.from_models(llm, emb, CosineReranker(embedder=emb), path=workdir / "mem.db",
                            overrides=["experiment=quickstart"]) as mem:
        mem.add(GROUP, list(messages))
        mem.organize()
        qs = questions(asked)
        answers = mem.answer(qs)
        labels = judge_answers({"j": llm}, qs, answers, progress=workdir / "judge.jsonl")["j"]
        return snapshot(mem, answers, labels)


def snapshot(mem: Memory, answers: Sequence[Any], labels: Sequence[bool | None]) -> dict[str, Any]:
    st = mem.store
    return {
        "facts": sorted([f.fact, f.source_id, f.target_id, f.invalid_at is None] for f in st.facts(GROUP)),
        "mentions": sorted([m.episode_id, m.entity_id] for m in st.mentions(GROUP)),
        "entities": sorted([e.name, e.summary, list(e.tags)] for e in st.entities(GROUP)),
        "categories": sorted([c.layer, c.name, c.summary, list(c.tags)] for c in st.categories(GROUP)),
        "answers": [a.answer if a.error is None else f"error: {a.error}" for a in answers],
        "labels": list(labels),
    }


def counts(snap: dict[str, Any]) -> dict[str, int]:
    return {"facts": len(snap["facts"]), "mentions": len(snap["mentions"]), "entities": len(snap["entities"]),
            "categories": len(snap["categories"]),
            "answers_ok": sum(not a.startswith("error:") for a in snap["answers"]),
            "labels_correct": sum(x is True for x in snap["labels"])}


def probe(workdir: Path, reference: dict[str, Any], dying: Any, healthy: Callable[[], Any],
          messages: Sequence[dict[str, str]], asked: int = 24) -> dict[str, Any]:
    """Run the flow on ``dying``, then repeat it on ``healthy()`` with the same store and cache: what the dead run
    raised and whether the repeat equals ``reference`` (the never-died run's snapshot)."""
    raised = None
    t0 = time.perf_counter()
    try:
        run_flow(workdir, dying, messages, asked)
    except Exception as exc:  # noqa: BLE001 - recorded: the probe measures whether a death stops the run
        raised = f"{type(exc).__name__}: {exc}"[:300]
    t1 = time.perf_counter()
    repeat = run_flow(workdir, healthy(), messages, asked)
    t2 = time.perf_counter()
    return {"raised": raised, "identical": repeat == reference,
            "differs_in": [k for k in reference if repeat[k] != reference[k]],
            "after_repeat": counts(repeat), "dead_run_s": round(t1 - t0, 2), "repeat_s": round(t2 - t1, 2)}


def batches_per_stage(backend: ScriptedBackend) -> dict[str, int]:
    return {name: sum(any(r.stage.startswith(prefix) for r in b) for b in backend.batches)
            for name, prefix in STAGES.items()}


def in_process(root: Path, messages: Sequence[dict[str, str]], points: Sequence[str]) -> dict[str, Any]:
    """The never-died run, the original probe (dies after its second batch) and one death per stage."""
    ref_backend = DyingBackend(after=10**9)
    t0 = time.perf_counter()
    reference = run_flow(root / "reference", ref_backend, messages)
    out: dict[str, Any] = {"never_died": counts(reference), "never_died_s": round(time.perf_counter() - t0, 2),
                           "batches": batches_per_stage(ref_backend), "deaths": {}}
    healthy = lambda: DyingBackend(after=10**9)  # noqa: E731
    out["deaths"]["after_second_batch"] = probe(root / "any", reference, DyingBackend(None, 2), healthy, messages)
    for name in points:
        n = out["batches"][name]
        out["deaths"][name] = probe(root / name, reference, DyingBackend(STAGES[name], n // 2), healthy, messages)
    return out


def over_http(root: Path, messages: Sequence[dict[str, str]], points: Sequence[str], asked: int = 24) -> dict[str, Any]:
    """The same over the OpenAI-compatible backend: the stub server killed mid-batch at each death point (after
    half of that stage's requests), restarted for the repeat."""
    registry: dict[str, LLMRequest] = {}
    server = StubServer(registry)
    t0 = time.perf_counter()
    reference = run_flow(root / "reference", http_backend(server, registry), messages, asked)
    server.stop()
    out: dict[str, Any] = {"never_died": counts(reference), "never_died_s": round(time.perf_counter() - t0, 2),
                           "deaths": {}}
    sent = {name: sum(r.stage.startswith(prefix) for r in registry.values()) for name, prefix in STAGES.items()}
    for name in points:
        dying = StubServer(registry)
        dying.die_at(STAGES[name], sent[name] // 2)
        fresh: list[StubServer] = []

        def healthy() -> Registered:
            fresh.append(StubServer(registry))
            return http_backend(fresh[-1], registry)

        out["deaths"][name] = probe(root / name, reference, http_backend(dying, registry), healthy, messages, asked)
        out["deaths"][name]["server_killed"] = dying.killed.is_set()
        if not dying.killed.is_set():
            dying.stop()
        for s in fresh:
            s.stop()
    return out


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="after", help="key of this measurement in the JSON (e.g. before / after)")
    ap.add_argument("--out", default="experiments/results/engine_death_probe.json")
    ap.add_argument("--messages", type=int, default=60)
    ap.add_argument("--http-messages", type=int, default=12)
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--code", default="this checkout", help="which code was measured (kept in the JSON)")
    args = ap.parse_args()
    messages = conversation(args.messages)
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {"in_process": in_process(Path(tmp) / "scripted", messages, list(STAGES))}
        if not args.no_http:
            result["http"] = in_http = over_http(Path(tmp) / "http", conversation(args.http_messages), list(STAGES))
            in_http["messages"] = args.http_messages
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["what"] = ("Memory.add of a scripted conversation, organize, answer and judge on an engine that dies "
                   "(raises on every batch) after its second batch or half way through one stage, then the same "
                   "flow repeated on a healthy engine with the same store, response cache and judge progress; "
                   "'identical' compares the repeat with a run whose engine never died (facts, mentions, "
                   "entities, hierarchy, answers, labels). 'http': the same over the OpenAI-compatible backend "
                   "against a loopback stub server killed mid-batch. Scripted model, hashing embedder, CPU; the wall "
                   "times (s) were taken on a shared 2-core machine and only say the probe is short.")
    doc.setdefault("runs", {})[args.label] = {
        "command": f"python experiments/bench/engine_death_probe.py --label {args.label}", "code": args.code,
        "messages": args.messages, "machine": platform.machine(), "python": platform.python_version(), **result}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for where, res in result.items():
        for name, d in res["deaths"].items():
            print(f"{where:10s} {name:20s} raised={bool(d['raised'])!s:5s} identical={d['identical']!s:5s} "
                  f"{d['after_repeat']}")


if __name__ == "__main__":
    main()
