"""Which reply schema each schema-constrained stage sends, and where its reply budget is configured.

Used by the reply-budget test (every prompt's reply must fit its stage's effective ``max_tokens``) and
by ``experiments/bench/reply_budgets.py``, from the run's settings (:class:`mnemis.settings.RunSettings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mnemis.prompts.categorize import bounded_categorization
from mnemis.prompts.categorize_two_step import NAME_CHARS, node_key, placement_schema, proposal_count, proposal_schema
from mnemis.prompts.dedup_facts import FactDecisions
from mnemis.prompts.describe_category import CategoryDescription
from mnemis.prompts.entity_attributes import EntityAttributes
from mnemis.prompts.extract_entities import ExtractedEntities
from mnemis.prompts.extract_facts import ExtractedFacts
from mnemis.prompts.judge_beam import RubricVerdict, SameEvent
from mnemis.prompts.judge_locomo import JudgeVerdict
from mnemis.prompts.judge_locomo_plus import CueVerdict, CueVerdictPartial
from mnemis.prompts.mem0_extract import CandidateFacts
from mnemis.prompts.mem0_graph import GraphEntities, GraphRelations, ObsoleteRelations
from mnemis.prompts.mem0_summary import ConversationSummary
from mnemis.prompts.mem0_update import MemoryOperation
from mnemis.prompts.resolve_entities import Resolutions
from mnemis.prompts.select_nodes import NodeSelections, selection_schema

if TYPE_CHECKING:
    from mnemis.settings import RunSettings

# no reply schema: plain text, no worst case (every answer prompt runs in the "answer" stage)
UNCAPPED_ROUND_CHECK = 200
# (and the official LongMemEval judge: a bare yes / no in 10 tokens)
PLAIN_TEXT_STAGES = frozenset({"answer", "answer_paper", "answer_mem0", "judge_longmemeval_yes_no"})


def stage_reply_schemas(settings: RunSettings) -> dict[str, tuple[type[BaseModel], Any]]:
    """stage -> (the reply schema the stage sends at its largest, its configured ``max_tokens``)."""
    # the ingest builder and the hierarchy are `_target_` nodes: their keys are their targets' arguments
    ing, hier, s2 = settings.ingest["max_tokens"], settings.hierarchy, settings.retrieval.system2
    judge, mem0, mem0g = settings.judge.max_tokens, settings.mem0.max_tokens, settings.mem0g.max_tokens
    # null = one prompt per round with every candidate (mode=paper): each request's schema is built from its
    # own candidate count and its budget from that schema; the static check uses a large round of 200
    per_prompt = s2.max_candidates_per_prompt or UNCAPPED_ROUND_CHECK
    select = selection_schema(per_prompt) if s2.constrain_ids else NodeSelections
    return {
        "extract_entities": (ExtractedEntities, ing["extract_entities"]),
        "reflect_entities": (ExtractedEntities, ing["reflect_entities"]),
        "extract_facts": (ExtractedFacts, ing["extract_facts"]),
        "reflect_facts": (ExtractedFacts, ing["reflect_facts"]),
        "resolve_entities": (Resolutions, ing["resolve_entities"]),
        "dedup_facts": (FactDecisions, ing["dedup_facts"]),
        "entity_attributes": (EntityAttributes, ing["entity_attributes"]),
        "categorize": (bounded_categorization(hier["batch_size"]), hier["categorize_sampling"]["max_tokens"]),
        "describe_category": (CategoryDescription, hier["describe_sampling"]["max_tokens"]),
        **_two_step_schemas(hier),
        "select": (select, s2.max_tokens),
        "judge_locomo": (JudgeVerdict, judge),
        "judge_locomo_generous": (JudgeVerdict, judge),
        "judge_longmemeval": (JudgeVerdict, judge),
        "judge_beam_rubric": (RubricVerdict, judge),
        "judge_beam_same_event": (SameEvent, judge),
        "judge_locomo_plus": (CueVerdict, judge),
        "judge_locomo_plus_partial": (CueVerdictPartial, judge),
        "mem0_extract": (CandidateFacts, mem0["mem0_extract"]),
        "mem0_update": (MemoryOperation, mem0["mem0_update"]),
        "mem0_summary": (ConversationSummary, mem0["mem0_summary"]),
        "query_entities": (ExtractedEntities, mem0g["query_entities"]),  # graphiti ablation
        "mem0g_query_entities": (GraphEntities, mem0g["query_entities"]),
        "mem0g_entities": (GraphEntities, mem0g["mem0g_entities"]),
        "mem0g_relations": (GraphRelations, mem0g["mem0g_relations"]),
        "mem0g_conflicts": (ObsoleteRelations, mem0g["mem0g_conflicts"]),
    }


def _two_step_schemas(hier: dict[str, Any]) -> dict[str, tuple[type[BaseModel], Any]]:
    """The two-step categoriser's stages at their largest: a full batch of ``batch_size`` nodes, the most names
    the proposal may ask for, each name and node key at its longest. None when the config categorises in one step."""
    if hier.get("categorizer") != "two_step":
        return {}
    n = int(hier["batch_size"])
    least, most = proposal_count(n, int(hier["propose_children"]), int(hier["min_children"]))
    keys = tuple(node_key(k, "x" * 64) for k in range(1, n + 1))
    names = tuple(f"{k:0{NAME_CHARS}d}"[-NAME_CHARS:] for k in range(most))
    return {
        "hierarchy.propose": (proposal_schema(least, most), hier["propose_sampling"]["max_tokens"]),
        "hierarchy.assign": (placement_schema(keys, names, int(hier["max_parents"])),
                             hier["assign_sampling"]["max_tokens"]),
    }
