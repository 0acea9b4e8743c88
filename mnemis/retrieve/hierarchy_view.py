"""One group's hierarchy in memory, as System-2 walks it: nodes (categories and entities) and their children."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mnemis.store.sqlite import GraphStore


@dataclass
class Node:
    id: str
    name: str
    tags: list[str]
    summary: str
    layer: int  # 0 = entity

    @property
    def kind(self) -> str:
        return "entity" if self.layer == 0 else "category"


@dataclass
class HierarchyView:
    """One group's hierarchy in memory: nodes (categories and entities) and CATEGORIZES children."""

    nodes: dict[str, Node]
    children: dict[str, list[str]]
    top: list[str]
    store_order: bool = False  # candidates in store order (released form), else by layer and name

    @classmethod
    def load(cls, store: GraphStore, group_id: str, *, store_order: bool = False) -> HierarchyView:
        nodes: dict[str, Node] = {}
        for e in store.entities(group_id):
            nodes[e.id] = Node(e.id, e.name, list(e.tags), e.summary, 0)
        cats = store.categories(group_id)
        for c in cats:
            nodes[c.id] = Node(c.id, c.name, list(c.tags), c.summary, c.layer)
        children: dict[str, list[str]] = {}
        for edge in store.category_edges(group_id):
            if edge.parent_id in nodes and edge.child_id in nodes:
                children.setdefault(edge.parent_id, []).append(edge.child_id)
        top_layer = max((c.layer for c in cats), default=0)
        top = [c.id for c in cats if c.layer == top_layer]  # store order
        if not store_order:
            top.sort(key=lambda i: order(nodes[i]))
        return cls(nodes, children, top, store_order)

    def children_of(self, ids: Sequence[str]) -> list[str]:
        seen = list(dict.fromkeys(c for i in ids for c in self.children.get(i, ())))
        return seen if self.store_order else sorted(seen, key=lambda i: order(self.nodes[i]))

    def descendants(self, node_id: str) -> list[str]:
        """Transitive closure over CATEGORIZES (the node itself excluded), breadth first."""
        out: dict[str, None] = {}
        stack = [node_id]
        while stack:
            nxt = []
            for n in stack:
                for c in self.children.get(n, ()):
                    if c not in out and c != node_id:
                        out[c] = None
                        nxt.append(c)
            stack = nxt
        return list(out)


def order(n: Node) -> tuple:
    return (-n.layer, n.name.casefold(), n.id)
