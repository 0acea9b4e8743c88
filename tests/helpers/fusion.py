"""Questions and route contexts for the fusion tests."""

from __future__ import annotations

from mnemis.types import Hit, Question, RetrievedContext


def Q(text, group="g1", n=0):
    return Question(group_id=group, id=f"{group}-q{n}", question=text, answer="", category="1")


def hits(kind, ids, key):
    return [Hit(id=i, kind=kind, score=1.0 / (r + 1), scores={key: 1.0 / (r + 1)}) for r, i in enumerate(ids)]


def s1_ctx(q, eps=(), ents=(), facts=()):
    return RetrievedContext(question_id=q.id, group_id=q.group_id, episodes=hits("episode", eps, "rrf"),
                            entities=hits("entity", ents, "rrf"), facts=hits("fact", facts, "rrf"))


def s2_ctx(q, eps=(), ents=(), facts=(), flags=()):
    ent_hits = [Hit(id=i, kind="category" if i.startswith("cat_") else "entity", score=1.0, scores={"s2": 1.0})
                for i in ents]
    return RetrievedContext(question_id=q.id, group_id=q.group_id, episodes=hits("episode", eps, "s2"),
                            entities=ent_hits, facts=hits("fact", facts, "s2"), flags=list(flags))
