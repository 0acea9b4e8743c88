"""Model roles of a run and the checks made before any model loads.

``llm`` builds the memory; ``selector_llm`` (System-2 selection) and ``answer_llm`` fall back to it when
null; each judge names its model slot under ``judge_llms`` (null = the run's ``llm``, the model under
test) and its LoCoMo criterion. ``check_roles`` turns an unfillable role into a startup error naming
the key; ``roles_summary`` is the ``roles.json`` the report shows (including which judges grade their
own model's answers). ``run_seeds`` reads the ``seeds=[...]`` option. A role or seed list that cannot work
raises :class:`RoleError` (the CLI turns it into a one-line exit).
"""

from __future__ import annotations

import logging
from typing import Any

from mnemis.address import drop_fields
from mnemis.model_roles import LLM_ROLE_KEYS, judge_slots
from mnemis.settings import AnswerSettings, JudgeSettings, RunSettings

log = logging.getLogger(__name__)
NOT_MODEL_FIELDS = frozenset({"cache_dir", "cache_mode"})  # where replies are cached, not which model


# Model roles besides the build model ``llm``: null falls back to ``llm``. Not build keys, so changing
# them reuses the built memory. Every role is listed in mnemis.model_roles.ModelRoles.
ROLE_KEYS = LLM_ROLE_KEYS


class RoleError(ValueError):
    """A model role, judge or seed list of the config that cannot work; the message names the key to set."""


def judge_specs(judge: JudgeSettings) -> list[dict[str, Any]]:
    """``judge.judges`` as ``[{name, llm, criterion}]``, headline first.

    An entry is a mapping (``llm``: a ``judge_llms`` name, null = the run's ``llm``; ``criterion``: the
    LoCoMo grading criterion) or a bare name (``main`` = the run's llm, any other = ``judge_llms.<name>``).
    """
    from mnemis.eval.judge import DEFAULT_CRITERION

    entries = judge.judges or ["main"]
    return [{"name": name, "llm": slot,
             "criterion": (None if isinstance(entry, str) else entry.criterion) or DEFAULT_CRITERION,
             "lme_format": judge.longmemeval_format}
            for (name, slot), entry in zip(judge_slots(judge), entries)]


def backend_class(node: Any) -> Any:
    """The backend class an LLM config node names (``backend._target_``), or None when it names none."""
    import importlib

    target = ((node or {}).get("backend") or {}).get("_target_") if isinstance(node, dict) else None
    if not target or "." not in str(target):
        return None
    module, _, name = str(target).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def check_roles(settings: RunSettings) -> None:
    """Fail before any model loads when a role cannot be filled: an unknown answer prompt or judge
    criterion, a duplicate judge name, or a judge whose model slot ``judge_llms.<name>`` is empty.
    Every message names the config key to set."""
    from mnemis.prompts.answer import answer_prompt_for
    from mnemis.prompts.judge_locomo import LOCOMO_CRITERIA

    for method in settings.methods:
        try:
            answer_prompt_for(settings.answer, method)
        except ValueError as exc:
            raise RoleError(str(exc)) from None
    slots = settings.judge_llms
    seen: set[str] = set()
    for i, spec in enumerate(judge_specs(settings.judge)):
        where = f"judge.judges[{i}] ({spec['name']})"
        if spec["name"] in seen:
            raise RoleError(f"{where}: duplicate judge name")
        seen.add(spec["name"])
        if spec["criterion"] not in LOCOMO_CRITERIA:
            raise RoleError(f"{where}: criterion={spec['criterion']!r}; choose one of {sorted(LOCOMO_CRITERIA)}")
        slot = spec["llm"]
        if spec["lme_format"] == "yes_no":
            node = settings.llm if slot is None else slots.get(slot)
            cls = backend_class(node)
            if cls is not None and not getattr(cls, "plain_text", True):
                key = "llm" if slot is None else f"judge_llms.{slot}"
                raise RoleError(
                    f"{where}: judge.longmemeval_format=yes_no needs a model that writes free text, but {key} is "
                    f"{cls.__name__}, which only writes schema instances. Set {key} to a real model, or "
                    "judge.longmemeval_format=reasoned")
        if slot is not None and slots.get(slot) is None:
            paper = " The paper judged every row with GPT-4.1-mini." if settings.fidelity == "paper" else ""
            raise RoleError(
                f"{where} is judged by judge_llms.{slot}, which is empty.{paper} Set it to an LLM config, e.g. "
                f"`+llm@judge_llms.{slot}=openai_compat judge_llms.{slot}.backend.model=gpt-4.1-mini "
                f"judge_llms.{slot}.backend.base_url=https://api.openai.com/v1 judge_llms.{slot}.backend.extra_body=null`, "
                f"or judge with the model under test: `judge_llms.{slot}='${{llm}}'` (the report then says so)")


def describe_llm(node: Any) -> str:
    """A short name of an LLM config: ``<backend class>:<model>``."""
    if not isinstance(node, dict):
        return str(node)
    backend = node.get("backend") or {}
    cls = str(backend.get("_target_", node.get("_target_", "?"))).rsplit(".", 1)[-1]
    model = backend.get("model")
    return f"{cls}:{model}" if model else cls


def _same_model(a: Any, b: Any) -> bool:
    return a is not None and b is not None and drop_fields(a, NOT_MODEL_FIELDS) == drop_fields(b, NOT_MODEL_FIELDS)


def roles_summary(settings: RunSettings) -> dict[str, Any]:
    """Which model plays which role (``roles.json``); ``self_judged`` marks a judge that is the model
    under test (the same model as the answerer or the build llm)."""
    build = settings.llm
    roles = {"llm": describe_llm(build)}
    for key in ROLE_KEYS:
        own = getattr(settings, key)
        roles[key] = describe_llm(own or build) + ("" if own else " (= llm)")
    answer = settings.answer_llm or build
    judges = []
    for spec in judge_specs(settings.judge):
        node = build if spec["llm"] is None else settings.judge_llms.get(spec["llm"])
        judges.append({**spec, "model": describe_llm(node),
                       "slot": "llm" if spec["llm"] is None else f"judge_llms.{spec['llm']}",
                       "self_judged": _same_model(node, answer) or _same_model(node, build)})
    return {"roles": roles, "judges": judges, "headline_judge": judges[0]["name"] if judges else None,
            "fidelity": settings.fidelity}


def run_seeds(seed: int, seeds: Any, answer: AnswerSettings) -> list[int]:
    """``seeds`` (answer + judge once per seed; metrics give mean ± std), else ``[seed]``."""
    if seeds is None:
        return [int(seed)]
    if isinstance(seeds, (int, str)) or not seeds:
        raise RoleError(f"seeds={seeds!r}: give a non-empty list such as seeds=[0,1,2]")
    try:
        out = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise RoleError(f"seeds={seeds!r}: seeds must be integers") from None
    if len(set(out)) != len(out):
        raise RoleError(f"seeds={seeds!r}: repeated seed")
    temperature = answer.temperature
    if len(out) > 1 and temperature == 0.0:
        log.warning("seeds=%s with answer.temperature=0: greedy answers do not depend on the seed, so the "
                    "spread over seeds measures nothing; set answer.temperature > 0", out)
    return out
