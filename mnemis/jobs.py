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

from mnemis.config import build, config_hash, to_plain
from mnemis.data.load import load_dataset
from mnemis.scale.shard import restrict_dataset, sharded_address
from mnemis.store import GraphStore
from mnemis.types import Dataset, Question

log = logging.getLogger(__name__)

# Config sections whose values change what a build produces (the artifact address).
BUILD_KEYS = ["dataset", "llm", "embedder", "ingest", "hierarchy", "prompts"]
GRAPH_METHODS = {"mnemis"}
METHODS = ("mnemis", "rag", "full_context", "mem0", "mem0g")
_MODELS: dict[str, Any] = {}  # process-level model cache (one engine per config, reused across multirun jobs)


def build_address(plain: dict[str, Any]) -> str:
    return sharded_address(config_hash(plain, [k for k in BUILD_KEYS if k in plain]), plain)


def load_configured_dataset(plain: dict[str, Any]) -> Dataset:
    ds = plain["dataset"]
    sl = ds.get("slice") or {}
    data = load_dataset(
        ds["name"], ds.get("path"), download=bool(ds.get("download", False)), groups=sl.get("groups"),
        max_groups=sl.get("max_groups"), sessions=sl.get("sessions"), max_questions=sl.get("max_questions"),
        categories=sl.get("categories"),
    )
    return restrict_dataset(data, plain.get("shard"))


def artifact_dir(plain: dict[str, Any]) -> Path:
    return Path(plain["paths"]["artifacts_dir"]) / build_address(plain)


class Models:
    """Builds each configured model on first use and keeps it for the process."""

    def __init__(self, cfg: Any, plain: dict[str, Any]) -> None:
        self.cfg, self.plain = cfg, plain

    def _get(self, key: str, node: Any = None, plain: Any = None, **kwargs: Any) -> Any:
        if node is None:
            node, plain = self.cfg.get(key), self.plain.get(key)
        if node is None:
            raise ValueError(f"config has no `{key}` node; choose one, e.g. {key}=...")
        ident = key + ":" + json.dumps(plain, sort_keys=True, default=str)
        if ident not in _MODELS:
            t0 = time.perf_counter()
            obj = build(node)
            if isinstance(obj, functools.partial):
                obj = obj(**kwargs)
            _MODELS[ident] = obj
            log.info("built %s in %.1f s", key, time.perf_counter() - t0)
        return _MODELS[ident]

    @property
    def llm(self) -> Any:
        return self._get("llm")

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

    def judges(self, names: Sequence[str]) -> dict[str, Any]:
        """``main`` is the run's LLM; any other name is a top-level ``judge_llms.<name>`` LLM config."""
        out = {}
        for name in names:
            if name == "main":
                out[name] = self.llm
                continue
            node = (self.cfg.get("judge_llms") or {}).get(name)
            if node is None:
                raise ValueError(f"judge {name!r} has no config: add judge_llms.{name}=<an llm config node>")
            out[name] = self._get(f"judge_llms.{name}", node, (self.plain.get("judge_llms") or {}).get(name))
        return out

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
        store.set_meta("build_config", {k: plain.get(k) for k in BUILD_KEYS if k in plain})
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


def run_eval(plain: dict[str, Any], out: Path, models: Models) -> dict[str, Any]:
    """Every configured method on the built memory: retrieve, answer, judge; then metrics and report."""
    from mnemis.eval.harness import evaluate_method, finalize_run
    from mnemis.eval.tracking import make_tracker

    data = load_configured_dataset(plain)
    methods = list(plain.get("methods") or [])
    judge_cfg = plain["judge"]
    judges = models.judges(judge_cfg.get("judges") or ["main"])
    questions = list(data.questions)
    if not questions:
        raise SystemExit(f"mnemis {plain['command']}: the dataset slice has no questions (a question is kept only "
                         "when all its evidence lies inside the slice); widen dataset.slice")
    path = artifact_dir(plain) / plain["store"]["filename"]
    tracker = make_tracker(plain.get("tracker"), dir=str(out))
    tracker.log_config(plain)
    audit = judge_cfg.get("audit_path") if judge_cfg.get("audit") and data.name == "locomo" else False
    if audit and not Path(audit).exists():
        audit = False
    timings: dict[str, float] = {}
    recall: dict[str, Any] = {}
    with GraphStore(path) as store:
        for method in methods:
            t0 = time.perf_counter()
            contexts, retrieved = _method_contexts(method, plain, store, data, questions, models, out, recall)
            evaluate_method(
                method=method, questions=questions, contexts=contexts, answer_llm=models.llm, judges=judges,
                run_dir=out, retrieved=retrieved, seed=int(plain.get("seed", 0)), audit=audit,
                answer_max_tokens=int(plain.get("answer", {}).get("max_tokens", 256)),
                judge_max_tokens=int(judge_cfg.get("max_tokens", 200)),
            )
            timings[method] = round(time.perf_counter() - t0, 2)
    if recall:
        _write(out / "recall.json", recall)
    _write(out / "timings.json", timings)
    len_cfg = judge_cfg.get("leniency") or {}
    boot = judge_cfg.get("bootstrap") or {}
    metrics = finalize_run(
        out, ledger=models.llm.ledger, leniency_judges=judges if len_cfg.get("enabled") and data.name == "locomo" else None,
        leniency_n=len_cfg.get("n"), leniency_path=len_cfg.get("path"),
        separate=tuple(judge_cfg.get("separate_categories") or ()), failed=judge_cfg.get("failed", "wrong"),
        n_boot=int(boot.get("n_boot", 1000)), seed=int(boot.get("seed", 0)), tracker=tracker,
    )
    tracker.finish()
    return {"metrics": metrics, "timings": timings, "report": str(out / "report.md")}


def _method_contexts(
    method: str, plain: dict[str, Any], store: GraphStore, data: Dataset, questions: list[Question],
    models: Models, out: Path, recall: dict[str, Any],
) -> tuple[list[str], list[Any] | None]:
    if method == "full_context":
        from mnemis.baselines.full_context import full_context

        max_len = int(plain["llm"].get("backend", {}).get("max_model_len") or 8192)
        fc = full_context(data.episodes, questions, max_model_len=max_len, llm=models.llm)
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

        work = artifact_dir(plain) / f"{method}-{config_hash(plain, [method])}"  # its settings address its memory
        run = run_mem0(data, models.llm, models.embedder, plain[method], work)
        _write(out / f"{method}_stats.json", run.stats)
        return run.contexts, run.retrieved
    # mnemis: System-1 + System-2 + fusion over the built graph
    from mnemis.eval.route_recall import route_recall
    from mnemis.retrieve.pipeline import run_retrieval

    reranker = models.reranker if (plain["retrieval"].get("fusion") or {}).get("scorer") == "reranker" else None
    res = run_retrieval(store, questions, plain["retrieval"], embedder=models.embedder, llm=models.llm,
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
        judge = next(iter(m["judges"].values()))
        o = judge["raw"]["overall"]
        return f"accuracy {o['accuracy']:.3f} on {o['total']} questions (judge {next(iter(m['judges']))})"
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
    _write(out / "config.json", plain)
    models = Models(cfg, plain)
    result: dict[str, Any] = {"command": command, "output_dir": str(out)}
    models.reset_ledgers()
    if command in ("build", "run"):
        result["build"] = run_build(plain, out, models if plain.get("llm") else None)
    if command in ("eval", "run"):
        result["eval"] = run_eval(plain, out, models)
    elif models.built("llm"):
        models.llm.ledger.save(out / "ledger.json")
    print_summary(result)
    print(f"outputs: {out}")
    return result
