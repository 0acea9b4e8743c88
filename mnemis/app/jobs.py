"""The jobs behind the CLI: build a memory, evaluate methods on it, run both, regenerate a report.

``run_command`` receives the composed config once. Models are built once per process (a multirun
sweep reuses the engine between jobs) and handed to the stages as objects; everything else gets its typed
section of the run's settings (:class:`mnemis.settings.RunSettings`). A built memory is addressed by a hash
of the build-relevant config, so ``eval`` and sweeps over retrieval settings reuse it and make no extraction
calls.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.address import (  # noqa: F401
    BUILD_CODE_VERSION,
    BUILD_KEYS,
    NOT_BUILD_FIELDS,
    build_view,
    config_hash,
    drop_fields,
    memory_address,
)
from mnemis.app.methods import MethodError, build_needs, check_methods, make_methods
from mnemis.components import _MODELS, Models  # noqa: F401  (_MODELS: the process-level model cache)
from mnemis.config import to_plain
from mnemis.data.load import load_dataset
from mnemis.data.shard import sharded_address
from mnemis.data.sources import SOURCES, DataDirs, side_file
from mnemis.eval.run_dir import (
    BUILD_SUMMARY_FILE,
    CONFIG_FILE,
    HEALTH_FILE,
    HIERARCHY_METRICS_FILE,
    LEDGER_FILE,
    RECALL_FILE,
    REPORT_FILE,
    ROLES_FILE,
    TIMINGS_FILE,
)
from mnemis.method import EPISODE_VECTORS, GRAPH, MethodRun
from mnemis.model_roles import ModelRoles
from mnemis.roles import check_roles, judge_specs, roles_summary, run_seeds
from mnemis.settings import RunSettings, SettingsError, load_settings
from mnemis.store import GraphStore
from mnemis.types import Dataset

log = logging.getLogger(__name__)

LOCOMO_DATASETS = ("locomo", "locomo_plus")  # LoCoMo's questions: audit and judge stress apply


def build_address(settings: RunSettings) -> str:
    """The run's memory address (:func:`mnemis.address.memory_address`), per shard when sharded."""
    return sharded_address(memory_address(settings), settings.shard)


def load_configured_dataset(settings: RunSettings) -> Dataset:
    """The run's dataset slice (and shard: the loader applies it, LongMemEval-M while it streams)."""
    return load_dataset(settings.dataset, data_dirs=DataDirs.from_paths(settings.paths), shard=settings.shard)


def artifact_dir(settings: RunSettings) -> Path:
    return Path(settings.paths.artifacts_dir) / build_address(settings)


def _write(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str))


def run_build(settings: RunSettings, out: Path, models: Models | None = None) -> dict[str, Any]:
    """Store the dataset slice, then (when a graph method is asked for) the base graph and hierarchy,
    through :class:`mnemis.memory.Memory` (the library's composition path).

    Each stage is resumable and recorded in the store's meta, so a rerun of a finished build makes no
    LLM call at all.
    """
    from mnemis.ingest.common import STATS_KEY
    from mnemis.memory import Memory

    data = load_configured_dataset(settings)
    path = artifact_dir(settings) / settings.store.filename
    methods = list(settings.methods)
    stages: dict[str, Any] = {}
    with Memory(settings, path=path, models=models) as memory:
        store = memory.store
        store.set_meta("build_config", build_view(settings))
        memory.store_episodes(data.episodes)
        store.upsert_questions(data.questions)
        needs = build_needs(methods)  # what the methods' classes say the shared build must make
        if models is not None and {EPISODE_VECTORS, GRAPH} & needs:
            stages["embed_episodes"] = memory.embed_episodes(data.groups)
        if models is not None and GRAPH in needs:
            stages.update(_build_graph(memory, data, out))
        counts = {g: store.counts(g) for g in data.groups}
        totals = store.get_meta(STATS_KEY) or {}  # the base graph's cumulative counters (run health reads them)
    summary = {"store": str(path), "dataset": data.summary(), "store_counts": counts, "stages": stages,
               "ingest_totals": totals}
    _write(out / BUILD_SUMMARY_FILE, summary)
    return summary


