"""Typed settings: the composed configuration read once, at the edge, into validated records.

The CLI (:mod:`mnemis.app.jobs`) and :meth:`mnemis.memory.Memory.from_config` turn the composed config (plain
values: Hydra resolves the tree, nothing below needs it) into a :class:`RunSettings`; below that line every
stage receives its own typed section (:class:`AnswerSettings`, :class:`JudgeSettings`,
:class:`RetrievalSettings`, :class:`StoreSettings`, :class:`PathsSettings`, ...), never the whole dict.
:func:`load_settings` reports **every** unknown or ill-typed key at once, each with its path
(``retrieval.system2.entity_rond: unknown key``), the way torchtune's config validation does.

The values themselves live in one place: the YAML files under ``conf/``. The sections here have no defaults
of their own (every key must come from the config), and the parts built from a ``_target_`` (models, the
base-graph builder, the hierarchy) are checked against the signature of what they build without building it.
:func:`instantiate` builds such a node from plain values (no Hydra below the edge).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mnemis.retrieve.system2 import System2Config

TARGET, PARTIAL = "_target_", "_partial_"


class SettingsError(ValueError):
    """Every problem of a configuration, one per line, each naming its key."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} configuration problem(s):\n" + "\n".join(f"  {p}" for p in self.problems))


