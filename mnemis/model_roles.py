"""Every model role of a run, listed once: who reads which config node, and in which stage it runs.

The run's settings (:class:`mnemis.settings.RunSettings`) name its models in several keys: ``llm`` (the graph
builder, and the hierarchy's categoriser, which uses the same engine), ``selector_llm`` (System-2 selection) and
``answer_llm`` (both null = ``llm``), the judges (``judge.judges``, each naming a ``judge_llms`` slot or null = ``llm``),
``embedder``, ``reranker``, and, when a peer library runs as a method, the vLLM server the harness starts on
``llm``'s weights (``peers``). :class:`ModelRoles` reads them once; the doctor, ``mnemis models list|fetch``,
the model inventory, the GPU memory plan and the engine start (:class:`mnemis.components.Models`) all iterate
it, so a role added here is fetched, checked, planned and started everywhere.

Ground floor: no stage, no Hydra, no heavy library.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mnemis.settings import LLM_ROLE_KEYS, JudgeSettings, PeersSettings, RunSettings

PEER_METHODS = ("graphiti", "mem0_oss")         # methods that talk to the peers' server
BUILD, EVAL = "build", "eval"


def judge_slots(judge: JudgeSettings) -> list[tuple[str, str | None]]:
    """``(name, judge_llms slot or None = llm)`` of every entry of ``judge.judges`` (``main`` and a null ``llm``
    mean the run's ``llm``; no entry: ``main``)."""
    out: list[tuple[str, str | None]] = []
    for entry in judge.judges or ["main"]:
        if isinstance(entry, str):
            out.append((entry, None if entry == "main" else entry))
        else:
            out.append((entry.name, entry.llm))
    return out


def node_key(node: Any) -> str:
    """The identity of a config node: roles with equal nodes share one engine."""
    return json.dumps(node, sort_keys=True, default=str)


@dataclass(frozen=True)
class Role:
    """One model role: its name, the config key it reads, its node (the fallback's when the key is null) and
    the stages in which its model is alive."""

    name: str                 # llm | categoriser | selector_llm | answer_llm | judge:<name> | embedder | reranker | peers_server
    key: str                  # the config key holding the node (``llm`` for a fallback)
    node: Mapping[str, Any]
    stages: tuple[str, ...]
    kind: str                 # llm | embedder | reranker | server


@dataclass(frozen=True)
class ModelRoles:
    """The model roles of one run's settings, in a fixed order."""

    roles: tuple[Role, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, settings: RunSettings) -> ModelRoles:
        methods = list(settings.methods or ["mnemis"])
        llm = settings.llm or None
        out: list[Role] = []

        def add(name: str, key: str, node: Any, stages: tuple[str, ...], kind: str) -> None:
            if node and stages:
                out.append(Role(name, key, node, stages, kind))

        graph = "mnemis" in methods
        # the build's LLM: base graph + hierarchy for mnemis; the Mem0 baselines build their memories in eval
        llm_stages = ((BUILD,) if graph else ()) + ((EVAL,) if {"mem0", "mem0g"} & set(methods) else ())
        add("llm", "llm", llm, llm_stages, "llm")
        add("categoriser", "llm", llm, (BUILD,) if graph else (), "llm")
        for key in LLM_ROLE_KEYS:
            own = getattr(settings, key)
            if key == "selector_llm" and not graph:
                continue
            add(key, key if own else "llm", own or llm, (EVAL,), "llm")
        for name, slot in judge_slots(settings.judge):
            node = llm if slot is None else settings.judge_llms.get(slot)
            add(f"judge:{name}", "llm" if slot is None else f"judge_llms.{slot}", node, (EVAL,), "llm")
        needs_vectors = graph or "rag" in methods or bool({"mem0", "mem0g"} & set(methods))
        add("embedder", "embedder", settings.embedder, (BUILD, EVAL) if needs_vectors else (), "embedder")
        add("reranker", "reranker", settings.reranker,
            (EVAL,) if graph or "graphiti" in methods else (), "reranker")
        if set(PEER_METHODS) & set(methods) and not settings.peers.base_url and llm:
            add("peers_server", "peers", peers_server_node(settings.peers, llm), (EVAL,), "server")
        return cls(tuple(out))

    def __iter__(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(role name, config node)`` of every role (a fallback role yields the node it falls back to)."""
        return ((r.name, r.node) for r in self.roles)

    def get(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    def engines(self) -> list[tuple[tuple[str, ...], Role]]:
        """One entry per distinct model (roles with equal nodes share it): ``(role names, first role)``, the
        first role's stages widened to every sharing role's."""
        seen: dict[str, tuple[list[str], Role, set[str]]] = {}
        for r in self.roles:
            k = r.kind + ":" + node_key(r.node)
            if k not in seen:
                seen[k] = ([], r, set())
            seen[k][0].append(r.name)
            seen[k][2].update(r.stages)
        return [(tuple(names), Role(first.name, first.key, first.node,
                                    tuple(s for s in (BUILD, EVAL) if s in stages), first.kind))
                for names, first, stages in seen.values()]

    def used_in(self, stage: str) -> set[str]:
        """Node identities of the LLM roles alive in ``stage`` (an engine outside them can be released)."""
        return {node_key(r.node) for r in self.roles if r.kind == "llm" and stage in r.stages}


def peers_server_node(peers: PeersSettings, llm: Mapping[str, Any]) -> dict[str, Any]:
    """The vLLM OpenAI server the peers' harness starts on ``llm``'s weights, as a vLLM backend node (the
    server's own settings come from ``peers``: :func:`mnemis.models.llm.local_server.server_command`)."""
    backend = llm.get("backend") or {}
    return {"backend": {
        "_target_": "vllm.entrypoints.openai.api_server", "model": backend.get("model"),
        "revision": backend.get("revision"), "dtype": peers.dtype or "auto",
        "gpu_memory_utilization": peers.gpu_memory_utilization, "max_model_len": peers.max_model_len,
        "enforce_eager": True, "kv_cache_memory_bytes": peers.kv_cache_memory_bytes}}
