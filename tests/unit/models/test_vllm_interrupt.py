"""An interrupted vLLM batch (a timeout or Ctrl-C inside ``LLM.chat``) leaves its requests in the engine; the
backend aborts them, so the next call gets exactly its own outputs, not one per leftover request as well."""

from __future__ import annotations

import types

import pytest

from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.vllm_backend import VLLMBackend


class FakeEngine:
    def __init__(self):
        self.output_processor = types.SimpleNamespace(request_states={})
        self.aborted: list[list[str]] = []

    def abort_request(self, ids):
        self.aborted.append(list(ids))
        for i in ids:
            self.output_processor.request_states.pop(i, None)


class FakeLLM:
    """``chat`` queues every prompt; with ``interrupt`` set it stops before collecting, as a timeout would."""

    def __init__(self):
        self.llm_engine = FakeEngine()
        self.interrupt = False
        self.n = 0

    def chat(self, messages, **_):
        states = self.llm_engine.output_processor.request_states
        for m in messages:
            states[str(self.n)] = m
            self.n += 1
        if self.interrupt:
            raise KeyboardInterrupt
        out = [types.SimpleNamespace(prompt_token_ids=[1], outputs=[types.SimpleNamespace(
            text=str(m[0]["content"]), token_ids=[1], finish_reason="stop")]) for m in states.values()]
        states.clear()
        return out


def _req(text):
    return LLMRequest(messages=[{"role": "user", "content": text}], sampling=Sampling(max_tokens=4))


def test_an_interrupted_batch_leaves_nothing_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(VLLMBackend, "sampling_params", staticmethod(lambda r: None))
    backend = VLLMBackend(str(tmp_path), lazy=True, cpu_threads_bind=None)
    fake = FakeLLM()
    backend._llm = fake
    fake.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        backend.complete([_req("a"), _req("b")])
    assert fake.llm_engine.aborted == [["0", "1"]] and not fake.llm_engine.output_processor.request_states
    fake.interrupt = False
    assert [c.text for c in backend.complete([_req("c")])] == ["c"]


def test_leftovers_from_an_unguarded_interrupt_are_aborted_before_the_next_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(VLLMBackend, "sampling_params", staticmethod(lambda r: None))
    backend = VLLMBackend(str(tmp_path), lazy=True, cpu_threads_bind=None)
    fake = FakeLLM()
    backend._llm = fake
    fake.llm_engine.output_processor.request_states["old"] = [{"role": "user", "content": "stale"}]
    assert [c.text for c in backend.complete([_req("new")])] == ["new"]
    assert fake.llm_engine.aborted == [["old"]]
