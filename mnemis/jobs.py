"""The jobs behind the CLI: build a memory, evaluate methods on it, run both, regenerate a report.

``run_command`` receives the composed config once. Models are built once per process (a multirun
sweep reuses the engine between jobs) and handed to the stages as objects; everything else gets plain
values. A built memory is addressed by a hash of the build-relevant config, so ``eval`` and sweeps
over retrieval settings reuse it and make no extraction calls.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.config import build, config_hash, drop_fields, to_plain
from mnemis.data.load import load_dataset
from mnemis.data.sources import SOURCES, DataDirs, side_file
from mnemis.roles import check_roles, judge_specs, roles_summary, run_seeds
from mnemis.scale.shard import restrict_dataset, sharded_address
from mnemis.store import GraphStore
from mnemis.types import Dataset, Question

log = logging.getLogger(__name__)

# Config sections whose values change what a build produces (the artifact address). The address also
# covers the build-stage prompts (their text and schema, ``build_prompt_fingerprints``) and
# BUILD_CODE_VERSION; fields that only say where files go or how progress is shown are left out, so
# moving the response cache (paths.cache_dir) keeps the address.
BUILD_KEYS = ["dataset", "llm", "embedder", "ingest", "hierarchy"]
# Bump when the extraction / hierarchy logic changes what a build writes (prompts are hashed on their own).
BUILD_CODE_VERSION = 2
NOT_BUILD_FIELDS = frozenset({"cache_dir", "cache_mode", "show_progress"})
GRAPH_METHODS = {"mnemis"}
METHODS = ("mnemis", "rag", "full_context", "mem0", "mem0g")
_MODELS: dict[str, Any] = {}  # process-level model cache (one engine per config, reused across multirun jobs)


def build_view(plain: dict[str, Any], keys: Sequence[str] = BUILD_KEYS, *, prompts: str = "build") -> dict[str, Any]:
    """What addresses a built memory: the build sections (without file locations), the prompt
    fingerprints of ``prompts`` ("build" or "mem0") and the build code version."""
    from mnemis.prompts.fingerprint import build_prompt_fingerprints, mem0_prompt_fingerprints

    view = {k: drop_fields(plain.get(k), NOT_BUILD_FIELDS) for k in keys if k in plain}
    view["prompts"] = build_prompt_fingerprints() if prompts == "build" else mem0_prompt_fingerprints()
    view["build_code_version"] = BUILD_CODE_VERSION
    return view


def build_address(plain: dict[str, Any]) -> str:
    view = build_view(plain)
    return sharded_address(config_hash(view, sorted(view)), plain)


def load_configured_dataset(plain: dict[str, Any]) -> Dataset:
    ds = plain["dataset"]
    sl = ds.get("slice") or {}
    data = load_dataset(
        ds["name"], ds.get("path"), download=bool(ds.get("download", True)), groups=sl.get("groups"),
        data_dirs=DataDirs.from_paths(plain.get("paths")),
        max_groups=sl.get("max_groups"), sessions=sl.get("sessions"), max_questions=sl.get("max_questions"),
        categories=sl.get("categories"),
    )
    return restrict_dataset(data, plain.get("shard"))


def artifact_dir(plain: dict[str, Any]) -> Path:
    return Path(plain["paths"]["artifacts_dir"]) / build_address(plain)


class Models:
    """Builds each configured model on first use and keeps it for the process. LLM roles with the same
    config share one engine (e.g. a judge slot set to ``${llm}``)."""

    def __init__(self, cfg: Any, plain: dict[str, Any]) -> None:
        self.cfg, self.plain = cfg, plain
        self._llms: list[Any] = []

    def _get(self, key: str, node: Any = None, plain: Any = None, ident_key: str | None = None,
             **kwargs: Any) -> Any:
        if node is None:
            node, plain = self.cfg.get(key), self.plain.get(key)
        if node is None:
            raise ValueError(f"config has no `{key}` node; choose one, e.g. {key}=...")
        ident = (ident_key or key) + ":" + json.dumps(plain, sort_keys=True, default=str)
        if ident not in _MODELS:
            t0 = time.perf_counter()
            obj = build(node)
            if isinstance(obj, functools.partial):
                obj = obj(**kwargs)
            _MODELS[ident] = obj
            log.info("built %s in %.1f s", key, time.perf_counter() - t0)
        return _MODELS[ident]

    def _llm_role(self, key: str, node: Any, plain: Any) -> Any:
        obj = self._get(key, node, plain, ident_key="llm")
        if not any(obj is o for o in self._llms):
            self._llms.append(obj)
        return obj

    @property
    def llm(self) -> Any:
        return self._llm_role("llm", self.cfg.get("llm"), self.plain.get("llm"))

    def role(self, key: str) -> Any:
        """The LLM of a role in ``mnemis.roles.ROLE_KEYS`` (its own config, or ``llm`` when null)."""
        if self.plain.get(key) is None:
            return self.llm
        return self._llm_role(key, self.cfg.get(key), self.plain.get(key))

    @property
    def selector_llm(self) -> Any:
        return self.role("selector_llm")

    @property
    def answer_llm(self) -> Any:
        return self.role("answer_llm")

    @property
    def embedder(self) -> Any:
        return self._get("embedder")

    @property
    def reranker(self) -> Any:
        """The configured reranker behind a deduplicating score cache (``rerank_cache: false`` = dedup only)."""
        key = "rerank_cache:" + json.dumps([self.plain.get("reranker"), self.plain.get("rerank_cache", True)],
                                           sort_keys=True, default=str)
        if key not in _MODELS:
            from mnemis.models.rerank_cache import CachedReranker

            cache = Path(self.plain["paths"]["cache_dir"]) / "rerank" if self.plain.get("rerank_cache", True) else None
            _MODELS[key] = CachedReranker(self._get("reranker", embedder=self.embedder), cache)
        return _MODELS[key]

    def judges(self, specs: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``{name: Judge}`` for ``judge_specs`` (run ``check_roles`` first for friendly errors)."""
        from mnemis.eval.judge import Judge

        out = {}
        for spec in judge_specs(self.plain) if specs is None else specs:
            slot = spec["llm"]
            if slot is None:
                llm = self.llm
            else:
                node = (self.cfg.get("judge_llms") or {}).get(slot)
                if node is None:
                    raise ValueError(f"judge {spec['name']!r}: judge_llms.{slot} is empty")
                llm = self._llm_role(f"judge_llms.{slot}", node, (self.plain.get("judge_llms") or {}).get(slot))
            out[spec["name"]] = Judge(llm, spec["criterion"])
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
        return key + ":" + json.dumps(self.plain.get(key), sort_keys=True, default=str) in _MODELS

    def reset_ledgers(self) -> None:
        """Zero the token ledgers (and reranker cache counts) of models kept from an earlier job (multirun)."""
        for obj in _MODELS.values():
            if hasattr(obj, "ledger"):
                obj.ledger.reset()
            if hasattr(obj, "reset_stats"):
                obj.reset_stats()


