"""Prompt modules: each holds its output schema, a typed render function and a ``Prompt`` constant."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, model_validator


def bare_list_as(field: str) -> Any:
    """A "before" model validator for a schema class body: a reply that is the bare JSON array (small models
    often drop the wrapping object) is read as ``{field: array}``. Use: ``_accept_bare_list = bare_list_as("items")``."""

    def wrap(value: Any) -> Any:
        return {field: value} if isinstance(value, list) else value

    return model_validator(mode="before")(wrap)


def system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@dataclass(frozen=True)
class Prompt:
    """A versioned prompt: ``render(...)`` returns chat messages; ``schema`` is the reply's pydantic model."""

    name: str
    version: str
    render: Callable[..., list[dict[str, str]]]
    schema: type[BaseModel] | None

    @property
    def stage(self) -> str:
        return self.name

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def fingerprint(self, *args: Any, **kwargs: Any) -> str:
        """Hash of a rendering, written into run outputs for reproduction."""
        msgs = self.render(*args, **kwargs)
        return hashlib.sha1(repr(msgs).encode()).hexdigest()[:12]
