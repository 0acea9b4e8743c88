"""Typed settings: the composed configuration read once, at the edge, into validated records.

The CLI (:mod:`mnemis.app.jobs`) and :meth:`mnemis.memory.Memory.from_config` turn the composed config (plain
values: Hydra resolves the tree, nothing below needs it) into a :class:`RunSettings`; below that line every
stage receives its own typed section (:class:`AnswerSettings`, :class:`JudgeSettings`,
:class:`RetrievalSettings`, :class:`StoreSettings`, :class:`PathsSettings`, ...), never the whole dict.
:func:`load_settings` reports **every** unknown or ill-typed key at once, each with its path
(``retrieval.system2.entity_rond: unknown key``), the way torchtune's config validation does.

The ``dataset`` and ``tracker`` sections are unions discriminated on their ``name`` (one record per dataset and
tracker backend: its own keys, nothing else). This module is on the ground floor: it imports no stage.

The values themselves live in one place: the YAML files under ``conf/``. The sections here have no defaults
of their own (every key must come from the config), except the few records a library caller builds without a
config (:class:`System2Config`, :class:`GradedSettings`, the Mem0 graph keys, :class:`ScaleSettings`), whose
defaults equal the YAML (``tests/unit/test_code_defaults.py``), and the optional keys the YAML leaves out (their
None is documented beside them). The parts built from a ``_target_`` (models, the base-graph builder, the
hierarchy) are checked against the signature of what they build without building it. :func:`instantiate` builds
such a node from plain values (no Hydra below the edge).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, model_validator

TARGET, PARTIAL = "_target_", "_partial_"
# the model nodes of a run: ``llm`` (the build), the LLM roles that fall back to it when null, the embedder and
# the reranker (the judges' nodes are under ``judge_llms``); mnemis.model_roles.ModelRoles lists their roles
LLM_ROLE_KEYS = ("selector_llm", "answer_llm")
MODEL_KEYS = ("llm", *LLM_ROLE_KEYS, "embedder", "reranker")


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


class GradedSettings(Section):
    """The graded scorers of BEAM and LoCoMo-Plus (:mod:`mnemis.eval.graded`). The defaults are for library use
    (``score_graded`` without a config) and equal ``conf/judge/beam.yaml`` (a unit test checks it)."""

    partial: Literal["keep", "floor"] = "keep"  # keep: a 0.5 item counts 0.5 | floor: it counts 0 (BEAM's int())
    max_lines: int = Field(40, ge=1)  # event ordering: reply lines aligned
    cognitive_partial: bool = False  # LoCoMo-Plus cognitive questions: also partial (0.5)


class GradedLeniencySettings(Section):
    """The graded judges' control replies (:mod:`mnemis.eval.graded_leniency`)."""

    enabled: bool
    n: int = Field(ge=1)
    seed: int


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
    graded: GradedSettings  # BEAM / LoCoMo-Plus scorers (mnemis.eval.graded)
    graded_leniency: GradedLeniencySettings


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


class System2Config(BaseModel):
    """Knobs of global selection (keys match ``conf/retrieval/*.yaml`` ``system2:``). The defaults are there for
    library use (``System2(store, llm)``) and equal ``conf/retrieval/mnemis.yaml`` (a unit test checks it)."""

    model_config = {"extra": "forbid"}

    entity_round: bool = True
    prompt_form: Literal["ours", "released"] = Field(
        "ours", description="ours: instructions as a system message, nodes before the query, prompt-local ids "
        "n1.., alphabetical order; released: the authors' form (one user message, the query first, store ids, "
        "get_all_children, nodes in store order)")
    use_summary: bool = False
    use_tags: bool = True
    include_shortcut_nodes: bool = Field(True, description="a take_all_children node enters the context itself")
    max_candidates_per_prompt: int | None = Field(
        60, ge=1, description="split wider candidate lists into several prompts; None = one prompt (the paper)")
    page_by_window: bool = Field(
        True, description="split a candidate list into pages whose estimated prompt and reply fit window_tokens, "
        "and split again any page the engine still rejects as too long (False: the paper, one prompt per round "
        "however long)")
    window_tokens: int | None = Field(
        None, ge=256, description="the selection model's window (page_by_window); None: no window paging")
    max_rounds: int = Field(12, ge=1, description="safety bound; a hierarchy of L layers needs L+1")
    max_facts_per_entity: int | None = Field(10, ge=0, description="None = all (the paper)")
    max_episodes_per_entity: int | None = Field(10, ge=0, description="None = all (the paper)")
    max_neighbours_per_entity: int | None = Field(5, ge=0, description="None = all (the paper)")
    max_items_per_type: int | None = Field(
        100, ge=1, description="cap per type after expansion, per query, ranked first; None = no cap (the paper)")
    constrain_ids: bool = Field(True, description="decoding schema restricts ids to the shown ones")
    min_top_selections: int = Field(
        1, ge=0, description="decoding schema: at least this many picks in the first round (0 = may pick none and "
                             "end the walk, the paper; needs constrain_ids)")
    min_lower_selections: int = Field(
        1, ge=0, description="decoding schema: at least this many picks in each prompt of every later round, so a "
                             "walk that picked a category goes on to its children (0 = may pick none and stop "
                             "there, the paper; needs constrain_ids)")
    salvage: bool = Field(True, description="keep the complete selections of a truncated reply")
    max_tokens: int | Literal["auto"] = Field(512, description="reply budget; auto = the schema's worst case")
    temperature: float = 0.0
    seed: int = 0


