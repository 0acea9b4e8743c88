"""The jobs behind the CLI commands: build a memory, evaluate it, run both, regenerate a report.

Receives the composed config once, turns it into plain values and built components, and calls
the stages. Stages that have not landed yet are reported as unavailable instead of faked.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mnemis.config import config_hash, to_plain
from mnemis.data.load import load_dataset
from mnemis.store import GraphStore
from mnemis.types import Dataset

log = logging.getLogger(__name__)

# Config sections whose values change what a build produces (the artifact address).
BUILD_KEYS = ["dataset", "llm", "embedder", "ingest", "hierarchy", "prompts"]


class StageUnavailable(RuntimeError):
    """A command asked for a stage this version of mnemis does not have yet."""


def build_address(plain: dict[str, Any]) -> str:
    return config_hash(plain, [k for k in BUILD_KEYS if k in plain])


def load_configured_dataset(plain: dict[str, Any]) -> Dataset:
    ds = plain["dataset"]
    sl = ds.get("slice") or {}
    return load_dataset(
        ds["name"],
        ds.get("path"),
        download=bool(ds.get("download", False)),
        groups=sl.get("groups"),
        max_groups=sl.get("max_groups"),
        sessions=sl.get("sessions"),
        max_questions=sl.get("max_questions"),
        categories=sl.get("categories"),
    )


def store_path(plain: dict[str, Any]) -> Path:
    return Path(plain["paths"]["artifacts_dir"]) / build_address(plain) / plain["store"]["filename"]


def run_build(plain: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """Load the dataset slice into the store (idempotent), then every build stage that is configured."""
    data = load_configured_dataset(plain)
    path = store_path(plain)
    with GraphStore(path) as store:
        store.set_meta("build_config", {k: plain.get(k) for k in BUILD_KEYS if k in plain})
        store.upsert_episodes(data.episodes)
        store.upsert_questions(data.questions)
        counts = {g: store.counts(g) for g in data.groups}
    summary = {"store": str(path), "dataset": data.summary(), "store_counts": counts}
    (output_dir / "build_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def run_eval(plain: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    raise StageUnavailable(
        "eval is not available yet in this version: retrieval, answering and judging have not landed "
        "(see the open issues); `mnemis build` works"
    )


def print_build_summary(summary: dict[str, Any]) -> None:
    ds = summary["dataset"]
    print(f"dataset {ds['dataset']}: {ds['groups']} groups, {ds['sessions']} sessions, "
          f"{ds['episodes']} episodes, {ds['questions']} questions {ds['questions_by_category']}")
    if ds.get("warnings"):
        print(f"warnings: {ds['warnings']}")
    print(f"store: {summary['store']}")
    for gid, c in summary["store_counts"].items():
        print(f"  {gid}: " + ", ".join(f"{k}={v}" for k, v in c.items() if v))


def run_command(cfg: Any, output_dir: str | Path) -> dict[str, Any]:
    plain = to_plain(cfg)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(plain, indent=2, default=str))
    command = plain["command"]
    result: dict[str, Any] = {"command": command, "output_dir": str(out)}
    if command in ("build", "run"):
        result["build"] = run_build(plain, out)
        print_build_summary(result["build"])
    if command in ("eval", "run"):
        try:
            result["eval"] = run_eval(plain, out)
        except StageUnavailable as exc:
            if command == "eval":
                raise SystemExit(f"mnemis eval: {exc}") from None
            print(f"note: {exc}")
    if command == "report":
        raise SystemExit("mnemis report: not available yet (the evaluation harness has not landed)")
    print(f"outputs: {out}")
    return result