class Section(BaseModel):
    """A settings section: every key required (the YAML holds the values), no unknown key."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------ sections
class AnswerSettings(Section):
    prompt: str
    prompt_by_method: dict[str, str]
    max_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0)


class JudgeEntry(Section):
    name: str
    llm: str | None = None
    criterion: str | None = None


class LeniencySettings(Section):
    enabled: bool
    path: str | None
    n: int | None
    seed: int


class BootstrapSettings(Section):
    n_boot: int = Field(ge=1)
    seed: int
    alpha: float = Field(gt=0, lt=1)


class JudgeSettings(Section):
    judges: list[JudgeEntry | str]
    max_tokens: int | Literal["auto"]
    longmemeval_format: Literal["reasoned", "yes_no"]
    separate_categories: list[str]
    audit: bool
    audit_path: str | None
    leniency: LeniencySettings
    bootstrap: BootstrapSettings
    failed: Literal["wrong", "skip"]
    graded: dict[str, Any] | None = None  # BEAM / LoCoMo-Plus scorers (mnemis.eval.graded)
    graded_leniency: dict[str, Any] | None = None


class System1Settings(Section):
    enabled: bool
    k: int = Field(ge=1)
    routes: Literal["both", "rag", "graph"]
    rrf_k: float
    weights: dict[str, float]
    pool_factor: float
    graph_factor: int = Field(ge=1)
    min_cosine: float | None
    bm25: bool
    vector: bool
    bm25_params: dict[str, Any]
    recipe: dict[str, Any]
    query_normalize: bool
    index: str
    index_params: dict[str, Any]
    device: str

    def kwargs(self) -> dict[str, Any]:
        """The keywords of :class:`mnemis.retrieve.system1.System1` (everything but ``enabled``)."""
        return self.model_dump(exclude={"enabled"})


class System2Settings(System2Config):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool

    def config(self) -> System2Config:
        return System2Config(**self.model_dump(exclude={"enabled"}))


class FusionSettings(Section):
    mode: Literal["both", "system1", "system2"]
    scorer: Literal["reranker", "rrf", "rrf_routes"]
    k: int = Field(ge=1)
    graph_factor: int = Field(ge=1)
    rrf_k: int = Field(60, ge=0)
    max_pairs: int | None = Field(None, ge=3)


class ContextSettings(Section):
    max_tokens: int | None
    fact_dates: Literal["day", "datetime"] = "day"


class RetrievalSettings(Section):
    name: str | None = None
    k: int = Field(ge=1)
    system1: System1Settings
    system2: System2Settings
    fusion: FusionSettings
    context: ContextSettings

    def for_route(self, route: str) -> RetrievalSettings:
        """These settings for one route: ``both``, ``system1`` (System-2 off) or ``system2``."""
        if route not in ("both", "system1", "system2"):
            raise ValueError(f"route={route!r}: choose one of ['both', 'system1', 'system2']")
        if route == "both":
            return self
        update: dict[str, Any] = {"fusion": self.fusion.model_copy(update={"mode": route})}
        if route == "system1":
            update["system2"] = self.system2.model_copy(update={"enabled": False})
        return self.model_copy(update=update)


class StoreSettings(Section):
    filename: str
    time_zone: str
    lock_timeout_s: float | None


class PathsSettings(Section):
    artifacts_dir: str
    cache_dir: str
    data_dir: str | None
    shared_data_dir: str | None


class ScaleSettings(Section):
    """Where a sharded job keeps its state (:mod:`mnemis.scale.node_state`)."""

    local_dir: str | None = None  # node-local root of the shards' state; None: $SLURM_TMPDIR, $TMPDIR, cache dir
    share_cache: bool = False  # one host only: the shards share paths.cache_dir (cross-shard reuse)
    check_fs: bool = True  # refuse SQLite (stores, caches) on a network file system
    gpus_per_job: int = Field(0, ge=0)  # GPUs of one job: Ray's num_gpus; one set per joblib worker


ModelNode = dict[str, Any]  # a `_target_` node; checked against its target's signature (check_target)


class RunSettings(Section):
    """One run's settings: every top-level key of the composed config (an unknown one is an error)."""

    command: Literal["build", "eval", "run", "report"]
    methods: list[str]
    seed: int
    seeds: list[int] | None
    preflight: bool
    hub_offline: bool
    verbose: bool
    shard: str | None
    scale: ScaleSettings = ScaleSettings()
    cache_mode: Literal["readwrite", "replay_only", "off"]
    retry_failed: bool
    reply_budget: Literal["raise", "fit", "off"]
    llm_chunk_size: int = Field(ge=1)
    rerank_cache: bool
    run_name: str
    run_dir: str | None
    ablation: str | None
    fidelity: str
    optimized_metric: str | None = None  # "<file>.json#<key path>" a job returns to an optimising sweeper
    answer: AnswerSettings
    judge: JudgeSettings
    retrieval: RetrievalSettings
    store: StoreSettings
    paths: PathsSettings
    dataset: dict[str, Any]
    peers: dict[str, Any]
    tracker: dict[str, Any]
    mem0: dict[str, Any]
    mem0g: dict[str, Any]
    llm: ModelNode | None  # None: a build that stores the data only (no LLM method)
    embedder: ModelNode
    reranker: ModelNode | None
    ingest: ModelNode
    hierarchy: ModelNode
    selector_llm: ModelNode | None
    answer_llm: ModelNode | None
    judge_llms: dict[str, ModelNode | None]

    def plain(self) -> dict[str, Any]:
        """The settings as plain values, as the config gave them (keys it did not set are left out)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def memory(self) -> MemorySettings:
        """The part a :class:`mnemis.memory.Memory` reads."""
        return MemorySettings(**{k: getattr(self, k) for k in MemorySettings.model_fields})


class MemorySettings(Section):
    """What a memory needs: where it lives, how it is built and read, and how it answers."""

    store: StoreSettings
    paths: PathsSettings
    llm: ModelNode | None
    embedder: ModelNode
    reranker: ModelNode | None
    ingest: ModelNode
    hierarchy: ModelNode
    retrieval: RetrievalSettings
    answer: AnswerSettings
    selector_llm: ModelNode | None
    answer_llm: ModelNode | None
    rerank_cache: bool


# ------------------------------------------------------------------------------------------ `_target_` nodes
def _resolve(target: str) -> Any:
    module, _, name = str(target).rpartition(".")
    if not module:
        raise ImportError(f"{target!r} is not a dotted path")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def check_target(node: Any, where: str) -> list[str]:
    """Problems of a ``_target_`` node (recursively for nested ones): a target that cannot be imported, or keys
    its signature does not take. Nothing is built."""
    if not isinstance(node, Mapping) or TARGET not in node:
        return []
    try:
        target = _resolve(node[TARGET])
    except (ImportError, AttributeError) as exc:
        return [f"{where}.{TARGET}: cannot import {node[TARGET]!r} ({exc})"]
    keys = [k for k in node if k not in (TARGET, PARTIAL)]
    problems = []
    if isinstance(target, type) and issubclass(target, BaseModel):
        fields = set(target.model_fields)
        open_ = target.model_config.get("extra") == "allow"
    else:
        try:
            params = inspect.signature(target).parameters.values()
        except (TypeError, ValueError):
            params = []
        fields = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        open_ = any(p.kind is p.VAR_KEYWORD for p in params)
    if not open_:
        problems += [f"{where}.{k}: unknown key for {node[TARGET]}" for k in keys if k not in fields]
    for k in keys:
        problems += check_target(node[k], f"{where}.{k}")
    return problems


def instantiate(node: Any, **kwargs: Any) -> Any:
    """Build a ``_target_`` node from plain values: nested ``_target_`` nodes first; ``_partial_: true`` gives a
    ``functools.partial`` (completed with ``kwargs`` later). Other values are returned as they are."""
    import functools

    if isinstance(node, list):
        return [instantiate(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    if TARGET not in node:
        return {k: instantiate(v) for k, v in node.items()}
    target = _resolve(node[TARGET])
    args = {k: instantiate(v) for k, v in node.items() if k not in (TARGET, PARTIAL)}
    if node.get(PARTIAL):
        return functools.partial(target, **args, **kwargs)
    return target(**args, **kwargs)


# ------------------------------------------------------------------------------------------ loading
def _where(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "list[...]")))]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out


def _messages(exc: ValidationError) -> list[str]:
    seen, out = set(), []
    for e in exc.errors():
        where = _where(e.get("loc", ()))
        msg = "unknown key" if e.get("type") == "extra_forbidden" else e.get("msg", "")
        line = f"{where}: {msg}"
        if where not in seen:  # a union reports one error per alternative: keep the first
            seen.add(where)
            out.append(line)
    return out


def load_settings(plain: Mapping[str, Any]) -> RunSettings:
    """Validate a composed config (plain values) into :class:`RunSettings`; raises :class:`SettingsError` with
    every problem at once: unknown keys, wrong types, bad ``_target_`` nodes, and each section's own checks."""
    problems: list[str] = []
    settings = None
    try:
        settings = RunSettings.model_validate(dict(plain))
    except ValidationError as exc:
        problems += _messages(exc)
    for key in ("llm", "embedder", "reranker", "ingest", "hierarchy", "selector_llm", "answer_llm"):
        problems += check_target(plain.get(key), key)
    for name, node in (plain.get("judge_llms") or {}).items():
        problems += check_target(node, f"judge_llms.{name}")
    for key in ("mem0", "mem0g"):
        if isinstance(plain.get(key), Mapping):
            from mnemis.baselines.mem0.pipeline import Mem0Config

            try:
                Mem0Config.from_mapping(plain[key])
            except (ValueError, TypeError) as exc:
                problems.append(f"{key}: {exc}")
    if problems:
        raise SettingsError(problems)
    assert settings is not None
    return settings