class System2Settings(System2Config):
    """System-2's section of the retrieval settings: every key of :class:`System2Config` required, plus
    ``enabled``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool

    @model_validator(mode="before")
    @classmethod
    def _every_key(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            missing = [k for k in cls.model_fields if k not in data]
            if missing:
                raise ValueError(f"missing key(s) {missing} (the YAML holds every value)")
        return data

    def config(self) -> System2Config:
        return System2Config(**{k: getattr(self, k) for k in System2Config.model_fields})


class FusionSettings(Section):
    mode: Literal["both", "system1", "system2"]
    scorer: Literal["reranker", "rrf", "rrf_routes"]
    k: int = Field(ge=1)
    graph_factor: int = Field(ge=1)
    rrf_k: int = Field(60, ge=0)
    max_pairs: int | None = Field(None, ge=3)
    system2_order: Literal["walk", "similarity"] = "similarity"
    system2_weight: float = Field(0.925, ge=0)


class ContextSettings(Section):
    max_tokens: int | None
    fact_dates: Literal["day", "datetime"] = "day"


class RetrievalSettings(Section):
    name: str | None
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


# ------------------------------------------------------------------------------------------ datasets
class SliceSettings(Section):
    """Which part of a dataset a run reads (:func:`mnemis.data.slicing.slice_dataset`)."""

    groups: list[str] | None
    max_groups: int | None
    sessions: list[int] | None  # [first, last], 1-based, inclusive
    max_questions: int | None  # per group
    categories: list[str] | None


class EpisodeSliceSettings(SliceSettings):
    episodes: list[int] | None  # [first, last] episodes of each group, 1-based


class LocomoSettings(Section):
    name: Literal["locomo"]
    path: str | None
    download: bool
    slice: EpisodeSliceSettings


class LongMemEvalSettings(Section):
    name: Literal["longmemeval"]
    path: str | None
    download: bool
    slice: SliceSettings


class LongMemEvalMSettings(Section):
    name: Literal["longmemeval_m"]
    path: str | None
    download: bool
    slice: EpisodeSliceSettings


class BeamSettings(Section):
    name: Literal["beam"]
    scale: str  # 100K | 500K | 1M | 10M (the loader names the known ones)
    path: str | None
    download: bool
    unknown_types: Literal["error", "keep"]
    slice: EpisodeSliceSettings


class LocomoPlusSettings(Section):
    name: Literal["locomo_plus"]
    path: str | None
    locomo_path: str | None
    download: bool
    assign: Literal["random", "cycle"]
    seed: int
    include_locomo: bool
    slice: EpisodeSliceSettings


DatasetSettings = Annotated[
    LocomoSettings | LongMemEvalSettings | LongMemEvalMSettings | BeamSettings | LocomoPlusSettings,
    Field(discriminator="name"),
]


# ------------------------------------------------------------------------------------------ baselines, tracking
# seconds as the YAML writes them: an int stays an int (a section's values are hashed into memory addresses)
Seconds = PositiveInt | PositiveFloat


class PeersSettings(Section):
    """The peer libraries as methods (:mod:`mnemis.baselines.peers`). The keys the YAML leaves out are optional:
    None means the behaviour written beside each."""

    base_url: str | None
    model: str | None
    api_key: str | None
    k: int = Field(ge=1)
    max_tokens: int = Field(ge=1)
    request_timeout_s: Seconds
    max_model_len: int = Field(ge=1)
    allow_long_context: bool
    gpu_memory_utilization: float = Field(gt=0, le=1)
    kv_cache_memory_bytes: int | None
    server_timeout_s: Seconds
    server_log: str | None
    dtype: str | None = None  # the server's dtype; None: auto (float32 on a CPU without bf16)
    cpu_threads_bind: str | None = None  # None: the in-process engine's (llm.backend), else every allowed core
    server_args: list[str] | None = None  # more `vllm serve` options
    timeout_s: Seconds | None = None  # a peer's worker process; None: 6 hours


class Mem0Settings(Section):
    """The Mem0 / Mem0g baselines (``conf/mem0/``; :class:`mnemis.baselines.mem0.pipeline.Mem0Config` documents
    each key). The graph keys are Mem0g's (``conf/mem0/mem0g.yaml``); Mem0's YAML leaves them out, and their
    defaults here equal Mem0g's YAML (a unit test checks it)."""

    name: Literal["mem0", "mem0g"]
    m: int = Field(ge=0)
    s: int = Field(ge=0)
    summary_every: int = Field(ge=0)
    k: int = Field(ge=0)
    per_speaker: bool
    pair_size: int = Field(ge=1)
    max_facts: int = Field(ge=1)
    graph: bool
    temperature: float = Field(ge=0)
    max_tokens: dict[Literal["mem0_extract", "mem0_update", "mem0_summary", "query_entities", "mem0g_entities",
                             "mem0g_relations", "mem0g_conflicts"], int | Literal["auto"]]
    graph_kind: Literal["triples", "graphiti"] = "triples"
    graph_k: int = Field(10, ge=0)
    graph_entity_k: int = 5
    graph_min_similarity: float = 0.5
    graph_node_threshold: float = 0.9
    graph_include_invalid: bool = True
    graph_context_window: int = 3


