"""System-2 global selection (the paper's global selection, with the choices the fidelity ledger lists), batched across queries.

Walk, per query: start with every top-layer category of the query's group; each round the LLM
selects among the candidates; a selected node expands to its (deduplicated) children, which are the
next round's candidates; a node flagged ``take_all_children`` adds itself and its whole subtree with
no further calls. A round that selects nothing ends the walk (``min_top_selections`` and ``min_lower_selections``
put a minimum on each prompt's decoding schema, so a small model cannot stop at the first layer). With
``entity_round`` (default, as in
the paper) the entity children of selected layer-1 categories get one more LLM round; with
``entity_round=False`` entities are never shown to the LLM and enter only through shortcut subtrees
(the released code that produced the paper's metrics files; ``mode=paper``). Selected entities then
expand one hop (:mod:`mnemis.retrieve.expand`).

Output per query: the selected nodes plus the one-hop neighbours (entities and categories in one
list), the facts and the episodes. With every cap ``None`` (``mode=paper``) all of it goes to the
fuser uncut, as in the paper, where the reranker does every cut. With caps (the default) each cut
ranks by query relevance first (:mod:`mnemis.retrieve.expand`), so the node list never loses the
deepest nodes or a whole kind by walk position.

Batching: round r of EVERY active query (all groups) is ONE ``llm.generate`` call. Candidates are
sorted (layer descending, name, id) so that prompts of a group share their prefix, and a candidate
list longer than ``max_candidates_per_prompt`` is split into several prompts whose selections are
merged (``None``: one prompt with every candidate, as the released code does). With ``page_by_window``
the lists are also cut into pages that fit ``window_tokens`` (:mod:`mnemis.retrieve.pages`), and a page the
engine still rejects as too long is halved and asked again, so no walk ends because a prompt was too long. Output maps back by prompt-local id, then exact name, then case-insensitive name; anything
else is an invented selection (ignored, counted in the traversal log).

Robustness: a query whose top round fails (every prompt failed: ``prompt_too_long`` when the engine rejected
every one for its length, else ``llm_failure``) or selects nothing, or whose group
has no hierarchy, falls back to System-1 alone: its result is empty and flagged ``s2_fallback`` (the
fuser then uses System-1 only). Nothing in one query fails the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemis.models.cache import CacheMissError
from mnemis.models.failures import EngineFailure
from mnemis.models.llm.base import LLMRequest, LLMResult, Sampling
from mnemis.models.llm.budget import worst_case_tokens
from mnemis.prompts.select_nodes import (
    SELECT_NODES,
    SELECT_NODES_RELEASED,
    CandidateView,
    NodeSelections,
    ReleasedSelections,
    candidate_line,
    released_line,
    released_selection_schema,
    salvage_selections,
    selection_schema,
)
from mnemis.retrieve.expand import ExpandCaps, cap_nodes, expand_one_hop
from mnemis.retrieve.hierarchy_view import HierarchyView, Node, order  # noqa: F401  (HierarchyView: re-exported)
from mnemis.retrieve.pages import is_window_error, messages_tokens, window_pages
from mnemis.retrieve.system2_records import (  # noqa: F401  (re-exported)
    RoundLog,
    System2Config,
    System2Result,
    Traversal,
)
from mnemis.store.sqlite import GraphStore
from mnemis.types import Hit, Question, RetrievedContext, normalize_name

log = logging.getLogger(__name__)
FALLBACK_FLAG = "s2_fallback"


@dataclass
class _Walk:
    question: Question
    view: HierarchyView
    selected: dict[str, None] = field(default_factory=dict)
    frontier: list[str] = field(default_factory=list)
    rounds: list[RoundLog] = field(default_factory=list)
    done: bool = False
    fallback: str | None = None
    flags: list[str] = field(default_factory=list)


@dataclass
class _Prompt:
    walk: _Walk
    cands: list[str]  # store ids; local id "n{j+1}" = cands[j]


class System2:
    """Batched global selection over the hierarchy of each query's group.

    Args:
        store: the graph store (hierarchy, entities, facts, mentions, episodes).
        llm: an ``LLM`` client (``generate(requests) -> results``); selection runs under stage ``select``.
        cfg: a :class:`System2Config` (or a dict of its keys); ``**overrides`` replace single keys.
    """

    def __init__(self, store: GraphStore, llm, cfg: System2Config | dict | None = None, **overrides) -> None:
        base = cfg.model_dump() if isinstance(cfg, System2Config) else dict(cfg or {})
        self.cfg = System2Config(**{**base, **overrides})
        self.store, self.llm = store, llm
        self._views: dict[str, HierarchyView] = {}
        self._resplits: dict[int, int] = {}  # id(walk) -> pages split again in the current round

    def view(self, group_id: str) -> HierarchyView:
        if group_id not in self._views:
            self._views[group_id] = HierarchyView.load(self.store, group_id,
                                                       store_order=self.cfg.prompt_form == "released")
        return self._views[group_id]

    def refresh(self) -> None:
        """Forget cached hierarchies (after ``organize()`` rebuilt them)."""
        self._views.clear()

    # ------------------------------------------------------------------ walk
    def select(self, questions: Sequence[Question]) -> list[System2Result]:
        """Global selection for every question, in input order (one ``generate`` per round)."""
        walks = [_Walk(q, self.view(q.group_id)) for q in questions]
        for w in walks:
            if not w.view.top:
                w.done, w.fallback = True, "no_hierarchy"
        for r in range(self.cfg.max_rounds):
            active = [w for w in walks if not w.done]
            if not active:
                break
            self._round(r, active)
        return self._finish(walks)

    def _candidates(self, r: int, w: _Walk) -> list[str]:
        ids = w.view.top if r == 0 else w.view.children_of(w.frontier)
        ids = [i for i in ids if i not in w.selected]
        if not self.cfg.entity_round:
            ids = [i for i in ids if w.view.nodes[i].layer > 0]
        return ids

    def _round(self, r: int, active: list[_Walk]) -> None:
        prompts: list[_Prompt] = []
        for w in active:
            cands = self._candidates(r, w)
            if not cands:
                w.done = True
                continue
            prompts += [_Prompt(w, page) for page in self._pages(w, cands)]
        if not prompts:
            return
        results = self._generate(prompts, first_round=r == 0)
        if self.cfg.page_by_window:
            prompts, results = self._resplit_too_long(prompts, results, first_round=r == 0)
        by_walk: dict[int, list[tuple[_Prompt, LLMResult]]] = {}
        for p, res in zip(prompts, results):
            by_walk.setdefault(id(p.walk), []).append((p, res))
        for pairs in by_walk.values():
            self._apply(r, pairs[0][0].walk, pairs)

    def _pages(self, w: _Walk, cands: list[str]) -> list[list[str]]:
        """The candidate list cut into prompts: at most ``max_candidates_per_prompt`` each, and with
        ``page_by_window`` into pages that fit ``window_tokens`` (:mod:`mnemis.retrieve.pages`)."""
        cap = self.cfg.max_candidates_per_prompt or len(cands)
        chunks = [cands[i : i + cap] for i in range(0, len(cands), cap)]
        if not (self.cfg.page_by_window and self.cfg.window_tokens):
            return chunks
        return [page for chunk in chunks for page in self._fit_window(w, chunk)]

    def _fit_window(self, w: _Walk, cands: list[str]) -> list[list[str]]:
        cfg = self.cfg
        released = cfg.prompt_form == "released"
        prompt = SELECT_NODES_RELEASED if released else SELECT_NODES
        line = released_line if released else candidate_line
        nodes = [w.view.nodes[i] for i in cands]
        views = [CandidateView(n.id if released else f"n{j + 1}", n.name, n.tags, n.summary)
                 for j, n in enumerate(nodes)]
        overhead = messages_tokens(prompt.render(w.question.question, [], use_summary=cfg.use_summary,
                                                 use_tags=cfg.use_tags))
        if isinstance(cfg.max_tokens, int) and cfg.max_tokens > 0:
            fixed, per = cfg.max_tokens, 0
        else:  # auto: the schema's worst case grows by a fixed amount per listed candidate
            one, two = (worst_case_tokens(self._schema(cands[:k], released, 0).model_json_schema()) or 0
                        for k in (1, 2))
            per = max(two - one, 0)
            fixed = one - per
        return window_pages(cands, overhead=overhead, reply_fixed=fixed, reply_per_item=per,
                            window=cfg.window_tokens or 0,
                            line_chars=lambda j: len(line(views[j], use_summary=cfg.use_summary,
                                                          use_tags=cfg.use_tags)))

    def _schema(self, cands: list[str], released: bool, min_items: int):
        if released:
            return released_selection_schema(tuple(cands), min_items)
        return selection_schema(len(cands), min_items)

    def _resplit_too_long(self, prompts: list[_Prompt], results: list[LLMResult], *, first_round: bool
                          ) -> tuple[list[_Prompt], list[LLMResult]]:
        """Pages the engine rejected as longer than its window, halved and asked again (all in one batch per
        pass) until they fit or hold one candidate; the halves are counted on the round's log."""
        while True:
            over = [j for j, (p, res) in enumerate(zip(prompts, results))
                    if not res.ok and is_window_error(res.error) and len(p.cands) > 1]
            if not over:
                return prompts, results
            halves = {j: [_Prompt(prompts[j].walk, prompts[j].cands[: len(prompts[j].cands) // 2]),
                          _Prompt(prompts[j].walk, prompts[j].cands[len(prompts[j].cands) // 2 :])] for j in over}
            for j in over:
                self._resplits[id(prompts[j].walk)] = self._resplits.get(id(prompts[j].walk), 0) + 1
            fresh = self._generate([h for j in over for h in halves[j]], first_round=first_round)
            answers = iter(fresh)
            new_prompts: list[_Prompt] = []
            new_results: list[LLMResult] = []
            for j, (p, res) in enumerate(zip(prompts, results)):
                if j in halves:
                    for h in halves[j]:
                        new_prompts.append(h)
                        new_results.append(next(answers))
                else:
                    new_prompts.append(p)
                    new_results.append(res)
            prompts, results = new_prompts, new_results

    def _generate(self, prompts: list[_Prompt], first_round: bool = False) -> list[LLMResult]:
        cfg = self.cfg
        sampling = Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed)
        requests = []
        released = cfg.prompt_form == "released"
        prompt = SELECT_NODES_RELEASED if released else SELECT_NODES
        min_items = cfg.min_top_selections if first_round else cfg.min_lower_selections
        for p in prompts:
            nodes = [p.walk.view.nodes[i] for i in p.cands]
            views = [CandidateView(n.id if released else f"n{j + 1}", n.name, n.tags, n.summary)
                     for j, n in enumerate(nodes)]
            msgs = prompt.render(p.walk.question.question, views, use_summary=cfg.use_summary, use_tags=cfg.use_tags)
            schema = self._schema(p.cands, released, min_items) if cfg.constrain_ids else prompt.schema
            requests.append(LLMRequest(messages=msgs, schema=schema, sampling=sampling,
                                       stage=prompt.stage, salvage=cfg.salvage))
        try:
            results = list(self.llm.generate(requests))
            if len(results) != len(requests):
                raise RuntimeError(f"llm returned {len(results)} results for {len(requests)} requests")
        except (CacheMissError, EngineFailure):  # a missing replay entry or a dead engine stops the run
            raise
        except Exception as exc:  # noqa: BLE001 - a crashed batch fails its items, not the run
            log.exception("selection batch failed")
            return [LLMResult(error=f"{type(exc).__name__}: {exc}"[:500]) for _ in requests]
        return results

    def _apply(self, r: int, w: _Walk, pairs: list[tuple[_Prompt, LLMResult]]) -> None:
        view = w.view
        all_cands = [c for p, _ in pairs for c in p.cands]
        rec = RoundLog(round=r, layer=max(view.nodes[c].layer for c in all_cands), candidates=all_cands,
                       prompts=len(pairs), resplit=self._resplits.pop(id(w), 0))
        picked: dict[str, bool] = {}  # store id -> take_all_children
        for p, res in pairs:
            rec.prompt_tokens += res.prompt_tokens
            rec.completion_tokens += res.completion_tokens
            parsed = res.parsed if res.ok else None
            if isinstance(parsed, ReleasedSelections):
                parsed = parsed.as_selections()
            if isinstance(parsed, NodeSelections):
                sels = parsed.selections
                rec.salvaged += int(res.salvaged)  # the client kept the complete selections of a cut reply
            else:
                sels = salvage_selections(res.text) if self.cfg.salvage else []
                if not sels:
                    rec.failed_prompts += 1
                    rec.too_long += int(not res.ok and is_window_error(res.error))
                    continue
                rec.salvaged += 1
            invented = 0
            for sel in sels:
                sid = _map_back(sel.id, sel.name, p.cands, view)
                if sid is None:
                    invented += 1
                    continue
                picked[sid] = picked.get(sid, False) or sel.take_all_children
            rec.invented += invented
        w.rounds.append(rec)
        if rec.failed_prompts == len(pairs):
            w.done = True
            if r == 0:
                w.fallback = "prompt_too_long" if rec.too_long == len(pairs) else "llm_failure"
            else:
                w.flags.append("s2_round_failed")
            return
        if rec.failed_prompts:
            w.flags.append("s2_prompt_failed")
        if not picked:
            w.done = True
            if r == 0:
                w.fallback = "empty_top_selection"
            return
        frontier = []
        for sid, flag in picked.items():
            subtree = view.descendants(sid) if flag else []
            if subtree:
                rec.flagged.append(sid)
                if self.cfg.include_shortcut_nodes:
                    w.selected[sid] = None
                for d in subtree:
                    w.selected[d] = None
            else:
                rec.selected.append(sid)
                w.selected[sid] = None
                if view.children.get(sid):
                    frontier.append(sid)
        w.frontier = frontier
        w.done = not frontier

    # ------------------------------------------------------------------ output
    def _finish(self, walks: list[_Walk]) -> list[System2Result]:
        caps = ExpandCaps(self.cfg.max_facts_per_entity, self.cfg.max_episodes_per_entity,
                          self.cfg.max_neighbours_per_entity, self.cfg.max_items_per_type)
        ok = [w for w in walks if w.fallback is None and w.selected]
        for w in walks:
            if w.fallback is None and not w.selected:
                w.fallback = "nothing_selected"
        by_group: dict[str, list[_Walk]] = {}
        for w in ok:
            by_group.setdefault(w.question.group_id, []).append(w)
        expanded: dict[int, tuple[list[str], list[str], list[str]]] = {}
        for gid, group_walks in by_group.items():
            ents = [[i for i in w.selected if w.view.nodes[i].layer == 0] for w in group_walks]
            outs = expand_one_hop(self.store, gid, [w.question.question for w in group_walks], ents, caps)
            for w, out in zip(group_walks, outs):
                expanded[id(w)] = out
        results = []
        for w in walks:
            q = w.question
            ctx = RetrievedContext(question_id=q.id, group_id=q.group_id)
            trav = Traversal(question_id=q.id, group_id=q.group_id, rounds=w.rounds, fallback=w.fallback,
                             flags=list(dict.fromkeys(w.flags)), selected_nodes=len(w.selected))
            if w.fallback is not None:
                ctx.flags = [FALLBACK_FLAG, f"s2_{w.fallback}"]
            else:
                facts, episodes, neighbours = expanded[id(w)]
                nodes = list(w.selected) + [n for n in neighbours if n not in w.selected]
                nodes = self._cap_nodes(w, nodes)
                ctx.entities = [
                    Hit(id=i, kind=w.view.nodes[i].kind if i in w.view.nodes else "entity", score=1.0,
                        scores={"s2": 1.0 if i in w.selected else 0.5})
                    for i in nodes
                ]
                ctx.facts = [Hit(id=i, kind="fact", score=0.5, scores={"s2": 0.5}) for i in facts]
                ctx.episodes = [Hit(id=i, kind="episode", score=0.5, scores={"s2": 0.5}) for i in episodes]
                ctx.flags = list(trav.flags)
            trav.counts = {f: len(getattr(ctx, f)) for f in ("entities", "facts", "episodes")}
            results.append(System2Result(context=ctx, traversal=trav))
        return results


    def _cap_nodes(self, w: _Walk, nodes: list[str]) -> list[str]:
        cap = self.cfg.max_items_per_type
        if cap is None or len(nodes) <= cap:
            return nodes
        view = w.view.nodes
        texts = {i: " ".join([view[i].name, *view[i].tags, view[i].summary]) for i in nodes if i in view}
        kinds = {i: view[i].kind for i in nodes if i in view}
        return cap_nodes(w.question.question, nodes, texts, kinds, set(w.selected), cap)


def _map_back(sel_id: str, sel_name: str, cands: list[str], view: HierarchyView) -> str | None:
    """Store id of a selection: prompt-local id first, then exact name, then normalised name."""
    sel_id = (sel_id or "").strip()
    if sel_id.startswith("n") and sel_id[1:].isdigit():
        j = int(sel_id[1:]) - 1
        if 0 <= j < len(cands):
            return cands[j]
    if sel_id in cands:  # a store id (never shown, but harmless)
        return sel_id
    for name in (sel_name, sel_id):
        name = (name or "").strip()
        if not name:
            continue
        exact = [c for c in cands if view.nodes[c].name == name]
        if exact:
            return exact[0]
        norm = normalize_name(name)
        loose = [c for c in cands if normalize_name(view.nodes[c].name) == norm]
        if loose:
            return loose[0]
    return None


def save_traversals(results: Sequence[System2Result], path) -> None:
    """Write one traversal log per line (``traversal.jsonl``)."""
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in results:
            fh.write(r.traversal.model_dump_json() + "\n")


def selection_cost(results: Sequence[System2Result]) -> dict[str, float]:
    """Prompt/completion tokens and calls of selection, in total and per query."""
    n = max(len(results), 1)
    pt = sum(r.traversal.prompt_tokens for r in results)
    ct = sum(rd.completion_tokens for r in results for rd in r.traversal.rounds)
    calls = sum(r.traversal.calls for r in results)
    rounds = max((len(r.traversal.rounds) for r in results), default=0)
    return {"queries": len(results), "prompt_tokens": pt, "completion_tokens": ct, "calls": calls,
            "prompt_tokens_per_query": pt / n, "completion_tokens_per_query": ct / n,
            "calls_per_query": calls / n, "max_rounds": rounds,
            "fallbacks": sum(r.fallback for r in results)}
