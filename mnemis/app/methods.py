"""Methods found by name: ``methods=[...]`` names YAML files of ``conf/method/``, each naming its class.

``conf/method/<name>.yaml`` holds ``_target_`` (a :class:`mnemis.method.Method` subclass) and, optionally, more
arguments of its constructor; the file's name is the method's name. Adding a method is its module, its YAML and
its test: nothing here or in the jobs changes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.config import CONF_DIR
from mnemis.method import Method
from mnemis.settings import PARTIAL, TARGET, check_target, instantiate

METHOD_DIR = CONF_DIR / "method"


class MethodError(ValueError):
    """Configured methods that cannot be made: each problem names the method and its file."""


def known_methods(folder: Path = METHOD_DIR) -> list[str]:
    """The methods a run can name: the YAML files of ``folder``."""
    return sorted(p.stem for p in folder.glob("*.yaml"))


def method_node(name: str, folder: Path = METHOD_DIR) -> dict[str, Any]:
    """The plain node of ``<folder>/<name>.yaml``; MethodError for an unknown name (naming the known ones) or a
    file that is not a method's node."""
    if name not in known_methods(folder):
        raise MethodError(f"unknown method {name!r}; choose one or more of {known_methods(folder)} ({folder})")
    from omegaconf import OmegaConf

    path = folder / f"{name}.yaml"
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(node, dict) or TARGET not in node:
        raise MethodError(f"{path}: a method's YAML needs `{TARGET}: <its class>`")
    if "name" in node:
        raise MethodError(f"{path}: `name` is not a key here: the file's name ({name!r}) is the method's name")
    return node


def _factory(name: str, folder: Path) -> functools.partial:
    """The method's class with its YAML's arguments, not yet made; MethodError when the class is not a Method."""
    where = f"{folder / name}.yaml"
    node = method_node(name, folder)
    problems = check_target(node, where)
    if problems:
        raise MethodError("; ".join(problems))
    factory = instantiate({**node, PARTIAL: True})
    if not (isinstance(factory.func, type) and issubclass(factory.func, Method)):
        raise MethodError(f"{where}.{TARGET}: {node[TARGET]} is not a {Method.__module__}.Method")
    try:
        inspect.signature(factory.func).bind(*factory.args, name=name, **factory.keywords)
    except TypeError as exc:  # a constructor argument the YAML does not give
        raise MethodError(f"{where}: {exc} of {node[TARGET]}") from None
    return factory


def check_methods(names: Sequence[str], folder: Path = METHOD_DIR) -> None:
    """Every problem of ``names`` at once, without making any method: an empty list, an unknown name, a target
    that cannot be imported or is not a :class:`~mnemis.method.Method`, keys its constructor does not take."""
    if not names:
        raise MethodError(f"no method named; choose one or more of {known_methods(folder)} ({folder})")
    problems = []
    for name in names:
        try:
            _factory(name, folder)
        except MethodError as exc:
            problems.append(str(exc))
    if problems:
        raise MethodError("; ".join(problems))


def make_methods(names: Sequence[str], folder: Path = METHOD_DIR) -> list[Method]:
    """The methods ``names`` name, in order (after :func:`check_methods`). Making one does no work: that starts
    with its ``prepare``."""
    check_methods(names, folder)
    return [_factory(name, folder)(name=name) for name in names]


def build_needs(names: Sequence[str], folder: Path = METHOD_DIR) -> frozenset[str]:
    """What the run's shared build must make for the methods ``names`` (the union of their classes' ``builds``),
    read from their classes without making any."""
    check_methods(names, folder)
    return frozenset().union(*(_factory(name, folder).func.builds for name in names))
