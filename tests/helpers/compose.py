"""Composing Hydra configs in tests: the config tree is parsed once per test session, not once per call.

A compose costs about 0.7 s on 2 cores, nearly all of it parsing the YAML files of the defaults list and building
their nodes (opening the Hydra context costs nothing measurable), and the suite composes several hundred configs.
Two caches, both handing out fresh copies, so a test may change what it gets:

- :func:`parse_config_files_once` (installed for the whole session by ``tests/conftest.py``): each file of
  ``conf/`` and each of Hydra's packaged configs is parsed once and Hydra gets a deep copy whenever it asks again.
  A file is keyed by its bytes, so a file a test edits is parsed again. Every compose in the test process gains,
  the library's own (``mnemis.config.compose``, ``Memory.from_config``, an in-process CLI run) included.
- :func:`compose` and :func:`plain_config`: ``mnemis.config.compose`` (and its resolved plain form) cached by
  (config name, overrides), returned as a copy: for tests that compose the same overrides many times
  (parametrized config checks). Only for overrides whose result depends on nothing else: not for configs that
  read the environment (``oc.env``) or the clock (``now``) while a test changes them.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_PARSED: dict[tuple, Any] = {}  # (source kind, source path, config path[, file bytes]) -> hydra ConfigResult
_COMPOSED: dict[tuple[str, tuple[str, ...]], Any] = {}
_PLAIN: dict[tuple[str, tuple[str, ...]], Any] = {}
_INSTALLED: list[tuple[type, Any]] = []


def _copy(result: Any) -> Any:
    from hydra.plugins.config_source import ConfigResult

    return ConfigResult(provider=result.provider, path=result.path, config=copy.deepcopy(result.config),
                        header=dict(result.header), is_schema_source=result.is_schema_source)


def _cached_loader(source_type: type, key_by_bytes: bool):
    real = source_type.load_config

    def load_config(self, config_path: str) -> Any:
        key: tuple = (source_type.__name__, self.path, config_path)
        if key_by_bytes:
            full = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
            try:
                key += (Path(full).read_bytes(),)
            except OSError:  # missing or unreadable: Hydra's own loader reports it
                return real(self, config_path)
        if key not in _PARSED:
            _PARSED[key] = real(self, config_path)
        return _copy(_PARSED[key])

    load_config.__wrapped__ = real
    return load_config


def parse_config_files_once() -> None:
    """Make Hydra's file and package config sources parse each config once for this process (idempotent).
    The classes are the ones Hydra's registry resolves (its plugin scan imports them anew)."""
    if _INSTALLED:
        return
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the plugin scan registers the source types
    registry = SourcesRegistry.instance()
    for scheme, by_bytes in (("file", True), ("pkg", False)):
        source_type = registry.resolve(scheme)
        _INSTALLED.append((source_type, source_type.load_config))
        source_type.load_config = _cached_loader(source_type, by_bytes)


def restore_config_parsing() -> None:
    """Undo :func:`parse_config_files_once` (end of session) and forget what was parsed."""
    while _INSTALLED:
        source_type, real = _INSTALLED.pop()
        source_type.load_config = real
    _PARSED.clear()


def compose(overrides: Sequence[str] | None = None, config_name: str = "config") -> Any:
    """``mnemis.config.compose(overrides, config_name)``, composed once per session and returned as a copy."""
    from mnemis.config import compose as compose_config

    key = (config_name, tuple(overrides or ()))
    if key not in _COMPOSED:
        _COMPOSED[key] = compose_config(list(key[1]), config_name=config_name)
    return copy.deepcopy(_COMPOSED[key])


def plain_config(overrides: Sequence[str] | None = None, config_name: str = "config") -> dict[str, Any]:
    """``to_plain(compose(overrides))`` (resolved plain values), composed once per session, returned as a copy."""
    from mnemis.config import to_plain

    key = (config_name, tuple(overrides or ()))
    if key not in _PLAIN:
        _PLAIN[key] = to_plain(compose(key[1], config_name=config_name))
    return copy.deepcopy(_PLAIN[key])


def run_settings(overrides: Sequence[str] | None = None) -> Any:
    """The validated :class:`mnemis.settings.RunSettings` of ``overrides`` (composed once per session)."""
    from mnemis.settings import load_settings

    return load_settings(plain_config(overrides))


def changed(section: Any, **changes: Any) -> Any:
    """A settings section with ``changes`` applied, validated again (a test's variant of a composed section)."""
    return type(section).model_validate({**section.model_dump(exclude_unset=True), **changes})


def dataset_settings(group: str, slice: dict[str, Any] | None = None, **changes: Any) -> Any:
    """The ``dataset`` settings of ``conf/dataset/<group>.yaml`` with ``changes`` (and ``slice`` keys) applied."""
    section = run_settings([f"dataset={group}"]).dataset
    if slice:
        changes["slice"] = changed(section.slice, **slice)
    return changed(section, **changes)


def peers_settings(**changes: Any) -> Any:
    """The composed ``peers`` settings with ``changes``."""
    return changed(run_settings([]).peers, **changes)