def _build_graph(memory: Any, data: Dataset, out: Path) -> dict:
    stages: dict[str, Any] = {}
    store = memory.store
    if store.get_meta("built:base_graph") is None:
        t0 = time.perf_counter()
        stats_d = memory.add_episodes(data.episodes).to_dict()
        store.set_meta("built:base_graph", {"stats": stats_d, "seconds": time.perf_counter() - t0})
        stages["base_graph"] = stats_d
    else:
        stages["base_graph"] = "reused"
    hier = store.get_meta("built:hierarchy")
    if hier is None:
        hier = memory.organize(data.groups)
        store.set_meta("built:hierarchy", hier)
        stages["hierarchy"] = "built"
    else:
        stages["hierarchy"] = "reused"
    _write(out / HIERARCHY_METRICS_FILE, hier)
    return stages


def require_built(settings: RunSettings, path: Path, methods: Sequence[str]) -> None:
    """``mnemis eval`` needs a built memory: a clear error naming its address and the build command."""
    missing = "" if path.exists() else "no memory"
    if not missing and GRAPH in build_needs(methods):
        with GraphStore(path) as store:
            if store.get_meta("built:hierarchy") is None:
                missing = "an unfinished memory (no hierarchy)"
    if missing:
        raise SystemExit(
            f"mnemis eval: {missing} at {path.parent} (build address {build_address(settings)}). Build it first with "
            "`mnemis build <the same overrides>`, or use `mnemis run`, which builds and then evaluates.")