def _write(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str))


def run_build(plain: dict[str, Any], out: Path, models: Models | None = None) -> dict[str, Any]:
    """Store the dataset slice, then (when a graph method is asked for) the base graph and hierarchy.

    Each stage is resumable and recorded in the store's meta, so a rerun of a finished build makes no
    LLM call at all.
    """
    data = load_configured_dataset(plain)
    path = artifact_dir(plain) / plain["store"]["filename"]
    methods = list(plain.get("methods") or [])
    stages: dict[str, Any] = {}
    with GraphStore(path) as store:
        store.set_meta("build_config", build_view(plain))
        store.upsert_episodes(data.episodes)
        store.upsert_questions(data.questions)
        if models is not None and (GRAPH_METHODS & set(methods) or "rag" in methods):
            from mnemis.ingest.embed_items import embed_missing

            stages["embed_episodes"] = embed_missing(store, models.embedder, data.groups, kinds=("episode",))
        if models is not None and GRAPH_METHODS & set(methods):
            stages.update(_build_graph(plain, store, data, models, out))
        counts = {g: store.counts(g) for g in data.groups}
    summary = {"store": str(path), "dataset": data.summary(), "store_counts": counts, "stages": stages}
    _write(out / "build_summary.json", summary)
    return summary


def _build_graph(plain: dict[str, Any], store: GraphStore, data: Dataset, models: Models, out: Path) -> dict:
    from mnemis.hierarchy import organize

    stages: dict[str, Any] = {}
    if store.get_meta("built:base_graph") is None:
        t0 = time.perf_counter()
        builder = build(models.cfg.ingest)(store=store, llm=models.llm, embedder=models.embedder)
        stats = builder.ingest(data.episodes)
        stats_d = stats.to_dict()
        store.set_meta("built:base_graph", {"stats": stats_d, "seconds": time.perf_counter() - t0})
        stages["base_graph"] = stats_d
    else:
        stages["base_graph"] = "reused"
    hier = store.get_meta("built:hierarchy")
    if hier is None:
        metrics = organize(store, models.llm, data.groups, build(models.cfg.hierarchy), embedder=models.embedder)
        hier = {g: m.model_dump() if hasattr(m, "model_dump") else m for g, m in metrics.items()}
        store.set_meta("built:hierarchy", hier)
        stages["hierarchy"] = "built"
    else:
        stages["hierarchy"] = "reused"
    _write(out / "hierarchy_metrics.json", hier)
    return stages


