"""A run directory: the name of every file a run writes there, the check each JSON file gets when it is read
back, and the writing of the files of one retrieval.

Writers and readers name a file by its constant here, never by a string of their own, so a file is renamed in
one place and a reader cannot look for a name no writer uses. The records inside the files are checked by
:mod:`mnemis.eval.run_files`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mnemis.eval.run_files import (
    BuildSummary,
    GradedLeniencyFile,
    LeniencyFile,
    RolesFile,
    check,
    hierarchy_file,
    ledger_file,
    metrics_file,
    read_json,
    recall_file,
)

# written by the job, before and around the evaluation
CONFIG_FILE = "config.json"                  # the composed config, as plain values
PROVENANCE_FILE = "provenance.json"          # the code and environment that ran
BUILD_SUMMARY_FILE = "build_summary.json"    # what the build made (episodes, entities, facts, categories)
HIERARCHY_METRICS_FILE = "hierarchy_metrics.json"  # the hierarchy's shape per group
TIMINGS_FILE = "timings.json"                # seconds per method
ROLES_FILE = "roles.json"                    # which model plays which role
LEDGER_FILE = "ledger.json"                  # calls and tokens per stage
ARCHIVE_FILE = "cache_archive.jsonl.gz"      # the replies a replay needs
# written by each method's retrieval
CONTEXTS_FILE = "contexts.jsonl"             # the fused context of each question
SYSTEM1_FILE = "system1.jsonl"               # System-1's ranked ids, before fusion
TRAVERSAL_FILE = "traversal.jsonl"           # System-2's walk per question
SELECTION_COST_FILE = "selection_cost.json"  # System-2's calls and tokens per query
RERANK_CACHE_FILE = "rerank_cache.json"      # the reranker cache's hits and misses
RECALL_FILE = "recall.json"                  # evidence recall per route
# written by the evaluation
QUESTIONS_FILE = "questions.jsonl"           # one record per question, method, seed: answer, labels, scores
METRICS_FILE = "metrics.json"                # the figures per method and judge
LENIENCY_FILE = "leniency.json"              # the judges' acceptance of wrong answers (LoCoMo)
GRADED_LENIENCY_FILE = "graded_leniency.json"  # the graded judges' controls (BEAM, LoCoMo-Plus)
REPORT_FILE = "report.md"                    # the report
HTML_FILE = "report.html"                    # the explorer
GRAPH_FILE = "explorer_graph.json"           # names, hierarchy and evidence the explorer shows
HEALTH_FILE = "health.json"                  # the run's health checks
# a sharded run
SHARD_FILE = "shard.json"                    # what a shard must hold (for the merge)
SHARDS_FILE = "shards.json"                  # a merged run: its shards, coverage and archive

# JSON file -> its check (value, where) -> the checked plain value
CHECKERS: dict[str, Any] = {
    METRICS_FILE: metrics_file,
    LENIENCY_FILE: lambda value, where: check(value, LeniencyFile, where),
    LEDGER_FILE: ledger_file,
    RECALL_FILE: recall_file,
    HIERARCHY_METRICS_FILE: hierarchy_file,
    ROLES_FILE: lambda value, where: check(value, RolesFile, where),
    BUILD_SUMMARY_FILE: lambda value, where: check(value, BuildSummary, where),
    GRADED_LENIENCY_FILE: lambda value, where: check(value, GradedLeniencyFile, where),
}
SUMMARY_FILES = (METRICS_FILE, LENIENCY_FILE, LEDGER_FILE, RECALL_FILE, HIERARCHY_METRICS_FILE)  # what trackers log


def read_checked(path: str | Path) -> Any:
    """The JSON of a run-dir file as written (None when missing), after its check in :data:`CHECKERS` (by file
    name) passed it."""
    value = read_json(path)
    checker = CHECKERS.get(Path(path).name)
    if value is not None and checker is not None:
        checker(value, str(path))
    return value


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def retrieval_files(result: Any) -> dict[str, str]:
    """The run directory's files of one retrieval (a :class:`mnemis.retrieve.pipeline.RetrievalOutput`), name ->
    text: :data:`CONTEXTS_FILE` (fused hits and rendered text), with System-1 :data:`SYSTEM1_FILE` (its ranked
    ids), with System-2 :data:`TRAVERSAL_FILE` and :data:`SELECTION_COST_FILE`."""
    from mnemis.retrieve.system2 import selection_cost

    rows = [{**ctx.model_dump(mode="json"), "text": r.text, "tokens": r.tokens, "included": r.included}
            for ctx, r in zip(result.contexts, result.rendered)]
    out = {CONTEXTS_FILE: _jsonl(rows)}
    if result.system1 is not None:  # System-1's own ranking, before fusion (the explorer shows its ranks)
        out[SYSTEM1_FILE] = _jsonl(
            {"question_id": ctx.question_id, "group_id": ctx.group_id,
             **{kind: [h.id for h in getattr(ctx, kind)] for kind in ("episodes", "entities", "facts")}}
            for ctx in result.system1)
    if result.system2 is not None:
        out[TRAVERSAL_FILE] = "".join(r.traversal.model_dump_json() + "\n" for r in result.system2)
        out[SELECTION_COST_FILE] = json.dumps(selection_cost(result.system2), indent=2)
    return out


def write_files(run_dir: str | Path, files: Mapping[str, str]) -> None:
    """Write ``name -> text`` files (e.g. :func:`retrieval_files`) into ``run_dir``."""
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
