"""Deterministic fakes for the base-graph tests: episodes and a rule-based responder.

``rule_responder`` reads the rendered prompts back (the same text a model would see) and answers:
capitalised words are entities, every other entity is linked to the first one, a known entity that
starts with a new name resolves it ("Mel" -> "Melanie"), "lives in X" contradicts an older "lives in Y".
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from mnemis.models.llm.base import LLMRequest
from mnemis.testing.responder import current_message, entity_name, section, user_text
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode

T0 = datetime(2023, 5, 8, 13, 56)
_CAP = re.compile(r"\b[A-Z][a-z]{2,}\b")
STOP = {"The", "Task", "Hey", "Wow", "Thanks", "That", "This", "What", "Yes", "And"}


def episodes(group: str, turns: list[tuple[str, str]], start: datetime = T0, first: int = 0) -> list[Episode]:
    out = []
    for i, (speaker, text) in enumerate(turns, start=first):
        out.append(Episode(group_id=group, id=f"{group}:D1:{i + 1}", source_id=f"D1:{i + 1}",
                           name=f"Text 1-{i}", speaker=speaker, content=f"{speaker}: {text}",
                           valid_at=start + timedelta(minutes=i), session=1, turn=i, position=i))
    return out


def rule_responder(req: LLMRequest) -> dict:
    stage = req.stage
    if stage == "extract_entities":
        msg = current_message(req)
        body = msg.split(":", 1)[1]
        return {"names": [w for w in dict.fromkeys(_CAP.findall(body)) if w not in STOP]}
    if stage == "reflect_entities":
        found = {n.lower() for n in section(req, "Entities already found:")}
        words = [w for w in ("pottery", "painting", "camping") if w in current_message(req).lower()]
        return {"names": [w for w in words if w not in found]}
    if stage == "extract_facts":
        ents = section(req, "Entities:")
        msg = current_message(req)
        facts = []
        m = re.search(r"lives? in ([A-Z][a-z]+)", msg)
        for j in range(1, len(ents)):
            if m and ents[j] == m.group(1):
                facts.append({"source": 0, "target": j, "relation": "lives in",
                              "fact": f"{ents[0]} lives in {ents[j]}.", "valid_at": "", "invalid_at": ""})
            else:
                facts.append({"source": 0, "target": j, "relation": "TALKS_ABOUT",
                              "fact": f"{ents[0]} talks about {ents[j]}.", "valid_at": "", "invalid_at": ""})
        return {"facts": facts}
    if stage == "reflect_facts":
        return {"facts": []}
    if stage == "resolve_entities":
        known = [k.split(" - ")[0] for k in section(req, "Known entities:")]
        new = section(req, "New names:")
        out = []
        for i, n in enumerate(new):
            match = next((j for j, k in enumerate(known) if k.lower().startswith(n.lower()) and k != n), -1)
            out.append({"new": i, "match": match})
        return {"decisions": out}
    if stage == "entity_attributes":
        name = entity_name(req)
        n = user_text(req).count("\n- ")
        return {"summary": f"{name} is discussed ({n} items).", "tags": ["Thing", "Test entity"]}
    if stage == "dedup_facts":
        old = section(req, "Existing facts:")
        header = next(h for h in user_text(req).splitlines() if h.startswith("New facts"))
        new = section(req, header)
        out = []
        for i, f in enumerate(new):
            dup = next((j for j, o in enumerate(old) if o.split(" (")[0] == f), -1)
            contra = []
            if " lives in " in f and dup == -1:
                who = f.split(" lives in ")[0]
                contra = [j for j, o in enumerate(old) if o.startswith(f"{who} lives in ")]
            out.append({"new": i, "duplicate_of": dup, "contradicts": contra})
        return {"decisions": out}
    raise AssertionError(f"unexpected stage {stage}")


def graph(store: GraphStore, group: str) -> dict:
    """Everything about one group's base graph that a rerun must reproduce, ids included."""
    return {
        "entities": [e.model_dump() for e in store.entities(group)],
        "facts": [f.model_dump() for f in store.facts(group)],
        "mentions": sorted((m.episode_id, m.entity_id) for m in store.mentions(group)),
        "counts": store.counts(group),
        "embedded": {k: sorted(store.embedded_ids(group, k))
                     for k in ("episode", "entity_name", "entity_summary", "fact")},
    }


CONVERSATIONS = {
    "conv-a": [("Melanie", "I went to Paris with Caroline"), ("Caroline", "Mel, I live in Boston"),
               ("Melanie", "Caroline, I live in Denver and do pottery"),
               ("Caroline", "Mel took pottery in Paris"), ("Melanie", ""),
               ("Caroline", "Melanie, I live in Austin now"), ("Melanie", "Paris again with Caro"),
               ("Caroline", "Mel and Oscar went camping")],
    "conv-b": [("Jon", "Gina opened a Studio"), ("Gina", "Jonny, I live in Rome"),
               ("Jon", "Gina, I live in Milan"), ("Gina", "The Studio is in Milan"),
               ("Jon", "Gina, I do painting at the Studio"), ("Gina", "Jon, I live in Turin")],
    "conv-c": [("Ann", "Bill and I went camping"), ("Bill", "Annie, I live in Oslo"),
               ("Ann", "Bill took painting")],
}


def slice_episodes() -> list[Episode]:
    return [e for g, turns in CONVERSATIONS.items() for e in episodes(g, turns)]


STAGES = ("extract", "resolve", "facts")  # the resumable per-chunk stages of a base-graph build


def snapshot(db) -> dict:
    """The fake slice's graph, ingest stats and per-stage progress in the store at ``db`` (what a resumed run
    must reproduce exactly)."""
    with GraphStore(db) as store:
        return {
            "graph": {g: graph(store, g) for g in CONVERSATIONS},
            "stats": store.get_meta("ingest.stats"),
            "progress": {(s, g): sorted(store.done(s, g))
                         for s in (*STAGES, "attributes") for g in CONVERSATIONS},
        }