class NoTrackerSettings(Section):
    name: Literal["none"]


class JsonlTrackerSettings(Section):
    name: Literal["jsonl"]
    file: str
    run_name: str | None
    group: str | None


class WandbTrackerSettings(Section):
    name: Literal["wandb"]
    project: str
    mode: Literal["offline", "online", "disabled"]
    entity: str | None
    run_name: str | None
    group: str | None
    tags: list[str]


TrackerSettings = Annotated[NoTrackerSettings | JsonlTrackerSettings | WandbTrackerSettings,
                            Field(discriminator="name")]


ModelNode = dict[str, Any]  # a `_target_` node; checked against its target's signature (check_target)


class RunSettings(Section):
    """One run's settings: every top-level key of the composed config (an unknown one is an error)."""

    command: Literal["build", "eval", "run", "retrieve", "report"]
    methods: list[str]
    seed: int
    seeds: list[int] | None
    preflight: bool
    hub_offline: bool
    verbose: bool
    shard: str | None
    scale: ScaleSettings
    cache_mode: Literal["readwrite", "replay_only", "off"]
    retry_failed: bool
    reply_budget: Literal["raise", "fit", "off"]
    llm_chunk_size: int = Field(ge=1)
    rerank_cache: bool
    run_name: str
    run_dir: str | None
    ablation: str | None
    fidelity: str
    optimized_metric: str | None  # "<file>.json#<key path>" a job returns to an optimising sweeper
    answer: AnswerSettings
    judge: JudgeSettings
    retrieval: RetrievalSettings
    store: StoreSettings
    paths: PathsSettings
    dataset: DatasetSettings
    peers: PeersSettings
    tracker: TrackerSettings
    mem0: Mem0Settings
    mem0g: Mem0Settings
    llm: ModelNode | None  # None: a build that stores the data only (no LLM method)
    embedder: ModelNode
    reranker: ModelNode | None
    ingest: ModelNode
    hierarchy: ModelNode
    selector_llm: ModelNode | None
    answer_llm: ModelNode | None
    judge_llms: dict[str, ModelNode | None]

    def memory(self) -> MemorySettings:
        """The part a :class:`mnemis.memory.Memory` reads."""
        return MemorySettings(**{k: getattr(self, k) for k in MemorySettings.model_fields})

    def models(self) -> ModelSettings:
        """The part :class:`mnemis.components.Models` reads."""
        return ModelSettings(**{k: getattr(self, k) for k in ModelSettings.model_fields})


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

    def models(self) -> ModelSettings:
        """The models of a library memory: no judges, and no on-disk vector cache (``cache_mode`` off; each LLM
        node's own ``cache_mode`` still caches its replies)."""
        return ModelSettings(llm=self.llm, embedder=self.embedder, reranker=self.reranker,
                             selector_llm=self.selector_llm, answer_llm=self.answer_llm, judge_llms={},
                             paths=self.paths, rerank_cache=self.rerank_cache, cache_mode="off")


class ModelSettings(Section):
    """What :class:`mnemis.components.Models` builds its models from: the model nodes, where caches live, and
    whether they are used."""

    llm: ModelNode | None
    embedder: ModelNode | None
    reranker: ModelNode | None
    selector_llm: ModelNode | None
    answer_llm: ModelNode | None
    judge_llms: dict[str, ModelNode | None]
    paths: PathsSettings
    rerank_cache: bool
    cache_mode: Literal["readwrite", "replay_only", "off"]


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
_TAGGED = ("dataset", "tracker")  # unions discriminated on `name`: pydantic puts the tag second in an error's path


def _where(loc: Sequence[Any]) -> str:
    if len(loc) > 2 and loc[0] in _TAGGED:
        loc = [loc[0], *loc[2:]]
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
    for key in (*MODEL_KEYS, "ingest", "hierarchy"):
        problems += check_target(plain.get(key), key)
    for name, node in (plain.get("judge_llms") or {}).items():
        problems += check_target(node, f"judge_llms.{name}")
    if problems:
        raise SettingsError(problems)
    assert settings is not None
    return settings