def run_eval(settings: RunSettings, out: Path, models: Models, tracker: Any = None,
             progress_dir: Path | None = None) -> dict[str, Any]:
    """Every configured method on the built memory: retrieve, answer, judge; then metrics and report.
    ``mnemis retrieve`` (``settings.command``) stops after retrieval: the contexts, each route's evidence recall
    (``recall.json``) and the explorer's graph, with no answer or judge model loaded.

    ``progress_dir``: where the resumable progress goes (default ``out``; a sharded job's node-local state,
    :mod:`mnemis.scale.node_state`). A sharded job also writes ``shard.json`` (what the shard must hold, for
    ``mnemis merge``)."""
    from mnemis.eval.harness import evaluate_method, finalize_run
    from mnemis.eval.route_recall import route_recall
    from mnemis.eval.tracking import make_tracker
    from mnemis.prompts.answer import answer_prompt_for

    data = load_configured_dataset(settings)
    methods = list(settings.methods)
    judge_cfg = settings.judge
    answering = settings.command != "retrieve"
    judges = models.judges(judge_specs(judge_cfg)) if answering else []
    answer_cfg = settings.answer
    seeds = run_seeds(settings.seed, settings.seeds, answer_cfg)
    questions = list(data.questions)
    if not questions:
        raise SystemExit(f"mnemis {settings.command}: the dataset slice has no questions (a question is kept only "
                         "when all its evidence lies inside the slice); widen dataset.slice")
    path = artifact_dir(settings) / settings.store.filename
    if settings.command == "eval":
        require_built(settings, path, methods)
    own_tracker = tracker is None and answering
    if own_tracker:
        tracker = make_tracker(settings.tracker, dir=str(out))
        tracker.log_config(settings.model_dump(mode="json", exclude_unset=True))
    dirs = DataDirs.from_paths(settings.paths)
    audit = judge_cfg.audit and data.name in LOCOMO_DATASETS and (
        judge_cfg.audit_path or side_file("locomo_audit", dirs))
    if audit and not Path(audit).exists():
        audit = False
    if settings.shard:
        from mnemis.scale.merge import write_shard_manifest

        write_shard_manifest(out, settings.shard, data.groups, questions, methods, seeds)
    timings: dict[str, float] = {}
    recall: dict[str, Any] = {}
    with GraphStore(path) as store:
        run = MethodRun(settings, models, data, store, artifact_dir(settings))
        for method in make_methods(methods):
            t0 = time.perf_counter()
            method.prepare(run)
            got = method.contexts(questions)
            got.check(method.name, questions)
            for name, text in got.files.items():
                (out / name).write_text(text, encoding="utf-8")
            if got.recall_routes:
                recall.update(route_recall(store, questions, got.recall_routes))
            for seed in seeds if answering else ():  # retrieval once; answering and judging once per seed
                evaluate_method(
                    method=method.name, questions=questions, contexts=got.texts, answer_llm=models.answer_llm,
                    judges=judges, run_dir=out, retrieved=got.retrieved, seed=seed, audit=audit,
                    answer_max_tokens=answer_cfg.max_tokens,
                    answer_prompt=answer_prompt_for(answer_cfg, method.name),
                    answer_temperature=answer_cfg.temperature,
                    judge_max_tokens=judge_cfg.max_tokens,  # an int or "auto" (the schema's worst case)
                    graded_settings=judge_cfg.graded,  # BEAM / LoCoMo-Plus scorers (mnemis.eval.graded)
                    progress_dir=progress_dir,
                )
            timings[method.name] = round(time.perf_counter() - t0, 2)
        from mnemis.eval.explorer import graph_snapshot
        from mnemis.eval.run_dir import GRAPH_FILE

        _write(out / GRAPH_FILE, graph_snapshot(store, questions))  # names, hierarchy, evidence for report.html
    if recall:
        _write(out / RECALL_FILE, recall)
    _write(out / TIMINGS_FILE, timings)
    if not answering:
        if tracker is not None:
            from mnemis.eval.tracking import flatten

            tracker.log_metrics(flatten({"recall": recall}))
        return {"recall": recall, "timings": timings, "recall_file": str(out / RECALL_FILE)}
    roles = roles_summary(settings)
    roles["answer_prompts"] = {m: answer_prompt_for(answer_cfg, m).key for m in methods}
    roles["seeds"] = seeds
    _write(out / ROLES_FILE, roles)
    lenient = judge_cfg.leniency
    stress = lenient.enabled and data.name in LOCOMO_DATASETS
    stress_path = lenient.path
    if stress and not stress_path:
        stress_path = side_file("judge_stress", dirs) or dirs.home / SOURCES["judge_stress"].filename
    boot = judge_cfg.bootstrap
    from mnemis.eval.graded_leniency import write_graded_leniency

    write_graded_leniency(out, judges, questions, judge_cfg)  # graded judges' controls, when enabled
    metrics = finalize_run(
        out, ledger=models.ledger(),
        leniency_judges=judges if stress else None,
        leniency_n=lenient.n, leniency_path=stress_path,
        separate=tuple(judge_cfg.separate_categories), failed=judge_cfg.failed,
        n_boot=boot.n_boot, seed=boot.seed, tracker=tracker,
        headline=roles["headline_judge"],
    )
    if own_tracker:
        tracker.finish()
    return {"metrics": metrics, "timings": timings, "report": str(out / REPORT_FILE)}


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
        from mnemis.eval.run_health import not_meaningful

        health_file = Path(result["eval"]["report"]).with_name(HEALTH_FILE)
        health = json.loads(health_file.read_text()) if health_file.is_file() else {}
        lenient = not_meaningful(health)  # a judge that accepts most known-wrong answers: token F1 first
        for method, m in result["eval"]["metrics"].items():
            print(f"{method}: {_headline(m, lenient)}")
        warns = health.get("warnings") or []
        for w in warns:
            print(f"run health: {w}")
        print(f"report: {result['eval']['report']}" + (f" (run health: {len(warns)} warnings)" if warns else ""))
    if "retrieve" in result:
        _print_recall(result["retrieve"])


def _print_recall(result: dict[str, Any]) -> None:
    """``mnemis retrieve``'s summary: each route's evidence recall."""
    for route, table in sorted(result["recall"].items()):
        o = table.get("overall") or {}
        if "direct" in o:
            print(f"{route}: evidence recall {o['direct']:.4f} direct, {o['reachable']:.4f} reachable "
                  f"on {o['n']} questions")
    print(f"recall: {result['recall_file']}")


def _headline(m: Any, lenient: dict[str, str] | None = None) -> str:
    try:
        name = m.get("headline_judge") or next(iter(m["judges"]))
        o = m["judges"][name]["raw"]["overall"]
        f1 = (m.get("answer_scores") or {}).get("overall", {}).get("f1")
        if name in (lenient or {}):  # token F1 first, the accuracy after the reason it is not meaningful
            return ((f"token F1 {f1:.3f} on {o['total']} questions; " if f1 is not None else "")
                    + f"{lenient[name]} (its accuracy {o['accuracy']:.3f})")  # type: ignore[index]
        return (f"accuracy {o['accuracy']:.3f} on {o['total']} questions (judge {name})"
                + (f", token F1 {f1:.3f}" if f1 is not None else ""))
    except (KeyError, TypeError, StopIteration, AttributeError):
        return json.dumps(m, default=str)[:200]


