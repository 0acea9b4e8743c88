"""The scripted hierarchy replies: a real multi-layer hierarchy from a scripted build."""

from __future__ import annotations

from mnemis import Memory
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.models.rerank import CosineReranker
from mnemis.testing.hierarchy_rules import categorize_reply, scripted_hierarchy_llm

NAMES = ["Kalo", "Miren", "Tasro", "Venqui", "Delbra", "Senel", "Torni", "Zupha", "Gorlia", "Mondre", "Viksol",
         "Berta", "Nychi", "Valros", "Einul", "Fakalo", "Romir", "Ventas"]


def test_groups_of_consecutive_nodes():
    nodes = "\n".join(f"{k}. {n} [Thing]" for k, n in enumerate(NAMES[:13], start=1))
    req = LLMRequest(messages=[{"role": "user", "content": f"Nodes:\n{nodes}\n\nLayer 2: merge them"}],
                     stage="hierarchy.categorize")
    got = categorize_reply(req)["assignments"]
    assert [a["indexes"] for a in got] == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13]]  # no category of one
    assert got[0]["category"] == "Kalo cluster 2"
    assert categorize_reply(LLMRequest(messages=[{"role": "user", "content": "x"}], stage="extract_facts")) is None


def test_a_scripted_build_has_several_layers(tmp_path):
    emb = HashingEmbedder(64)
    msgs = [{"speaker": "Ann", "text": f"{a} met {b} near {c}.", "time": f"2024-05-01T10:{i:02d}"}
            for i, (a, b, c) in enumerate(zip(NAMES, NAMES[6:] + NAMES[:6], NAMES[12:] + NAMES[:12]))]
    with Memory.from_models(scripted_hierarchy_llm(), emb, CosineReranker(embedder=emb), path=tmp_path / "m.db",
                            overrides=["experiment=quickstart", "hierarchy.top_width=null"]) as mem:  # every layer
        mem.add("g", msgs)
        metrics = mem.organize(["g"])["g"]
        entities = mem.counts("g")["entities"]
    assert entities >= 18 and metrics["layers"] >= 2
    assert metrics["nodes_per_layer"][1] < entities / 3  # groups of about six


def test_the_two_step_categoriser_gets_the_same_groups():
    from mnemis.prompts.categorize_two_step import node_key, render_assign, render_propose
    from mnemis.testing.hierarchy_rules import two_step_reply
    from mnemis.prompts.categorize import NodeView

    nodes = [NodeView(n, ["Thing"]) for n in NAMES[:13]]
    proposal = two_step_reply(LLMRequest(messages=render_propose(nodes, 1, least=2, most=4),
                                         stage="hierarchy.propose"))
    assert proposal == {"categories": ["Kalo cluster 1", "Torni cluster 1"]}
    placed = two_step_reply(LLMRequest(messages=render_assign(nodes, 1, proposal["categories"]),
                                       stage="hierarchy.assign"))["placements"]
    assert list(placed) == [node_key(k, n) for k, n in enumerate(NAMES[:13], start=1)]
    assert [v[0] for v in placed.values()] == ["Kalo cluster 1"] * 6 + ["Torni cluster 1"] * 7
