"""Reading a run directory's files: every value checked, every error naming the file, the record and the field.

A run directory is read long after it was written (``mnemis report``, the explorer, run health, merges), and a
damaged file (a record from an older version, a value edited by hand, a line cut by a kill) must stop a reader
with a sentence a user can act on, not a ``TypeError`` deep in a sum. :func:`read_jsonl` validates each record of a
JSON-lines file against its pydantic record (``questions.jsonl``: :class:`~mnemis.eval.records.QuestionRecord`,
``traversal.jsonl``: :class:`~mnemis.retrieve.system2_records.Traversal`, ...); :func:`read_json` validates a JSON
file against the model of the parts its readers use. Both raise :class:`RunFileError` (``<file>: line 3: field
rounds.0.invented: Input should be a valid integer ...``); with ``problems=[...]`` a reader that shows what it can
(the explorer) skips the damaged records and collects the same sentences instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

M = TypeVar("M", bound=BaseModel)


class RunFileError(ValueError):
    """A run directory's file does not hold what its reader expects (the message names file, record and field)."""


def _fields(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:3]:
        loc = ".".join(str(x) for x in e.get("loc", ())) or "<record>"
        parts.append(f"field {loc}: {e.get('msg', '')} (got {e.get('input')!r:.60})")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def check(value: Any, model: type[M], where: str) -> M:
    """``value`` as a ``model``; :class:`RunFileError` naming ``where`` and the field otherwise."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RunFileError(f"{where}: {_fields(exc)}") from None


def read_json(path: str | Path, model: type[M] | None = None) -> Any:
    """The JSON value of ``path`` (None when the file is missing), checked against ``model`` when given."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunFileError(f"{path}: not readable as JSON ({exc})") from None
    return value if model is None else check(value, model, str(path))


def read_jsonl(path: str | Path, model: type[M], *, problems: list[str] | None = None) -> list[M]:
    """The records of a JSON-lines file (blank lines ignored; [] when the file is missing). A record that is not
    JSON or not a ``model`` raises :class:`RunFileError`, or, given ``problems``, is skipped and described there."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path}: not readable ({exc})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValidationError as exc:
            bad = exc.errors()[0].get("type") == "json_invalid"
            msg = f"{path}: line {n}: " + (f"not a JSON record ({exc.errors()[0].get('msg')})" if bad else _fields(exc))
            if problems is None:
                raise RunFileError(msg) from None
            problems.append(msg)
    return out


# --------------------------------------------------------------------------- the JSON files and their readers' parts
class _Open(BaseModel):
    """A file's record: the fields its readers use are typed, any other key is kept as written."""

    model_config = {"extra": "allow"}


Number = float | None


class LedgerStage(_Open):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    failures: int = 0
    retries: int = 0
    wall_s: float = 0.0


class LedgerFile(_Open):
    """``ledger.json``: ``Ledger.to_dict()`` (``stages``, ``total``)."""

    stages: dict[str, LedgerStage] = Field(default_factory=dict)
    total: LedgerStage = Field(default_factory=LedgerStage)


