"""``report.html``: one self-contained page (no server, no CDN) to look inside a run.

- a summary per method (judged accuracy with its CI, token F1, evidence recall);
- per question: the gold and every method's answer with each judge's label and rationale, the rendered
  memory with the evidence turns marked, System-1's ranks, and the System-2 walk as a tree marking
  selected, shortcut (take-all-children) and invented nodes;
- per question, what System-2 brought: the nodes it picked, and the entities, facts and episodes of the final
  context that came from its walk (those System-1 did not find marked, evidence turns marked);
- per group: the hierarchy as a tree from its top layer, each node with its layer, promoted nodes (carried up
  unchanged) marked, and a table of nodes and promoted nodes per layer;
- filters by category, by correct / wrong, and by whether the evidence was reached.

Everything comes from the run directory (``mnemis report`` regenerates the page): ``questions.jsonl``,
``metrics.json``, ``recall.json``, ``contexts.jsonl``, ``system1.jsonl``, ``traversal.jsonl``,
``hierarchy_metrics.json``, the judges' progress files (rationales) and ``explorer_graph.json``, the
names, hierarchy and evidence turns the eval job copies out of the store (:func:`graph_snapshot`). Each
record is checked as it is read (:mod:`mnemis.eval.run_files`); a damaged one is left out and named at the top
of the page, and the rest still renders.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import (
    BUILD_SUMMARY_FILE,
    CONTEXTS_FILE,
    GRAPH_FILE,
    HIERARCHY_METRICS_FILE,
    HTML_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    RECALL_FILE,
    SYSTEM1_FILE,
    TRAVERSAL_FILE,
)
from mnemis.eval.run_files import (
    BuildSummary,
    ContextRow,
    JudgeProgressRow,
    MethodMetrics,
    RunFileError,
    System1Row,
    check,
    hierarchy_file,
    read_json,
    read_jsonl,
    recall_file,
)
from mnemis.paths import safe_name
from mnemis.types import Question


# ------------------------------------------------------------------------------ snapshot (eval job)
def graph_snapshot(store: Any, questions: Sequence[Question]) -> dict[str, Any]:
    """What the page needs from the store: per group the node names, the hierarchy (layers, children) and
    the rendered evidence turns of the questions."""
    from mnemis.render import format_episode

    out: dict[str, Any] = {"groups": {}, "evidence": {}}
    by_group: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_group[q.group_id].append(q)
    for g, qs in by_group.items():
        nodes = {e.id: {"name": e.name, "layer": 0} for e in store.entities(g)}
        cats = store.categories(g)
        nodes.update({c.id: {"name": c.name, "layer": c.layer, **({"promoted": True} if c.promoted else {})}
                      for c in cats})
        children: dict[str, list[str]] = defaultdict(list)
        for e in store.category_edges(g):
            children[e.parent_id].append(e.child_id)
        layers: dict[int, list[str]] = defaultdict(list)
        for c in cats:
            layers[c.layer].append(c.id)
        out["groups"][g] = {"nodes": nodes, "children": dict(children),
                            "layers": {str(k): v for k, v in sorted(layers.items())}}
        ids = sorted({i for q in qs for i in q.evidence})
        episodes = {e.id: e for e in store.episodes(g, ids)} if ids else {}
        for q in qs:
            out["evidence"][q.id] = [{"id": i, "line": format_episode(episodes[i])} for i in q.evidence
                                     if i in episodes]
    return out


def snapshot_from_build(run_dir: str | Path) -> Path | None:
    """Write ``explorer_graph.json`` for a run dir that has none (a run from before the explorer), from the
    store its ``build_summary.json`` names (relative paths: from the current directory, else from the run
    dir's parents; opened read-only); None when the store cannot be found; ``StoreError`` when the file
    there is not a mnemis store (it is left untouched)."""
    from mnemis.store import GraphStore, StoreError

    run = Path(run_dir)
    out = run / GRAPH_FILE
    if out.is_file():
        return out
    summary = _json(run / BUILD_SUMMARY_FILE, {}, [], BuildSummary)
    store_path = summary.get("store")
    if not isinstance(store_path, str) or not store_path:
        return None
    candidates = [Path(store_path)] if Path(store_path).is_absolute() else \
        [Path.cwd() / store_path, *(p / store_path for p in run.resolve().parents)]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        return None
    qids = {r["question_id"] for r in _jsonl(run / QUESTIONS_FILE, _question_record(), [])}
    try:
        store = GraphStore(path, read_only=True)  # a report never writes into the store a run dir names
    except StoreError as exc:
        raise StoreError(f"{run / BUILD_SUMMARY_FILE} names the store {path}: {exc}") from None
    with store:
        questions = [q for g in store.groups() for q in store.questions(g) if q.id in qids]
        snap = graph_snapshot(store, questions)
    out.write_text(json.dumps(snap, indent=1, ensure_ascii=False), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------ reading the run dir
def _json(path: Path, default: Any, problems: list[str], model: Any = None) -> Any:
    """The checked JSON of ``path`` as plain values; ``default`` when missing or damaged (named in ``problems``)."""
    try:
        value = read_json(path, model)
    except RunFileError as exc:
        problems.append(str(exc))
        return default
    if value is None:
        return default
    return value.model_dump(mode="json") if model is not None else value


def _jsonl(path: Path, model: Any, problems: list[str]) -> list[dict[str, Any]]:
    """The valid records of a JSON-lines file as plain values; damaged ones are named in ``problems``."""
    try:
        return [r.model_dump(mode="json") for r in read_jsonl(path, model, problems=problems)]
    except RunFileError as exc:  # the file itself cannot be read
        problems.append(str(exc))
        return []


def _question_record() -> Any:
    from mnemis.eval.records import QuestionRecord

    return QuestionRecord


def _checked(value: Any, where: str, problems: list[str], read: Any) -> Any:
    try:
        return read(value, where)
    except RunFileError as exc:
        problems.append(str(exc))
        return None


def _rationales(run: Path, problems: list[str]) -> dict[tuple[str, str, str], str]:
    """``(method, judge file name, question_id) -> reasoning`` from the judges' progress files,
    ``progress/judge.<method>.<seed>.<judge>.jsonl`` (the judge's name as :func:`mnemis.paths.safe_name` made
    it a file name; it may contain dots)."""
    out: dict[tuple[str, str, str], str] = {}
    for f in sorted((run / "progress").glob("judge.*.jsonl")):
        parts = f.name.removeprefix("judge.").removesuffix(".jsonl").split(".", 2)
        if len(parts) < 3:
            continue
        method, judge = parts[0], parts[2]
        for row in _jsonl(f, JudgeProgressRow, problems):
            if row.get("reasoning"):
                out[(method, judge, row.get("question_id", ""))] = row["reasoning"]
    return out


def _summary(metrics: dict[str, Any], recall: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for method, m in metrics.items():
        if not isinstance(m, dict):
            continue
        judge = m.get("headline_judge") or next(iter(m.get("judges") or {}), None)
        overall = (((m.get("judges") or {}).get(judge) or {}).get("raw") or {}).get("overall") or {}
        route = f"{method}/fused" if f"{method}/fused" in recall else method
        rec = (recall.get(route) or {}).get("overall") or {}
        rows.append({"method": method, "judge": judge, "accuracy": overall.get("accuracy"),
                     "ci": overall.get("ci"), "total": overall.get("total"),
                     "f1": ((m.get("answer_scores") or {}).get("overall") or {}).get("f1"),
                     "recall": rec.get("direct", rec.get("recall"))})
    return rows


def system2_brought(fused: dict[str, Any] | None, system1: dict[str, Any] | None,
                    traversal: dict[str, Any] | None) -> dict[str, Any] | None:
    """What System-2 gave one question: the nodes its walk picked (selected or taken whole), and per item type the
    ids of the final context that came from it (a hit scored ``s2``), with those System-1 did not return."""
    if not traversal:
        return None
    rounds = [r for r in traversal.get("rounds") or [] if isinstance(r, dict)]
    picked = list(dict.fromkeys(i for r in rounds for key in ("selected", "flagged") for i in r.get(key) or []))
    out: dict[str, Any] = {"picked": picked, "fallback": traversal.get("fallback"), "kept": {}, "only_s2": {}}
    for kind in ("entities", "facts", "episodes"):
        hits = [h for h in (fused or {}).get(kind) or [] if isinstance(h, dict)]
        mine = [h.get("id") for h in hits if "s2" in (h.get("scores") or {})]
        s1 = set((system1 or {}).get(kind) or [])
        out["kept"][kind] = mine
        out["only_s2"][kind] = [i for i in mine if i not in s1]
    return out


def explorer_data(run_dir: str | Path) -> dict[str, Any]:
    """The page's data, read from the run directory (any file may be missing)."""
    from mnemis.retrieve.system2_records import Traversal

    run = Path(run_dir)
    problems: list[str] = []
    metrics = _json(run / METRICS_FILE, {}, problems)
    if not isinstance(metrics, dict):
        problems.append(f"{run / METRICS_FILE}: expected a JSON object, got {type(metrics).__name__}")
        metrics = {}
    if "judges" in metrics:  # one method's metrics at the top level
        metrics = {"run": metrics}
    metrics = {m: ok.model_dump(mode="json") for m, v in metrics.items()
               if (ok := _checked(v, f"{run / METRICS_FILE}: method {m!r}", problems,
                                  lambda x, w: check(x, MethodMetrics, w))) is not None}
    recall = _checked(_json(run / RECALL_FILE, {}, problems), str(run / RECALL_FILE), problems, recall_file) or {}
    graph = _json(run / GRAPH_FILE, {}, problems)
    graph = graph if isinstance(graph, dict) else {}
    evidence = graph.get("evidence", {})
    contexts = {r["question_id"]: r for r in _jsonl(run / CONTEXTS_FILE, ContextRow, problems)}
    system1 = {r["question_id"]: r for r in _jsonl(run / SYSTEM1_FILE, System1Row, problems)}
    traversal = {r["question_id"]: r for r in _jsonl(run / TRAVERSAL_FILE, Traversal, problems)}
    why = _rationales(run, problems)
    questions: dict[str, dict[str, Any]] = {}
    methods: list[str] = []
    for r in _jsonl(run / QUESTIONS_FILE, _question_record(), problems):
        qid, method = r["question_id"], r["method"]
        if method not in methods:
            methods.append(method)
        q = questions.setdefault(qid, {
            "id": qid, "group": r.get("group_id"), "category": r.get("category"), "question": r.get("question"),
            "gold": r.get("audited_gold") or r.get("gold"), "evidence": evidence.get(qid, []), "methods": {},
            "context": (contexts.get(qid) or {}).get("text"), "system1": system1.get(qid),
            "traversal": traversal.get(qid),
            "system2": system2_brought(contexts.get(qid), system1.get(qid), traversal.get(qid))})
        ev = {e["id"] for e in q["evidence"]}
        labels = r.get("audited_labels") or r.get("labels") or {}
        q["methods"].setdefault(method, {
            "answer": r.get("answer"), "error": r.get("answer_error"), "labels": labels, "seed": r.get("seed", 0),
            "rationales": {j: why.get((method, safe_name(str(j)), qid), "") for j in labels},
            "reached": (bool(ev & set(r.get("context_ids") or [])) if ev and r.get("context_ids") else None)})
    rows = _checked(_json(run / HIERARCHY_METRICS_FILE, None, problems), str(run / HIERARCHY_METRICS_FILE),
                    problems, lambda v, w: hierarchy_file(v, w) if v is not None else [])
    hier = {str(m.get("group_id", i)): m for i, m in enumerate(rows or [])}
    groups = {g: {**v, "metrics": hier.get(g)} for g, v in (graph.get("groups") or {}).items()}
    for g, m in hier.items():
        groups.setdefault(g, {"nodes": {}, "children": {}, "layers": {}, "metrics": m})
    return {"run": run.name, "methods": methods, "summary": _summary(metrics, recall),
            "questions": list(questions.values()), "groups": groups, "problems": problems}


# ------------------------------------------------------------------------------ the page
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#1d1d1f}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f6}
.ok{color:#137333;font-weight:600}.bad{color:#b3261e;font-weight:600}.na{color:#777}
#filters{display:flex;gap:16px;flex-wrap:wrap;background:#f4f4f6;padding:8px;border-radius:6px;margin:8px 0}
tr.q{cursor:pointer}tr.q:hover{background:#fafafa}tr.detail>td{background:#fcfcfd;padding:12px}
pre{white-space:pre-wrap;font:12px/1.4 ui-monospace,Menlo,monospace;background:#f7f7f9;padding:8px;max-height:360px;overflow:auto}
mark.ev{background:#fff2a8}.tree ul{list-style:none;margin:0;padding-left:18px}
.sel{color:#137333;font-weight:600}.short{color:#8a4b00;font-weight:600}.skip{color:#888}.inv{color:#b3261e}
.badge{display:inline-block;border-radius:4px;padding:0 5px;font-size:11px;margin-left:4px;background:#eee}
details>summary{cursor:pointer}.muted{color:#666}
.badge.prom{background:#e8e0ff}.badge.s2only{background:#dff3e4}table.layers{width:auto;margin:6px 0}
"""

_JS = r"""
const D = JSON.parse(document.getElementById('data').textContent);
const $ = (s, el=document) => el.querySelector(s);
// every value from the run dir reaches the page through esc (numbers too: a tampered file may hold a string)
const esc = s => String(s ?? '').replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
const isNum = x => typeof x === 'number' && isFinite(x);
const pct = x => isNum(x) ? (100 * x).toFixed(1) : '–';
const fix = (x, d) => isNum(x) ? x.toFixed(d) : '–';
const arr = x => Array.isArray(x) ? x : [];
const obj = x => x && typeof x === 'object' && !Array.isArray(x) ? x : {};
const mark = v => v === true ? '<span class="ok">✓</span>' : v === false ? '<span class="bad">✗</span>' : '<span class="na">–</span>';
function nodeName(g, id) { const n = obj(obj(obj(D.groups[g]).nodes)[id]); return n.name ?? id; }
const HEAD = Object.fromEntries(arr(D.summary).map(s => [s.method, s.judge]));
function headLabel(a, method) { const l = obj(obj(a).labels), j = Object.keys(l);
  return HEAD[method] in l ? l[HEAD[method]] : j.length ? l[j[0]] : null; }

function summary() {
  const rows = arr(D.summary).map(s => `<tr><td>${esc(s.method)}</td><td>${pct(s.accuracy)}</td>
    <td>${Array.isArray(s.ci) ? pct(s.ci[0]) + '–' + pct(s.ci[1]) : '–'}</td><td>${esc(s.total ?? '–')}</td>
    <td>${fix(s.f1, 3)}</td><td>${pct(s.recall)}</td><td>${esc(s.judge)}</td></tr>`).join('');
  $('#summary').innerHTML = `<table><tr><th>method</th><th>accuracy %</th><th>95% CI</th><th>questions</th>
    <th>token F1</th><th>evidence recall %</th><th>judge</th></tr>${rows}</table>`;
}

function contextHtml(q) {
  if (!q.context) return '<p class="muted">no rendered memory in this run (mnemis was not evaluated)</p>';
  const ev = new Set(arr(q.evidence).map(e => obj(e).line));
  return '<pre>' + String(q.context).split('\n').map(l => ev.has(l.trim()) ? `<mark class="ev">${esc(l)}</mark>` : esc(l)).join('\n') + '</pre>';
}

function system1Html(q) {
  if (!q.system1) return '<p class="muted">no System-1 ranking recorded</p>';
  const eps = arr(q.system1.episodes), ev = new Set(arr(q.evidence).map(e => obj(e).id));
  const ranks = eps.map((id, i) => [id, i + 1]).filter(([id]) => ev.has(id));
  const list = arr(q.evidence).map(e => { const r = eps.indexOf(obj(e).id);
    return `<li>${esc(obj(e).id)}: ${r < 0 ? 'not ranked' : 'rank ' + (r + 1) + ' of ' + eps.length}</li>`; }).join('');
  return `<ul>${list || '<li class="muted">no evidence turns</li>'}</ul><p class="muted">top episodes: ${
    eps.slice(0, 5).map(esc).join(', ')}; ${ranks.length} of ${ev.size} evidence turns ranked</p>`;
}

function treeHtml(q) {
  const t = q.traversal;
  if (!t) return '<p class="muted">no System-2 traversal recorded</p>';
  const rounds = arr(t.rounds).map(obj);
  if (!rounds.length) return `<p class="muted">no rounds${t.fallback ? ' (fell back: ' + esc(t.fallback) + ')' : ''}</p>`;
  const kids = obj(obj(D.groups[q.group]).children);
  const roundOf = {}; rounds.forEach((r, i) => arr(r.candidates).forEach(c => { if (!(c in roundOf)) roundOf[c] = i; }));
  const seen = new Set();
  function node(id, ri) {
    const r = rounds[ri]; if (!r || seen.has(id)) return ''; seen.add(id);
    const sel = arr(r.selected).includes(id), short = arr(r.flagged).includes(id);
    const cls = short ? 'short' : sel ? 'sel' : 'skip';
    const tag = short ? '<span class="badge">shortcut: all children</span>' : sel ? '<span class="badge">selected</span>' : '';
    const next = arr(kids[id]).filter(c => roundOf[c] === ri + 1);
    const prom = nodeInfo(q.group, id).promoted ? ' <span class="badge prom">promoted</span>' : '';
    const label = `<span class="${cls}">${esc(nodeName(q.group, id))}</span>${tag}${prom}`;
    if (!next.length) return `<li class="leaf">${label}</li>`;
    return `<li><details class="node"><summary>${label} <span class="muted">(${next.length})</span></summary><ul>${
      next.map(c => node(c, ri + 1)).join('')}</ul></details></li>`;
  }
  const roots = arr(rounds[0].candidates).map(c => node(c, 0)).join('');
  const orphans = rounds.slice(1).flatMap((r, i) => arr(r.candidates).filter(c => !seen.has(c)).map(c => node(c, i + 1))).join('');
  const inv = rounds.reduce((a, r) => a + (isNum(r.invented) ? r.invented : 0), 0);
  return `<div class="tree"><ul>${roots}${orphans}</ul></div><p class="muted">${rounds.length} rounds, ${
    esc(t.selected_nodes ?? '?')} nodes selected${inv ? `, <span class="inv">${esc(inv)} invented id(s) dropped</span>` : ''}${
    t.fallback ? ', fell back: ' + esc(t.fallback) : ''}</p>`;
}

function nodeInfo(g, id) { return obj(obj(obj(D.groups[g]).nodes)[id]); }
function nodeLabel(g, id) { const n = nodeInfo(g, id);
  return `${esc(n.name ?? id)}${isNum(n.layer) ? ` <span class="badge">L${esc(n.layer)}</span>` : ''}${
    n.promoted ? ' <span class="badge prom">promoted</span>' : ''}`; }

function broughtHtml(q) {
  const b = obj(q.system2);
  if (!q.system2) return '<p class="muted">no System-2 walk recorded</p>';
  if (b.fallback) return `<p class="bad">System-2 fell back (${esc(b.fallback)}): the context is System-1's alone</p>`;
  const picked = arr(b.picked), kept = obj(b.kept), only = obj(b.only_s2), ev = new Set(arr(q.evidence).map(e => obj(e).id));
  const item = (kind, id) => `<li>${kind === 'entities' ? nodeLabel(q.group, id) : esc(id)}${
    arr(only[kind]).includes(id) ? ' <span class="badge s2only">only System-2</span>' : ''}${
    ev.has(id) ? ' <mark class="ev">evidence</mark>' : ''}</li>`;
  const kinds = ['entities', 'facts', 'episodes'].map(k => `<div class="brought ${k}"><b>${k}</b>: ${
    arr(kept[k]).length} kept, ${arr(only[k]).length} only from System-2<ul>${arr(kept[k]).map(i => item(k, i)).join('')}</ul></div>`).join('');
  return `<div class="picked"><b>picked</b> (${picked.length}): ${picked.map(i => nodeLabel(q.group, i)).join(', ') ||
    '<span class="muted">nothing</span>'}</div>${kinds}`;
}

function detailHtml(q) {
  const answers = D.methods.filter(m => q.methods[m]).map(m => { const a = obj(q.methods[m]);
    const labels = obj(a.labels), why = obj(a.rationales);
    const judges = Object.keys(labels).map(j => `<div>${mark(labels[j])} <b>${esc(j)}</b>: ${
      esc(why[j] || '(no rationale recorded)')}</div>`).join('');
    return `<tr><td>${esc(m)}</td><td>${esc(a.answer)}${a.error ? ' <span class="bad">' + esc(a.error) + '</span>' : ''}</td>
      <td>${judges}</td><td>${a.reached == null ? '–' : a.reached ? 'yes' : 'no'}</td></tr>`; }).join('');
  return `<p><b>gold:</b> ${esc(q.gold)}</p><table><tr><th>method</th><th>answer</th><th>judges</th><th>evidence reached</th></tr>${answers}</table>
    <h3>Evidence turns</h3><ul>${arr(q.evidence).map(e => '<li>' + esc(obj(e).line) + '</li>').join('') || '<li class="muted">none recorded</li>'}</ul>
    <h3>Rendered memory (mnemis; evidence turns marked)</h3>${contextHtml(q)}
    <h3>System-1 ranks of the evidence</h3>${system1Html(q)}
    <h3>System-2 traversal</h3>${treeHtml(q)}
    <h3>What System-2 brought into the context</h3>${broughtHtml(q)}`;
}

function questions() {
  const cats = [...new Set(D.questions.map(q => q.category))].sort();
  $('#f-cat').innerHTML = '<option value="">all</option>' + cats.map(c => `<option>${esc(c)}</option>`).join('');
  $('#f-method').innerHTML = D.methods.map(m => `<option>${esc(m)}</option>`).join('');
  const head = '<tr><th>question</th><th>category</th>' + D.methods.map(m => `<th>${esc(m)}</th>`).join('') + '</tr>';
  const body = D.questions.map((q, i) => `<tr class="q" data-i="${i}"><td>${esc(q.question)}</td><td>${esc(q.category)}</td>${
    D.methods.map(m => `<td>${q.methods[m] ? mark(headLabel(q.methods[m], m)) : '–'}</td>`).join('')}</tr>
    <tr class="detail" data-i="${i}" hidden><td colspan="${2 + D.methods.length}"></td></tr>`).join('');
  $('#questions').innerHTML = `<table>${head}${body}</table>`;
  document.querySelectorAll('tr.q').forEach(tr => tr.addEventListener('click', () => {
    const d = tr.nextElementSibling, q = D.questions[+tr.dataset.i];
    if (!d.firstElementChild.innerHTML) d.firstElementChild.innerHTML = detailHtml(q);
    d.hidden = !d.hidden;
  }));
  ['#f-cat', '#f-method', '#f-correct', '#f-reached'].forEach(s => $(s).addEventListener('change', filter));
  filter();
}

function filter() {
  const cat = $('#f-cat').value, m = $('#f-method').value, ok = $('#f-correct').value, re = $('#f-reached').value;
  let shown = 0;
  document.querySelectorAll('tr.q').forEach(tr => {
    const q = D.questions[+tr.dataset.i], a = q.methods[m] || {};
    const lab = headLabel(a, m);
    const keep = (!cat || q.category === cat) && (!ok || (ok === 'correct' ? lab === true : lab === false))
      && (!re || (re === 'yes' ? a.reached === true : a.reached === false));
    tr.hidden = !keep; if (!keep) tr.nextElementSibling.hidden = true; shown += keep;
  });
  $('#shown').textContent = `${shown} of ${D.questions.length} questions`;
}

function hierarchy() {
  const parts = Object.entries(obj(D.groups)).map(([g, v]) => { v = obj(v);
    const m = obj(v.metrics), layers = Object.keys(obj(v.layers)).map(Number).sort((a, b) => b - a);
    const kids = obj(v.children);
    const li = id => { const c = arr(kids[id]);
      return c.length ? `<li><details class="cat"><summary>${nodeLabel(g, id)} <span class="muted">(${c.length})</span></summary><ul>${
        c.map(li).join('')}</ul></details></li>` : `<li>${nodeLabel(g, id)}</li>`; };
    const top = layers.length ? arr(v.layers[String(layers[0])]) : [];
    const nodes = obj(v.nodes);
    const table = layers.map(l => { const ids = arr(v.layers[String(l)]);
      const prom = ids.filter(i => obj(nodes[i]).promoted).length;
      return `<tr><td>${esc(l)}</td><td>${ids.length}</td><td>${prom}</td></tr>`; }).join('');
    return `<details class="group"><summary><b>${esc(g)}</b>: ${esc(m.entities ?? '?')} entities, ${esc(m.layers ?? layers.length)} layers, nodes per layer ${
      esc(JSON.stringify(m.nodes_per_layer || []))}, coverage ${pct(m.coverage)}%, promoted ${esc(m.promoted ?? '?')}</summary>${
      table ? '<table class="layers"><tr><th>layer</th><th>nodes</th><th>promoted</th></tr>' + table + '</table>' : ''}${
      top.length ? '<div class="tree"><ul>' + top.map(li).join('') + '</ul></div>' : '<p class="muted">no categories recorded</p>'}</details>`;
  });
  $('#hierarchy').innerHTML = parts.join('') || '<p class="muted">no hierarchy in this run</p>';
}

summary(); questions(); hierarchy();
"""


# inside <script>: "<" and ">" could open a tag or a comment ("<!--<script>" makes the parser swallow the
# page's own script), "&" an entity; U+2028/U+2029 end a line in older JavaScript. Escaped (\u003c) they are
# the same JSON.
_JSON_UNSAFE = re.compile("[<>&\u2028\u2029]")


def render_html(data: dict[str, Any]) -> str:
    """The page for ``data`` (:func:`explorer_data`): data, style and script inline."""
    payload = json.dumps(data, ensure_ascii=False, default=str)
    payload = _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", payload)
    title = html.escape(f"Mnemis run: {data.get('run', '')}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>
<body><h1>{title}</h1>
{_problems_html(data.get("problems") or [])}<h2>Summary</h2><div id="summary"></div>
<h2>Questions</h2>
<div id="filters">
 <label>category <select id="f-cat"></select></label>
 <label>method <select id="f-method"></select></label>
 <label>judged <select id="f-correct"><option value="">all</option><option value="correct">correct</option>
   <option value="wrong">wrong</option></select></label>
 <label>evidence reached <select id="f-reached"><option value="">all</option><option value="yes">yes</option>
   <option value="no">no</option></select></label>
 <span id="shown" class="muted"></span>
</div>
<p class="muted">Click a question for its answers, judges' rationales, rendered memory, System-1 ranks, System-2 walk and what the walk brought.
Marks: <span class="ok">✓</span> correct, <span class="bad">✗</span> wrong (the headline judge; the audited label where the audit changed the gold).</p>
<div id="questions"></div>
<h2>Hierarchy per group</h2><div id="hierarchy"></div>
<script type="application/json" id="data">{payload}</script>
<script>{_JS}</script>
</body></html>
"""


def _problems_html(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    return (f'<h2 class="bad">Damaged records, left out of this page ({len(problems)})</h2>'
            f'<ul id="problems">{items}</ul>\n')


def write_html(run_dir: str | Path) -> Path:
    """Write ``report.html`` into ``run_dir`` from its files; returns its path."""
    run = Path(run_dir)
    out = run / HTML_FILE
    out.write_text(render_html(explorer_data(run)), encoding="utf-8")
    return out
