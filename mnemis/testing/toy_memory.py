"""A small hand-built LoCoMo-like memory (two conversations, a three- and a two-layer hierarchy, facts and
mentions) with questions whose evidence it holds: the shared graph of the System-2 integration test and the
System-2 cost benchmark (``experiments/bench/system2_cost.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from mnemis.store.sqlite import GraphStore
from mnemis.types import Category, CategoryEdge, Entity, Episode, Fact, Mention, category_id, entity_id

T0 = datetime(2023, 5, 8, 13, 0)
# group -> speakers, entities {name: tags}, hierarchy {layer: {category: children}}, facts (src, tgt, text)
GRAPHS = {
    "conv-a": {
        "speakers": ["Caroline", "Melanie"],
        "entities": {
            "LGBTQ support group": ["community", "support"], "adoption agency": ["adoption", "family"],
            "counseling career": ["career", "psychology"], "painting": ["art", "hobby"],
            "pottery class": ["art", "class"], "camping trip": ["outdoors", "travel"], "beach": ["outdoors"],
            "kids": ["family", "children"], "guitar": ["music", "instrument"], "Sweden": ["country", "home"],
            "charity race": ["sport", "event"], "running": ["sport", "exercise"],
        },
        "layers": {
            1: {"Speaker": ["Caroline", "Melanie"], "Community": ["LGBTQ support group"],
                "Family": ["adoption agency", "kids"], "Career": ["counseling career"],
                "Art": ["painting", "pottery class"], "Music": ["guitar"], "Outdoors": ["camping trip", "beach"],
                "Sport": ["running", "charity race"], "Places": ["Sweden"]},
            2: {"People": ["Speaker", "Family", "Community"], "Creative Activities": ["Art", "Music"],
                "Active Life": ["Outdoors", "Sport"], "Life Plans": ["Career", "Places", "Family"]},
            3: {"Personal Life": ["People", "Life Plans"], "Leisure": ["Creative Activities", "Active Life"]},
        },
        "facts": [("Caroline", "LGBTQ support group", "Caroline attended an LGBTQ support group meeting"),
                  ("Caroline", "adoption agency", "Caroline contacted an adoption agency to adopt children"),
                  ("Caroline", "counseling career", "Caroline wants to pursue a career in counseling"),
                  ("Melanie", "painting", "Melanie painted a sunrise over a lake"),
                  ("Melanie", "pottery class", "Melanie signed up for a pottery class"),
                  ("Melanie", "camping trip", "Melanie went camping with her family"),
                  ("Melanie", "kids", "Melanie has two kids"),
                  ("Caroline", "guitar", "Caroline plays the guitar"),
                  ("Caroline", "Sweden", "Caroline moved from Sweden four years ago"),
                  ("Melanie", "charity race", "Melanie ran a charity race for mental health"),
                  ("Melanie", "running", "Melanie runs to clear her mind"),
                  ("Melanie", "beach", "Melanie took the kids to the beach")],
    },
    "conv-b": {
        "speakers": ["Jon", "Gina"],
        "entities": {"dance studio": ["dance", "business"], "bank job": ["job", "work"],
                     "clothing store": ["fashion", "business"], "Paris": ["city", "travel"],
                     "dance contest": ["dance", "event"]},
        "layers": {
            1: {"Speaker": ["Jon", "Gina"], "Business": ["dance studio", "clothing store"], "Work": ["bank job"],
                "Dance": ["dance studio", "dance contest"], "Travel": ["Paris"]},
            2: {"People": ["Speaker"], "Career": ["Business", "Work"], "Hobbies": ["Dance", "Travel"]},
        },
        "facts": [("Jon", "bank job", "Jon lost his job at the bank"),
                  ("Jon", "dance studio", "Jon is opening a dance studio"),
                  ("Gina", "clothing store", "Gina launched an online clothing store"),
                  ("Jon", "Paris", "Jon visited Paris last year"),
                  ("Gina", "dance contest", "Gina won a dance contest as a teenager")],
    },
}
QUESTIONS = [("conv-a", "What career path does Caroline want to pursue?", [2]),
             ("conv-a", "What activities does Melanie do with her kids?", [5, 11]),
             ("conv-b", "Why is Jon opening a dance studio?", [0, 1]),
             ("conv-b", "What business did Gina start?", [2])]


def build_toy_store(path) -> GraphStore:
    """A store at ``path`` holding both conversations of :data:`GRAPHS`."""
    store = GraphStore(path)
    for g, spec in GRAPHS.items():
        ents = [Entity(group_id=g, id=entity_id(g, n), name=n, tags=t, summary=f"{n} came up in the chat.")
                for n, t in spec["entities"].items()]
        ents += [Entity(group_id=g, id=entity_id(g, n), name=n, tags=["speaker"], is_speaker=True)
                 for n in spec["speakers"]]
        store.upsert_entities(ents)
        eps, facts, mentions = [], [], []
        for n, (src, tgt, text) in enumerate(spec["facts"]):
            eid = Episode.make_id(g, f"D{n // 4 + 1}:{n % 4 + 1}")
            eps.append(Episode(group_id=g, id=eid, source_id=eid.split(":", 1)[1], name=f"e{n}", speaker=src,
                               content=f"{text}.", valid_at=T0 + timedelta(days=7 * n), session=n // 4 + 1,
                               turn=n % 4, position=n))
            facts.append(Fact(group_id=g, id=f"{g}-f{n}", source_id=entity_id(g, src), target_id=entity_id(g, tgt),
                              relation="RELATES_TO", fact=text, valid_at=T0 + timedelta(days=7 * n), episode_ids=[eid]))
            mentions += [Mention(group_id=g, episode_id=eid, entity_id=entity_id(g, x)) for x in (src, tgt)]
        store.upsert_episodes(eps)
        store.upsert_facts(facts)
        store.add_mentions(mentions)
        cats, edges = [], []
        for layer, table in spec["layers"].items():
            for name, children in table.items():
                cid = category_id(g, layer, name)
                cats.append(Category(group_id=g, id=cid, name=name, layer=layer, tags=[name.lower()]))
                edges += [CategoryEdge(group_id=g, parent_id=cid, child_id=category_id(g, layer - 1, c)
                                       if layer > 1 else entity_id(g, c)) for c in children]
        store.replace_hierarchy(g, cats, edges)
    return store