def require_built(plain: dict[str, Any], path: Path, methods: Sequence[str]) -> None:
    """``mnemis eval`` needs a built memory: a clear error naming its address and the build command."""
    missing = "" if path.exists() else "no memory"
    if not missing and GRAPH_METHODS & set(methods):
        with GraphStore(path) as store:
            if store.get_meta("built:hierarchy") is None:
                missing = "an unfinished memory (no hierarchy)"
    if missing:
        raise SystemExit(
            f"mnemis eval: {missing} at {path.parent} (build address {build_address(plain)}). Build it first with "
            "`mnemis build <the same overrides>`, or use `mnemis run`, which builds and then evaluates.")


def run_eval(plain: dict[str, Any], out: Path, models: Models, tracker: Any = None) -> dict[str, Any]:
    """Every configured method on the built memory: retrieve, answer, judge; then metrics and report."""
    from mnemis.eval.harness import evaluate_method, finalize_run
    from mnemis.eval.tracking import make_tracker
    from mnemis.prompts.answer import answer_prompt_for

    data = load_configured_dataset(plain)
    methods = list(plain.get("methods") or [])
    judge_cfg = plain["judge"]
    judges = models.judges()
    answer_cfg = plain.get("answer") or {}
    seeds = run_seeds(plain)
    questions = list(data.questions)
    if not questions:
        raise SystemExit(f"mnemis {plain['command']}: the dataset slice has no questions (a question is kept only "
                         "when all its evidence lies inside the slice); widen dataset.slice")
    path = artifact_dir(plain) / plain["store"]["filename"]
    if plain.get("command") == "eval":
        require_built(plain, path, methods)
    own_tracker = tracker is None
    if own_tracker:
        tracker = make_tracker(plain.get("tracker"), dir=str(out))
        tracker.log_config(plain)
    dirs = DataDirs.from_paths(plain.get("paths"))
    audit = judge_cfg.get("audit") and data.name == "locomo" and (
        judge_cfg.get("audit_path") or side_file("locomo_audit", dirs))
    if audit and not Path(audit).exists():
        audit = False
    timings: dict[str, float] = {}
    recall: dict[str, Any] = {}
    with GraphStore(path) as store:
        for method in methods:
            t0 = time.perf_counter()
            contexts, retrieved = _method_contexts(method, plain, store, data, questions, models, out, recall)
            for seed in seeds:  # retrieval once; answering and judging once per seed
                evaluate_method(
                    method=method, questions=questions, contexts=contexts, answer_llm=models.answer_llm,
                    judges=judges, run_dir=out, retrieved=retrieved, seed=seed, audit=audit,
                    answer_max_tokens=int(answer_cfg.get("max_tokens", 256)),
                    answer_prompt=answer_prompt_for(answer_cfg, method),
                    answer_temperature=float(answer_cfg.get("temperature") or 0.0),
                    judge_max_tokens=judge_cfg.get("max_tokens", 200),  # an int or "auto" (the schema's worst case)
                )
            timings[method] = round(time.perf_counter() - t0, 2)
    if recall:
        _write(out / "recall.json", recall)
    _write(out / "timings.json", timings)
    roles = roles_summary(plain)
    roles["answer_prompts"] = {m: answer_prompt_for(answer_cfg, m).key for m in methods}
    roles["seeds"] = seeds
    _write(out / "roles.json", roles)
    len_cfg = dict(judge_cfg.get("leniency") or {})
    if len_cfg.get("enabled") and data.name == "locomo" and not len_cfg.get("path"):
        len_cfg["path"] = side_file("judge_stress", dirs) or dirs.home / SOURCES["judge_stress"].filename
    boot = judge_cfg.get("bootstrap") or {}
    metrics = finalize_run(
        out, ledger=models.ledger(), leniency_judges=judges if len_cfg.get("enabled") and data.name == "locomo" else None,
        leniency_n=len_cfg.get("n"), leniency_path=len_cfg.get("path"),
        separate=tuple(judge_cfg.get("separate_categories") or ()), failed=judge_cfg.get("failed", "wrong"),
        n_boot=int(boot.get("n_boot", 1000)), seed=int(boot.get("seed", 0)), tracker=tracker,
        headline=roles["headline_judge"],
    )
    if own_tracker:
        tracker.finish()
    return {"metrics": metrics, "timings": timings, "report": str(out / "report.md")}


