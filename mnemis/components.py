"""The configured models of a job, each built on first use and kept for the process.

A multirun sweep reuses one engine between jobs: models are cached in ``_MODELS`` by their config, and LLM
roles with the same config (e.g. a judge slot set to ``${llm}``) share one engine. Both the CLI jobs and
:class:`mnemis.memory.Memory` get their models here.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.model_roles import ModelRoles, node_key
from mnemis.settings import ModelSettings, instantiate

log = logging.getLogger(__name__)

_MODELS: dict[str, Any] = {}  # process-level model cache (one engine per config, reused across multirun jobs)


class Models:
    """Builds each configured model on first use and keeps it for the process. LLM roles with the same
    config share one engine (e.g. a judge slot set to ``${llm}``).

    Args:
        settings: the model nodes (``llm``, ``embedder``, ``reranker``, ``selector_llm``, ``answer_llm``,
            ``judge_llms``) with ``paths``, ``rerank_cache`` and ``cache_mode`` (:meth:`RunSettings.models`,
            :meth:`MemorySettings.models`): each node is built with :func:`mnemis.settings.instantiate`, no config
            framework needed.
    """

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self._llms: list[Any] = []

    def _get(self, key: str, node: Any = None, ident_key: str | None = None, **kwargs: Any) -> Any:
        if node is None:
            node = getattr(self.settings, key)
        if node is None:
            raise ValueError(f"config has no `{key}` node; choose one, e.g. {key}=...")
        ident = (ident_key or key) + ":" + node_key(node)
        if ident not in _MODELS:
            t0 = time.perf_counter()
            obj = instantiate(node)
            if isinstance(obj, functools.partial):
                obj = obj(**kwargs)
            _MODELS[ident] = obj
            log.info("built %s in %.1f s", key, time.perf_counter() - t0)
        return _MODELS[ident]

    def _llm_role(self, key: str, node: Any) -> Any:
        if self.settings.cache_mode == "replay_only":
            node = lazy_backend(node)
        ident = "llm:" + json.dumps(node, sort_keys=True, default=str)
        if ident not in _MODELS and isinstance(node, Mapping) and isinstance(node.get("backend"), Mapping):
            # clients that differ only in their cache (each shard's own, mnemis.scale.node_state) share one engine
            backend = self._get("llm backend", node["backend"], ident_key="llm_backend")
            _MODELS[ident] = instantiate({k: v for k, v in node.items() if k != "backend"}, backend=backend)
        obj = self._get(key, node, ident_key="llm")
        if not any(obj is o for o in self._llms):
            self._llms.append(obj)
        return obj

    @property
    def llm(self) -> Any:
        return self._llm_role("llm", self.settings.llm)

    def role(self, key: str) -> Any:
        """The LLM of a role in ``mnemis.roles.ROLE_KEYS`` (its own config, or ``llm`` when null)."""
        node = getattr(self.settings, key)
        if node is None:
            return self.llm
        return self._llm_role(key, node)

    @property
    def selector_llm(self) -> Any:
        return self.role("selector_llm")

    @property
    def answer_llm(self) -> Any:
        return self.role("answer_llm")

    @property
    def embedder(self) -> Any:
        """The configured embedder behind an on-disk vector cache (``<cache_dir>/embed``; none when
        ``cache_mode=off``): vectors are computed once and a replay from a run's archive computes none."""
        if self.settings.cache_mode == "off" or not self.settings.paths.cache_dir:
            return self._get("embedder")
        node = self.settings.embedder
        cache = Path(self.settings.paths.cache_dir) / "embed"
        key = "embed_cache:" + json.dumps([node, str(cache)], sort_keys=True, default=str)
        if key not in _MODELS:
            from mnemis.models.embed_cache import CachedEmbedder

            _MODELS[key] = CachedEmbedder.for_node(node, lambda: self._get("embedder"), cache)
        return _MODELS[key]

    @property
    def reranker(self) -> Any:
        """The configured reranker behind a deduplicating score cache (``rerank_cache: false`` = dedup only), one
        per cache dir, built only when a score is missing from the cache."""
        cache = Path(self.settings.paths.cache_dir) / "rerank" if self.settings.rerank_cache else None
        key = "rerank_cache:" + json.dumps([self.settings.reranker, str(cache) if cache else None],
                                           sort_keys=True, default=str)
        if key not in _MODELS:  # one score cache per cache dir (a shard's own), one model behind them all
            from mnemis.models.rerank_cache import CachedReranker

            def build() -> Any:
                return self._get("reranker", embedder=self.embedder)

            if self.settings.rerank_cache:
                _MODELS[key] = CachedReranker.for_node(self.settings.reranker, build, cache)
            else:
                _MODELS[key] = CachedReranker(build(), None)
        return _MODELS[key]

    def release_unused(self, roles: ModelRoles, stage: str) -> list[str]:
        """Shut down the LLM engines no role of ``stage`` uses (``roles``: the run's,
        :meth:`ModelRoles.used_in`), e.g. the build's
        model when the evaluation answers and judges with other models: the next engines then start with that
        memory free, as vLLM's start-up check and the GPU plan (:mod:`mnemis.gpu_plan`) expect. Their ledgers
        stay counted. Returns the released configs' model names."""
        import gc
        import sys

        used = roles.used_in(stage)
        released = []
        for ident in [k for k in _MODELS if k.startswith("llm:") and k[len("llm:"):] not in used]:
            obj = _MODELS.pop(ident)
            close = getattr(getattr(obj, "backend", None), "close", None)
            if callable(close):
                close()
            released.append(str(getattr(getattr(obj, "backend", None), "model", ident)))
        if released:
            gc.collect()
            torch = sys.modules.get("torch")  # only when a model already imported it
            if torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()
            log.info("released the %s engine(s) no %s role uses: %s", len(released), stage, ", ".join(released))
        return released

    def judges(self, specs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """``{name: Judge}`` for ``specs`` (:func:`mnemis.roles.judge_specs` of the judge settings; run
        ``check_roles`` first for friendly errors)."""
        from mnemis.eval.judge import Judge

        out = {}
        for spec in specs:
            slot = spec["llm"]
            if slot is None:
                llm = self.llm
            else:
                node = self.settings.judge_llms.get(slot)
                if node is None:
                    raise ValueError(f"judge {spec['name']!r}: judge_llms.{slot} is empty")
                llm = self._llm_role(f"judge_llms.{slot}", node)
            out[spec["name"]] = Judge(llm, spec["criterion"], spec["lme_format"])
        return out

    def ledger(self) -> Any:
        """One ledger over every LLM this job used (roles sharing an engine counted once)."""
        from mnemis.models.ledger import Ledger

        total = Ledger()
        for obj in self._llms:
            total.merge(obj.ledger)
        return total

    def built(self, key: str) -> bool:
        """Whether the model of this config node exists already (used to skip work without building it)."""
        return key + ":" + json.dumps(getattr(self.settings, key), sort_keys=True, default=str) in _MODELS

    def reset_ledgers(self) -> None:
        """Zero the token ledgers (and reranker cache counts) of models kept from an earlier job (multirun)."""
        for obj in _MODELS.values():
            if hasattr(obj, "ledger"):
                obj.ledger.reset()
            if hasattr(obj, "reset_stats"):
                obj.reset_stats()


def lazy_backend(node: Any) -> Any:
    """An LLM node whose backend starts its engine only when asked for a reply (``lazy: true``, for the backends
    that take it): a replay (``cache_mode=replay_only``) serves every reply from the cache and loads no weights."""
    import inspect

    from mnemis.settings import TARGET, _resolve

    backend = node.get("backend") if isinstance(node, Mapping) else None
    if not isinstance(backend, Mapping) or TARGET not in backend:
        return node
    if "lazy" not in inspect.signature(_resolve(backend[TARGET])).parameters:
        return node
    return {**node, "backend": {**backend, "lazy": True}}


class GivenModels:
    """Models handed over as objects (a notebook's own LLM client, embedder, reranker) instead of configs.

    ``selector_llm`` / ``answer_llm`` default to ``llm``; ``reranker`` is needed only when the retrieval
    config fuses with ``scorer: reranker``.
    """

    def __init__(self, llm: Any, embedder: Any, reranker: Any = None, *, selector_llm: Any = None,
                 answer_llm: Any = None) -> None:
        self.llm, self.embedder, self._reranker = llm, embedder, reranker
        self.selector_llm = selector_llm or llm
        self.answer_llm = answer_llm or llm

    @property
    def reranker(self) -> Any:
        if self._reranker is None:
            raise ValueError("retrieval.fusion.scorer is 'reranker' but no reranker was given; pass reranker=... "
                             "or fuse without one (retrieval.fusion.scorer=rrf)")
        return self._reranker

    def ledger(self) -> Any:
        """One ledger over the given LLMs (shared objects counted once)."""
        from mnemis.models.ledger import Ledger

        total, seen = Ledger(), []
        for obj in (self.llm, self.selector_llm, self.answer_llm):
            if hasattr(obj, "ledger") and not any(obj is s for s in seen):
                seen.append(obj)
                total.merge(obj.ledger)
        return total
