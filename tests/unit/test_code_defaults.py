"""Defaults live in the YAML (``conf/``): the few code defaults kept for library use (``System2(store, llm)``,
``score_graded(...)`` without a config, ``Mem0Config()``) must equal the values the default config composes, and
every default a settings record has must be one of those, or an optional key the YAML leaves out on purpose."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from pydantic import BaseModel

import mnemis.settings as settings_module
from mnemis.baselines.mem0.pipeline import DEFAULT_MAX_TOKENS, Mem0Config
from mnemis.settings import (
    ContextSettings,
    FusionSettings,
    GradedSettings,
    JudgeEntry,
    Mem0Settings,
    PeersSettings,
    ScaleSettings,
    System2Config,
    System2Settings,
)
from tests.helpers.compose import plain_config


def _composed() -> dict[str, Any]:
    """Where each record's defaults must come from: its section of the default config (BEAM's judge for the
    graded scorers, Mem0g's section for the Mem0 graph keys)."""
    base = plain_config([])
    return {
        "System2Config": base["retrieval"]["system2"],
        "System2Settings": base["retrieval"]["system2"],
        "FusionSettings": base["retrieval"]["fusion"],
        "ContextSettings": base["retrieval"]["context"],
        "ScaleSettings": base["scale"],
        "GradedSettings": plain_config(["judge=beam"])["judge"]["graded"],
        "Mem0Settings": base["mem0g"],
    }


# defaults that cannot equal a YAML value, each with its reason
NOT_FROM_YAML = {
    ("System2Config", "window_tokens"): "the YAML interpolates the selection model's window; a library System2 "
                                        "has no model config (None: no window paging)",
    ("System2Settings", "window_tokens"): "as System2Config's",
    ("JudgeEntry", "llm"): "a key of each judge.judges entry: an entry without it is judged by the run's llm",
    ("JudgeEntry", "criterion"): "a key of each judge.judges entry: an entry without it gets the default criterion",
}
# keys the YAML leaves out on purpose: None means the behaviour the record documents
OPTIONAL = {
    ("PeersSettings", "dtype"): "peers",
    ("PeersSettings", "cpu_threads_bind"): "peers",
    ("PeersSettings", "server_args"): "peers",
    ("PeersSettings", "timeout_s"): "peers",
}


def defaulted_fields(module: Any) -> list[tuple[str, str, Any]]:
    """``(record, field, default)`` of every field with a default of every settings record in ``module``."""
    out = []
    for name, cls in vars(module).items():
        if inspect.isclass(cls) and issubclass(cls, BaseModel) and cls.__module__ == module.__name__:
            for field, info in cls.model_fields.items():
                if not info.is_required():
                    out.append((name, field, info.get_default(call_default_factory=True)))
    return out


def unaccounted(fields: list[tuple[str, str, Any]], composed: dict[str, dict[str, Any]]) -> list[str]:
    """The defaults that are neither the YAML's value nor a listed exception, one line each."""
    bad = []
    for record, field, default in fields:
        if (record, field) in NOT_FROM_YAML or (record, field) in OPTIONAL:
            continue
        if record not in composed or field not in composed[record]:
            bad.append(f"{record}.{field}={default!r}: no YAML value to compare with")
        elif composed[record][field] != default:
            bad.append(f"{record}.{field}={default!r}, the YAML says {composed[record][field]!r}")
    return bad


def test_every_code_default_of_the_settings_equals_the_yaml():
    assert unaccounted(defaulted_fields(settings_module), _composed()) == []


def test_the_check_finds_a_default_that_drifted_or_has_no_yaml():
    composed = _composed()
    fields = [("System2Config", "min_top_selections", 0), ("GradedSettings", "max_lines", 40),
              ("Brandnew", "knob", 3)]
    assert unaccounted(fields, composed) == [
        "System2Config.min_top_selections=0, the YAML says 1", "Brandnew.knob=3: no YAML value to compare with"]


def test_the_records_with_library_defaults_are_the_ones_compared():
    found = {record for record, _, _ in defaulted_fields(settings_module)}
    assert found == {"System2Config", "System2Settings", "FusionSettings", "ContextSettings", "ScaleSettings",
                     "GradedSettings", "Mem0Settings", "JudgeEntry", "PeersSettings"}
    assert System2Config().min_top_selections == 1 and GradedSettings().partial == "keep"
    assert FusionSettings.model_fields["rrf_k"].default == 60 and ContextSettings.model_fields["fact_dates"].default
    assert ScaleSettings().check_fs and System2Settings.model_fields["enabled"].is_required()
    assert JudgeEntry(name="x").llm is None and Mem0Settings.model_fields["graph_k"].default == 10


def test_optional_keys_are_left_out_of_the_yaml():
    """An optional key the YAML also sets would be a second default."""
    base = plain_config([])
    for (record, field), where in OPTIONAL.items():
        node = base
        for part in where.split("."):
            node = node[part]
        assert field not in node, f"{where}.{field}"
    assert set(PeersSettings.model_fields) - {f for (r, f) in OPTIONAL if r == "PeersSettings"} == set(base["peers"])


def test_the_mem0_library_record_defaults_equal_the_yaml():
    """``Mem0Config()`` (library use) is conf/mem0/mem0.yaml, its graph keys conf/mem0/mem0g.yaml."""
    base = plain_config([])
    lib = Mem0Config()
    for f in dataclasses.fields(Mem0Config):
        value = getattr(lib, f.name)
        if f.name == "max_tokens":
            assert value == DEFAULT_MAX_TOKENS == base["mem0g"]["max_tokens"]
            assert {k: value[k] for k in base["mem0"]["max_tokens"]} == base["mem0"]["max_tokens"]
        elif f.name in base["mem0"]:
            assert value == base["mem0"][f.name], f.name
        else:
            assert value == base["mem0g"][f.name], f.name