def _method_contexts(
    method: str, plain: dict[str, Any], store: GraphStore, data: Dataset, questions: list[Question],
    models: Models, out: Path, recall: dict[str, Any],
) -> tuple[list[str], list[Any] | None]:
    if method == "full_context":
        from mnemis.baselines.full_context import full_context

        answer_node = plain.get("answer_llm") or plain["llm"]
        max_len = int(answer_node.get("backend", {}).get("max_model_len") or 8192)
        fc = full_context(data.episodes, questions, max_model_len=max_len, llm=models.answer_llm)
        _write(out / "full_context.json", fc.summary())
        return fc.contexts, None
    if method == "rag":
        from mnemis.baselines.rag import rag_contexts
        from mnemis.eval.route_recall import route_recall

        s1 = {k: v for k, v in (plain["retrieval"].get("system1") or {}).items() if k not in ("enabled", "routes", "k")}
        contexts, retrieved = rag_contexts(store, models.embedder, questions, k=int(plain["retrieval"]["k"]), **s1)
        recall["rag"] = route_recall(store, questions, {"rag": retrieved})["rag"]
        return contexts, retrieved
    if method in ("mem0", "mem0g"):
        from mnemis.baselines.mem0.pipeline import run_mem0

        view = build_view(plain, [method], prompts="mem0")  # its settings and prompts address its memory
        work = artifact_dir(plain) / f"{method}-{config_hash(view, sorted(view))}"
        run = run_mem0(data, models.llm, models.embedder, plain[method], work)
        _write(out / f"{method}_stats.json", run.stats)
        return run.contexts, run.retrieved
    # mnemis: System-1 + System-2 + fusion over the built graph
    from mnemis.eval.route_recall import route_recall
    from mnemis.retrieve.pipeline import run_retrieval

    reranker = models.reranker if (plain["retrieval"].get("fusion") or {}).get("scorer") == "reranker" else None
    res = run_retrieval(store, questions, plain["retrieval"], embedder=models.embedder, llm=models.selector_llm,
                        reranker=reranker)
    res.save(out)
    if hasattr(reranker, "stats"):
        _write(out / "rerank_cache.json", reranker.stats.to_dict())
    recall.update({f"mnemis/{k}": v for k, v in route_recall(store, questions, res.routes()).items()})
    return res.texts, res.contexts


def print_summary(result: dict[str, Any]) -> None:
    if "build" in result:
        b = result["build"]
        ds = b["dataset"]
        print(f"dataset {ds['dataset']}: {ds['groups']} groups, {ds['sessions']} sessions, "
              f"{ds['episodes']} episodes, {ds['questions']} questions {ds['questions_by_category']}")
        print(f"memory: {b['store']}")
        for gid, c in b["store_counts"].items():
            print(f"  {gid}: " + ", ".join(f"{k}={v}" for k, v in c.items() if v))
    if "eval" in result:
        for method, m in result["eval"]["metrics"].items():
            print(f"{method}: {_headline(m)}")
        print(f"report: {result['eval']['report']}")


def _headline(m: Any) -> str:
    try:
        name = m.get("headline_judge") or next(iter(m["judges"]))
        o = m["judges"][name]["raw"]["overall"]
        f1 = (m.get("answer_scores") or {}).get("overall", {}).get("f1")
        return (f"accuracy {o['accuracy']:.3f} on {o['total']} questions (judge {name})"
                + (f", token F1 {f1:.3f}" if f1 is not None else ""))
    except (KeyError, TypeError, StopIteration, AttributeError):
        return json.dumps(m, default=str)[:200]


def run_command(cfg: Any, output_dir: str | Path) -> dict[str, Any]:
    plain = to_plain(cfg)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = plain["command"]
    if command == "report":
        from mnemis.eval.report import write_report

        run_dir = plain.get("run_dir")
        if not run_dir or not Path(run_dir).is_dir():
            raise SystemExit(f"mnemis report: run_dir={run_dir!r} is not a run directory (pass run_dir=runs/...)")
        path = write_report(run_dir)
        print(f"report: {path}")
        return {"report": str(path)}
    methods = list(plain.get("methods") or [])
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise SystemExit(f"mnemis {command}: methods={methods}: choose one or more of {list(METHODS)}")
    if command in ("eval", "run"):
        check_roles(plain)  # before any model loads
    _write(out / "config.json", plain)
    models = Models(cfg, plain)
    result: dict[str, Any] = {"command": command, "output_dir": str(out)}
    models.reset_ledgers()
    from mnemis import progress
    from mnemis.eval.tracking import log_ledger, make_tracker, watch_progress

    tracker = make_tracker(plain.get("tracker"), dir=str(out))  # one run per job: build and eval
    tracker.log_config(plain)
    listener = watch_progress(tracker)
    try:
        if command in ("build", "run"):
            result["build"] = run_build(plain, out, models if plain.get("llm") else None)
            if models.built("llm"):
                log_ledger(tracker, "build", models.ledger())
        if command in ("eval", "run"):
            result["eval"] = run_eval(plain, out, models, tracker=tracker)
            log_ledger(tracker, "eval", models.ledger())
        elif models.built("llm"):
            models.ledger().save(out / "ledger.json")
    finally:
        progress.remove_listener(listener)
        tracker.finish()
    print_summary(result)
    print(f"outputs: {out}")
    return result
