"""``ingest.builder=graphiti``: the base graph built by graphiti-core itself, then imported into our store.

The authors built Mnemis' base graph with Graphiti. This builder hands each group's episodes, in order and with
their times, to graphiti-core (the release ``ingest.graphiti.version`` pins: :mod:`.library`) on an embedded Kuzu
database beside the store (``<store>.graphiti/<group>.kuzu``), the configured LLM reached through an
OpenAI-compatible endpoint, our embedder behind Graphiti's embedder interface (:mod:`.run`). The group's graph
is then imported (:mod:`.importer`: every Graphiti field mapped or dropped) and our embedder embeds what the
store is missing, so the hierarchy, both routes, the answer and the judge run on it unchanged.

The endpoint: ``ingest.graphiti.base_url`` when set; else the configured LLM's own when it is an
OpenAI-compatible backend (``llm=openai_compat``); else, for a vLLM model, a local vLLM OpenAI server on its
weights (started once per process, as for the peer methods; ``ingest.graphiti.server`` takes the same keys as
``peers``). Any other backend (the scripted test LLM) is an error naming these settings.

Resumable: each group's added episodes are recorded in the store with the counts of their calls, so a rerun
adds only the rest (a failed ``add_episode`` is counted and not retried, as Graphiti's own client already
re-asked) and imports the grown graph again under the same ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.ingest.attributes import EPISODE_STAGE
from mnemis.ingest.common import STATS_KEY, BuildStats, bump_stats
from mnemis.ingest.embed_items import embed_missing
from mnemis.ingest.graphiti.importer import import_graph
from mnemis.models.protocols import Embedder
from mnemis.paths import child_path
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode

log = logging.getLogger(__name__)

ADDED = "graphiti.added"  # progress stage: episodes graphiti-core has been given (key: episode id)
DONE_STAGES = ("extract", "resolve", "facts", EPISODE_STAGE)  # what our builder's stages record, for recover()
MODES = ("episode", "bulk")
META_KEY = "ingest.graphiti"


def graphiti_budget(max_tokens: int, backend: Any) -> int:
    """The reply budget Graphiti's client may send to ``backend``'s model. graphiti-core sends one fixed
    ``max_tokens`` with every request and its requests bypass our LLM layer's per-request clamp, so the budget is
    checked once against the model's limits (``backend.limits()``, :mod:`mnemis.models.llm.limits`): lowered to
    the completion cap (logged), refused when it leaves less than half the window for the prompt."""
    get = getattr(backend, "limits", None)
    limits = get() if callable(get) else None
    if limits is None or not limits.known:
        return max_tokens
    budget = max_tokens
    cap = limits.max_completion_tokens
    if cap is not None and budget > cap:
        log.warning("ingest.graphiti.max_tokens %d is above the model's completion cap: graphiti-core sends %d (%s)",
                    budget, cap, limits.describe())
        budget = cap
    window = limits.max_model_len
    if window is not None and budget > window // 2:
        raise ValueError(f"ingest.graphiti.max_tokens {budget:,} leaves graphiti-core's prompts {window - budget:,} "
                         f"of the model's {window:,}-token window ({limits.describe()}); graphiti-core sends this "
                         f"budget with every request, so set ingest.graphiti.max_tokens to at most {window // 2:,}")
    return budget


class GraphitiGraphBuilder:
    """Builds the base graph with graphiti-core and imports it (see the module docstring).

    Args:
        store, llm, embedder: as for :class:`mnemis.ingest.pipeline.BaseGraphBuilder` (``llm`` only tells where
            the endpoint is).
        mode: ``episode`` (``add_episode`` per episode, Graphiti's previous-episode context) or ``bulk``
            (``add_episode_bulk`` over ``bulk_size`` episodes; null: all pending episodes of a group).
        version: the graphiti-core release to run (null: the installed one); ``library_path``: its folder.
        base_url, model, api_key_env: the endpoint (null: from the configured LLM, see the module docstring).
        max_tokens: the reply budget Graphiti's client sends with every request.
        request_timeout_s: seconds one request may take.
        server: settings of the local vLLM server (``peers`` keys: ``max_model_len``, ``server_log`` ...).
        work_dir: where the Kuzu databases live (null: ``<store>.graphiti``).
        reflexion_iterations: Graphiti's ``MAX_REFLEXION_ITERATIONS`` (entity and fact reflexion, in releases up to
            0.24; null: the release's own, an error when set for a release without reflexion).
        embed_kinds: embeddings written after the import.
    """

    def __init__(self, store: GraphStore, llm: Any, embedder: Embedder, *, mode: str = "episode",
                 bulk_size: int | None = None, version: str | None = None, library_path: str | None = None,
                 base_url: str | None = None, model: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 max_tokens: int = 8192, request_timeout_s: float = 3600.0, server: Mapping[str, Any] | None = None,
                 work_dir: str | None = None, reflexion_iterations: int | None = None,
                 embed_kinds: Sequence[str] = ("episode", "entity_name", "entity_summary", "fact")) -> None:
        if mode not in MODES:
            raise ValueError(f"ingest.graphiti.mode must be one of {MODES}, got {mode!r}")
        if bulk_size is not None and int(bulk_size) < 1:
            raise ValueError(f"ingest.graphiti.bulk_size must be >= 1 or null, got {bulk_size!r}")
        if int(max_tokens) < 1 or float(request_timeout_s) <= 0:
            raise ValueError("ingest.graphiti.max_tokens and request_timeout_s must be positive")
        self.store, self.llm, self.embedder = store, llm, embedder
        self.mode, self.bulk_size = mode, (int(bulk_size) if bulk_size is not None else None)
        self.version, self.library_path = (str(version) if version is not None else None), library_path
        self.base_url, self.model, self.api_key_env = base_url, model, api_key_env
        self.max_tokens, self.request_timeout_s = int(max_tokens), float(request_timeout_s)
        self.server = dict(server or {})
        self.work_dir = Path(work_dir) if work_dir else Path(f"{store.path}.graphiti")
        self.embed_kinds = tuple(embed_kinds)
        if reflexion_iterations is not None and int(reflexion_iterations) < 0:
            raise ValueError(f"ingest.graphiti.reflexion_iterations must be >= 0 or null, got {reflexion_iterations!r}")
        self.reflexion_iterations = None if reflexion_iterations is None else int(reflexion_iterations)

    # ------------------------------------------------------------------ public
    def ingest(self, episodes: Sequence[Episode]) -> BuildStats:
        """Add ``episodes`` (any groups) through graphiti-core, import each touched group, embed what is missing."""
        episodes = list({(e.group_id, e.id): e for e in episodes}.values())
        run = BuildStats(episodes=len(episodes))
        if not episodes:
            return run
        by_group: dict[str, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_group[e.group_id].append(e)
        with self.store.transaction():
            for eps in by_group.values():
                self.store.upsert_episodes(eps)
        from mnemis.ingest.graphiti.library import installed_version, load_graphiti

        module = load_graphiti(self.version, self.library_path)
        version = installed_version(module)
        if self.reflexion_iterations is not None:
            from mnemis.ingest.graphiti.run import set_reflexion

            set_reflexion(self.reflexion_iterations, version)
        added = {g: self.store.done(ADDED, g) for g in by_group}
        pending = any(e.id not in added[g] for g, eps in by_group.items() for e in eps)
        with self._endpoint(needed=pending) as endpoint:
            for g, eps in by_group.items():
                eps.sort(key=lambda e: (e.position, e.id))
                asyncio.run(self._group(g, eps, endpoint, run.counters))
            if pending:
                self.store.set_meta(META_KEY, {"graphiti_core": version, "mode": self.mode,
                                               "bulk_size": self.bulk_size, "model": endpoint.model,
                                               "reflexion_iterations": self.reflexion_iterations})
        groups = list(by_group)
        if self.embed_kinds:
            written = embed_missing(self.store, self.embedder, groups, kinds=self.embed_kinds)
            run.counters.update({f"embedded.{k}": v for k, v in written.items()})
        run.totals = dict(self.store.get_meta(STATS_KEY, {}) or {})
        return run

    add = ingest

    # ------------------------------------------------------------------ stages
    async def _group(self, group: str, episodes: list[Episode], endpoint: Any, counters: Counter) -> None:
        from mnemis.ingest.graphiti.run import add_episodes, open_graph, read_graph

        added = self.store.done(ADDED, group)
        todo = [e for e in episodes if e.id not in added]
        calls: Counter = Counter()
        graph = await open_graph(child_path(self.work_dir, group, ".kuzu"), group, endpoint, self.embedder, calls)
        try:
            def step(eps: list[Episode], seconds: float, error: BaseException | None) -> None:
                delta = Counter({f"graphiti.{k}": v for k, v in calls.items()})
                delta.update({"graphiti.episodes_added": len(eps), "graphiti.wall_ms": round(seconds * 1000)})
                if error is not None:
                    delta["graphiti.failed_steps"] += 1
                    delta[f"graphiti.failed.{type(error).__name__}"] += 1
                    log.warning("graphiti-core failed on %s: %s: %s", eps[0].id, type(error).__name__,
                                str(error)[:200])
                calls.clear()
                with self.store.transaction():
                    self.store.mark_done(ADDED, group, [e.id for e in eps])
                    bump_stats(self.store, delta)
                counters.update(delta)

            if todo:
                log.info("graphiti-core: %d episodes of %s (%s)", len(todo), group, self.mode)
                await add_episodes(graph, group, todo, mode=self.mode, bulk_size=self.bulk_size, on_step=step)
            records = await read_graph(graph, group)
        finally:
            await graph.close()
        with self.store.transaction():
            imported = import_graph(self.store, group, records)
            ids = [e.id for e in self.store.episodes(group)]
            for stage in DONE_STAGES:
                self.store.mark_done(stage, group, ids)
        counters.update(imported)

    @contextlib.contextmanager
    def _endpoint(self, needed: bool = True) -> Iterator[Any]:
        """The endpoint Graphiti's client talks to; when no episode is left to add (a resumed build that only
        imports again), one that is never called, so no server is started."""
        from mnemis.ingest.graphiti.run import Endpoint

        if not needed:
            yield Endpoint("http://127.0.0.1:9/v1", str(self.model or "unused"))
            return
        key = os.environ.get(self.api_key_env) or "EMPTY"
        common = {"max_tokens": self.max_tokens, "timeout_s": self.request_timeout_s}
        backend = getattr(self.llm, "backend", None)
        if self.base_url:
            model = self.model or getattr(backend, "model", None)
            if not model:
                raise ValueError("ingest.graphiti.model: the served model name is needed with ingest.graphiti.base_url")
            yield Endpoint(str(self.base_url), str(model), key, **common)
            return
        if backend is not None and getattr(backend, "base_url", None):  # an OpenAI-compatible backend
            common["max_tokens"] = graphiti_budget(self.max_tokens, backend)
            yield Endpoint(str(backend.base_url), str(self.model or backend.model),
                           str(getattr(backend, "api_key", key)), **common)
            return
        if type(backend).__name__ == "VLLMBackend":
            from mnemis.models.llm.local_server import local_endpoint

            if getattr(backend, "_llm", None) is not None:  # the same weights twice would not fit beside each other
                log.info("graphiti-core: the in-process %s engine is shut down while its server runs (it starts "
                         "again at the next reply asked of it)", backend.model)
                backend.close()
            llm_node = {"backend": {"model": backend.model, "cpu_threads_bind": backend.cpu_threads_bind}}
            server = {"request_timeout_s": self.request_timeout_s, **self.server}
            with local_endpoint(server, llm_node) as (url, served):
                yield Endpoint(url, served, "EMPTY", **common)
            return
        raise ValueError(
            "ingest.builder=graphiti: graphiti-core needs an OpenAI-compatible endpoint; set ingest.graphiti.base_url "
            "(and ingest.graphiti.model), or use llm=openai_compat, or a vLLM model (a local server is started on "
            f"its weights); the configured LLM backend is {type(backend).__name__}")