def ledger_file(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """``ledger.json`` as ``{name: ledger}``: one ledger, or one per method."""
    if not isinstance(value, Mapping):
        raise RunFileError(f"{where}: expected a JSON object, got {type(value).__name__}")
    if "stages" in value:
        return {"run": check(value, LedgerFile, where).model_dump(mode="json")}
    return {k: check(v, LedgerFile, f"{where}: ledger {k!r}").model_dump(mode="json") for k, v in value.items()
            if isinstance(v, Mapping) and "stages" in v}


class Acceptance(_Open):
    accepted: int = 0
    judged: int = 0
    failures: int = 0
    rate: Number = None


class LeniencyFile(_Open):
    """``leniency.json``: acceptance of known-wrong answers per judge and kind, and each judge's criterion."""

    judges: dict[str, dict[str, Acceptance]] = Field(default_factory=dict)
    criteria: dict[str, str | None] = Field(default_factory=dict)


def recall_file(value: Any, where: str, path: str = "") -> dict[str, Any]:
    """``recall.json``: nested objects (route, category) whose leaves are numbers or null; returned as written."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            recall_file(v, where, f"{path}.{k}" if path else str(k))
        return dict(value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise RunFileError(f"{where}: field {path or '<file>'}: expected a number or null, got {value!r:.60}")
    return {}


class BuildSummary(_Open):
    """``build_summary.json``: the parts run health and the explorer read."""

    store: str | None = None
    ingest_totals: dict[str, int] = Field(default_factory=dict)
    store_counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    stages: dict[str, Any] = Field(default_factory=dict)


class JudgeRole(_Open):
    name: str
    criterion: str = ""
    model: str = ""
    slot: str = ""
    self_judged: bool = False


class RolesFile(_Open):
    """``roles.json``: which model answers, selects and judges."""

    roles: dict[str, str | None] = Field(default_factory=dict)
    judges: list[JudgeRole] = Field(default_factory=list)
    answer_prompts: dict[str, str] = Field(default_factory=dict)
    headline_judge: str | None = None
    fidelity: str | None = None


class MethodMetrics(_Open):
    """One method's entry of ``metrics.json`` (the parts the report and the explorer read)."""

    n_questions: int | None = None
    n_groups: int | None = None
    answer_failures: int = 0
    seeds: list[int] = Field(default_factory=lambda: [0])
    headline_judge: str | None = None
    judges: dict[str, Any] = Field(default_factory=dict)
    answer_scores: dict[str, Any] = Field(default_factory=dict)

    @field_validator("judges", "answer_scores", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


def metrics_file(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """``metrics.json`` as ``{method: metrics}`` (one method's metrics at the top level count as ``run``), each
    checked (:class:`MethodMetrics`)."""
    if not isinstance(value, Mapping):
        raise RunFileError(f"{where}: expected a JSON object, got {type(value).__name__}")
    methods = {"run": value} if "judges" in value else dict(value)
    return {k: check(m, MethodMetrics, f"{where}: method {k!r}").model_dump(mode="json") for k, m in methods.items()}


class JudgeProgressRow(_Open):
    """A line of a judge's progress file (``progress/judge.<method>.<seed>.<judge>.jsonl``)."""

    key: str
    question_id: str = ""
    label: bool | None = None
    reasoning: str = ""


class ContextRow(_Open):
    """A line of ``contexts.jsonl`` (the fused context and its rendered text) as the explorer reads it."""

    question_id: str
    text: str | None = None


class System1Row(_Open):
    """A line of ``system1.jsonl``: System-1's ranked ids before fusion."""

    question_id: str
    episodes: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)


class HierarchyRow(_Open):
    """One group's entry of ``hierarchy_metrics.json`` (:class:`~mnemis.hierarchy.metrics.HierarchyMetrics`, of
    which the readers use these fields)."""

    group_id: str | None = None
    entities: int | None = None
    layers: int | None = None
    nodes_per_layer: list[int] = Field(default_factory=list)
    coverage: Number = None
    promoted: int = 0
    stop_reason: str = ""
    llm_calls: int | None = None
    repairs: dict[str, int] = Field(default_factory=dict)


def hierarchy_file(value: Any, where: str) -> list[dict[str, Any]]:
    """``hierarchy_metrics.json``: one group's metrics, a list of them or ``{group: metrics}``, each checked
    (:class:`HierarchyRow`; a group named by its key gets that ``group_id``)."""
    if isinstance(value, list):
        rows: list[tuple[Any, Any]] = [(None, v) for v in value]
    elif isinstance(value, Mapping) and ("group_id" in value or "entities" in value):
        rows = [(None, value)]
    elif isinstance(value, Mapping):
        rows = list(value.items())
    else:
        raise RunFileError(f"{where}: expected a JSON object or list, got {type(value).__name__}")
    out = []
    for i, (key, row) in enumerate(rows):
        name = f"group {key!r}" if key is not None else f"record {i}"
        if not isinstance(row, Mapping):
            raise RunFileError(f"{where}: {name}: expected an object, got {row!r:.60}")
        rec = check(row, HierarchyRow, f"{where}: {name}").model_dump(mode="json")
        if rec["group_id"] is None and key is not None:
            rec["group_id"] = str(key)
        out.append(rec)
    return out


class GradedCell(_Open):
    mean: Number = None
    failures: int = 0


class GradedLeniencyFile(_Open):
    """``graded_leniency.json``: the graded judges' mean scores on the control answers."""

    n_questions: int = 0
    judges: dict[str, dict[str, GradedCell]] = Field(default_factory=dict)
