"""Helpers shared by the hierarchy tests (a plain module, not a test file): read the rendered prompts
back and answer them by rule through a ``ScriptedBackend``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from mnemis.hierarchy.build import STAGE_CATEGORIZE, STAGE_DESCRIBE, STAGE_REASK
from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.types import Entity, entity_id

_LINE = re.compile(r"^(\d+)\. (.*?) \[(.*)\]$")
_LAYER = re.compile(r"^(?:Layer|You are building layer) (\d+):", re.MULTILINE)  # our prompt | paper prompt
_CATEGORY = re.compile(r'^Category: "(.*)" \(layer (\d+)')


# seven entities of three kinds (pets, trees, instruments): the two-step and embedding-placement tests' graph
TWO_STEP_SPEC = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Maple": ["tree"], "Guitar": ["music"],
                 "Piano": ["music"], "Violin": ["music"]}


def listed_nodes(req: LLMRequest) -> list[str]:
    """Node names listed under ``Nodes:`` in a two-step request (propose or place), in index order."""
    body = req.messages[-1]["content"].split("Nodes:\n", 1)[1].split("\n\n", 1)[0]
    return [_LINE.match(line).group(2) for line in body.splitlines()]


def prompt_nodes(req: LLMRequest) -> list[str]:
    """Node names of a categorize request, in index order (index = position + 1)."""
    text = req.messages[-1]["content"]
    body = text.split("Nodes\n" if "# Nodes\n" in text else "Nodes:\n", 1)[1].split("\n\n", 1)[0]
    return [_LINE.match(line).group(2) for line in body.splitlines()]


def prompt_layer(req: LLMRequest) -> int:
    return int(_LAYER.search(req.messages[-1]["content"]).group(1))


def prompt_existing(req: LLMRequest) -> list[str]:
    text = req.messages[-1]["content"]
    if "Existing categories" not in text:
        return []
    body = text.split("Existing categories", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    return [line[2:].split(" [", 1)[0].split(": e.g.", 1)[0] for line in body.splitlines() if line.startswith("- ")]


def described(req: LLMRequest) -> tuple[str, int]:
    m = _CATEGORY.match(req.messages[-1]["content"])
    return m.group(1), int(m.group(2))


def by_map(
    layers: Mapping[int, Mapping[str, Sequence[str]]],
    *,
    reask: Mapping[int, Mapping[str, Sequence[str]]] | None = None,
) -> Callable[[LLMRequest], object]:
    """A responder that puts node ``name`` of layer ``i`` into ``layers[i][name]`` (a list of categories;
    names not in the map are left out), uses ``reask`` for re-asked nodes, and describes every
    category with tags ``[name.lower()]``."""

    def respond(req: LLMRequest) -> object:
        if req.stage == STAGE_DESCRIBE:
            name, layer = described(req)
            return {"tags": [name.lower()], "summary": f"About {name} at layer {layer}."}
        layer = prompt_layer(req)
        table = (reask or {}).get(layer, {}) if req.stage == STAGE_REASK else layers.get(layer, {})
        groups: dict[str, list[int]] = {}
        for k, name in enumerate(prompt_nodes(req), start=1):
            for cat in table.get(name, ()):
                groups.setdefault(cat, []).append(k)
        return {"assignments": [{"category": c, "indexes": ix} for c, ix in groups.items()]}

    return respond


def make_entities(
    group: str, spec: Mapping[str, Sequence[str]], speakers: Sequence[str] = ()
) -> list[Entity]:
    """Entities named by ``spec``'s keys with their tags; names in ``speakers`` are speaker entities."""
    out = [
        Entity(group_id=group, id=entity_id(group, n), name=n, tags=list(t), summary=f"{n} summary")
        for n, t in spec.items()
    ]
    out += [
        Entity(
            group_id=group, id=entity_id(group, n), name=n, tags=["conversation participant"], is_speaker=True
        )
        for n in speakers
    ]
    return out


def stage_calls(backend: ScriptedBackend) -> list[str]:
    """The stage of each backend batch, in order (each batch must hold a single stage)."""
    out = []
    for batch in backend.batches:
        stages = {r.stage for r in batch}
        assert len(stages) == 1, f"a batch mixes stages {stages}"
        out.append(stages.pop())
    return out


def scripted(responder, max_retries: int = 0) -> tuple[LLM, ScriptedBackend]:
    """An ``LLM`` over a ``ScriptedBackend`` (no cache); returns both."""
    backend = ScriptedBackend(responder)
    return LLM(backend, max_retries=max_retries), backend


__all__ = [
    "STAGE_CATEGORIZE",
    "STAGE_DESCRIBE",
    "STAGE_REASK",
    "by_map",
    "described",
    "make_entities",
    "prompt_existing",
    "prompt_layer",
    "prompt_nodes",
    "scripted",
    "stage_calls",
]