def _check_local_disk(settings: RunSettings) -> None:
    """Stop before any SQLite file opens on a network file system (``scale.check_fs``)."""
    from mnemis.scale.node_state import NetworkFileSystemError, check_local, sqlite_paths

    if settings.scale.check_fs:
        try:
            check_local(sqlite_paths(settings.paths))
        except NetworkFileSystemError as exc:
            raise SystemExit(f"mnemis {settings.command}: {exc}") from None


def _settings(plain: dict[str, Any], command: str) -> RunSettings:
    try:
        return load_settings(plain)  # the config read once: every bad key reported at once
    except SettingsError as exc:
        raise SystemExit(f"mnemis {command}: {exc}") from None


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
        from mnemis.eval.explorer import snapshot_from_build
        from mnemis.eval.run_dir import HTML_FILE

        from mnemis.eval.run_files import RunFileError

        snapshot_from_build(run_dir)  # a run from before the explorer: its names and hierarchy from the store
        try:
            path = write_report(run_dir)
        except RunFileError as exc:  # a damaged run dir: the file, record and field, not a traceback
            raise SystemExit(f"mnemis report: {exc}") from None
        print(f"report: {path}\nexplorer: {Path(run_dir) / HTML_FILE}")
        return {"report": str(path)}
    from mnemis.config import with_values
    from mnemis.scale.node_state import shard_paths, shard_state

    methods = list(plain.get("methods") or [])
    try:
        check_methods(methods)  # every unknown or ill-configured method at once, before any model loads
    except MethodError as exc:
        raise SystemExit(f"mnemis {command}: methods={methods}: {exc}") from None
    settings = _settings(plain, command)
    state = shard_state(settings.shard, settings.scale, settings.paths, out)  # a sharded job keeps its store,
    if state is not None:  # caches and progress on node-local disk
        plain = to_plain(with_values(cfg, shard_paths(settings.scale, state)))
        settings = _settings(plain, command)
    if command in ("eval", "run", "retrieve"):
        check_roles(settings)  # before any model loads
    _check_local_disk(settings)
    _write(out / CONFIG_FILE, plain)
    models = Models(settings.models())
    result: dict[str, Any] = {"command": command, "output_dir": str(out)}
    models.reset_ledgers()
    from mnemis import progress
    from mnemis.eval.tracking import log_ledger, make_tracker, watch_progress

    tracker = make_tracker(settings.tracker, dir=str(out))  # one run per job: build and eval
    tracker.log_config(plain)
    listener = watch_progress(tracker)
    try:
        if command in ("build", "run", "retrieve"):
            result["build"] = run_build(settings, out, models if settings.llm is not None else None)
            if models.built("llm"):
                log_ledger(tracker, "build", models.ledger())
        if command in ("eval", "run", "retrieve"):
            models.release_unused(ModelRoles.of(settings), "eval")  # the build's engines no evaluation role uses: their memory freed first
            result["retrieve" if command == "retrieve" else "eval"] = run_eval(
                settings, out, models, tracker=tracker, progress_dir=state.progress if state is not None else None)
            log_ledger(tracker, "eval", models.ledger())
            if command == "retrieve" and models.built("llm"):
                models.ledger().save(out / LEDGER_FILE)  # the selection calls' tokens (finalize_run's, when answering)
        elif models.built("llm"):
            models.ledger().save(out / LEDGER_FILE)
        if state is not None:  # the shard's replies beside its results, for the merged replay archive
            from mnemis.models.cache_archive import export_archive
            from mnemis.eval.run_dir import ARCHIVE_FILE

            export_archive(settings.paths.cache_dir, out / ARCHIVE_FILE)
    finally:
        progress.remove_listener(listener)
        tracker.finish()
    print_summary(result)
    print(f"outputs: {out}")
    return result
