"""BEAM at scale with the scripted LLM: one conversation of ``--tokens`` tokens end to end, and what a GPU run needs.

The upstream 10M chats (``chats/10M/<n>/chat.json``) are not reachable from this machine, so the conversation
is SYNTHETIC, with the shape of BEAM's: ten ``plan-N`` parts of batches of user/assistant turns, a time anchor
per batch, user messages of ~320 characters and assistant messages of ~3,950 (the means of the 100K chats),
names drawn from a Zipf-weighted vocabulary, 20 probing questions (2 per ability) with rubrics and message ids.
It is written in BEAM's 10M layout and loaded with ``mnemis.data.beam.load_beam``; its size in tokens is
counted with the Qwen2.5 tokenizer (Qwen3's vocabulary) on a sample.

Stages, each in its own process (its peak RSS is that stage's): ``ingest`` (base graph: extraction,
resolution, facts, summaries, embeddings; ``mnemis.testing.responder`` answers every LLM call by rule),
``hierarchy`` (``mnemis.testing.hierarchy_rules`` puts every six nodes of a layer in one category, so every layer
is built), ``system1`` (index build on the first call, then one question per call: p50/p95 over the 20
questions and 180 extra queries), ``system2`` (System-2 selection over all 20 questions, then the full
retrieval: System-1 + System-2 + fusion + rendering). Each records wall time, peak memory and the store size.

The token table: prompt tokens per episode are MEASURED by rendering the real build prompts of the first messages
of a real BEAM 100K conversation (``--real-chat``) and of LoCoMo's conv-26 (``--real-locomo``; both from
``../shared/data``) with the scripted replies and counting them with the Qwen2.5 tokenizer; everything per scale,
per H200 and per SLURM array is an ESTIMATE from those two points and the stated assumptions (``assumptions`` in
the JSON). ``--skip`` reuses stages already run in ``--work`` (their JSON is kept and listed in ``reused``).

    HF_HUB_OFFLINE=1 nice -n 15 .venv/bin/python experiments/bench/beam_scale.py --tokens 10000000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mnemis.testing import gpu_rates  # measured GPU rates once the GPU smoke has run, else the assumed ones

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "experiments" / "results" / "beam_scale.json"
QWEN_TOKENIZER = Path("~/.cache/mnemis/models/qwen2.5-coder-1.5b-instruct").expanduser()
REAL_100K = REPO.parent / "shared" / "data" / "beam" / "100K"
SCALES = {"100K": 20, "500K": 35, "1M": 35, "10M": 10}   # conversations per scale
NOMINAL_TOKENS = {"100K": 128_000, "500K": 500_000, "1M": 1_000_000, "10M": 10_000_000}  # per conversation


def peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``, which a child
    inherits from the process that started it), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tokenizer():
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(QWEN_TOKENIZER))
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, the count falls back to words x 1.3
        print(f"no Qwen tokenizer ({exc}); token counts fall back to words x 1.3", flush=True)
        return None


def count_tokens(tok, texts: list[str]) -> int:
    if tok is None:
        return int(sum(len(t.split()) for t in texts) * 1.3)
    return sum(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"])


def chat_tokens(tok, folder: Path, sample: int = 400, seed: int = 0) -> dict[str, Any]:
    """Characters and (sampled) tokens of every message of a BEAM scale folder or conversation."""
    from mnemis.data.beam import load_beam

    data = load_beam(folder.parent if (folder / "chat.json").exists() else folder, scale="x",
                     conversations=[folder.name] if (folder / "chat.json").exists() else None)
    texts = [e.content for e in data.episodes]
    rng = random.Random(seed)
    pick = rng.sample(texts, min(sample, len(texts)))
    cpt = sum(map(len, pick)) / max(count_tokens(tok, pick), 1)
    chars = sum(map(len, texts))
    return {"messages": len(texts), "chars": chars, "chars_per_token": round(cpt, 3),
            "tokens_estimated": int(chars / cpt), "sampled_messages": len(pick)}


# ---------------------------------------------------------------------------------------------- stages
def _memory(work: Path):
    from mnemis.memory import Memory
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.rerank import CosineReranker
    from mnemis.testing.hierarchy_rules import scripted_hierarchy_llm

    emb = HashingEmbedder(64)
    return Memory.from_models(scripted_hierarchy_llm(None), emb, CosineReranker(embedder=emb),
                              path=work / "memory.sqlite")


def _data(work: Path):
    from mnemis.data.beam import load_beam

    return load_beam(work / "data", scale="10M")


def _store_mb(work: Path) -> float:
    return round(sum(p.stat().st_size for p in work.glob("memory.sqlite*")) / 2**20, 1)


def run_stage(stage: str, work: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    data = _data(work)
    load_s = time.perf_counter() - t0
    out: dict[str, Any] = {"stage": stage, "load_s": round(load_s, 1)}
    with _memory(work) as mem:
        t1 = time.perf_counter()
        if stage == "ingest":
            mem.store_episodes(data.episodes)
            mem.store.upsert_questions(data.questions)
            stats = mem.add_episodes(data.episodes)
            out["build_stats"] = stats.to_dict()
        elif stage == "hierarchy":
            out["hierarchy"] = mem.organize(data.groups)
        elif stage == "system1":
            out.update(_system1(mem, data))
        elif stage == "system2":
            out.update(_system2(mem, data))
        out["wall_s"] = round(time.perf_counter() - t1, 1)
        out["ledger"] = mem.ledger().to_dict()
        out["counts"] = {g: mem.counts(g) for g in data.groups}
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    out["store_mb"] = _store_mb(work)
    return out


def _s1(mem):
    from mnemis.retrieve.system1 import System1

    kw = {k: v for k, v in (mem.plain["retrieval"].get("system1") or {}).items() if k != "enabled"}
    kw["cache_dir"] = None
    return System1(mem.store, mem.models.embedder, **kw)


def _pct(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)

    def q(p: float) -> float:  # nearest-rank percentile
        return s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]

    return {"p50_ms": round(1000 * q(0.5), 2), "p95_ms": round(1000 * q(0.95), 2),
            "mean_ms": round(1000 * sum(s) / len(s), 2), "n": len(s)}


def _system1(mem, data) -> dict[str, Any]:
    from mnemis.types import Question

    s1 = _s1(mem)
    gid = data.groups[0]
    t = time.perf_counter()
    s1.search([data.questions[0]])  # the first call builds the group's indexes (BM25, vectors)
    build = time.perf_counter() - t
    rng = random.Random(1)
    names = [e.name for e in mem.store.entities(gid)]
    extra = [Question(id=f"{gid}:x{i}", group_id=gid, question=f"What did I decide about {rng.choice(names)} and "
                      f"{rng.choice(names)}?", answer="", category="extra") for i in range(180)]
    lat = []
    for q in [*data.questions, *extra]:
        t = time.perf_counter()
        s1.search([q])
        lat.append(time.perf_counter() - t)
    return {"index_build_s": round(build, 2), "system1_per_question": _pct(lat),
            "system1_questions": len(lat)}


def _system2(mem, data) -> dict[str, Any]:
    from mnemis.retrieve.pipeline import run_retrieval
    from mnemis.retrieve.system2 import System2

    cfg = mem._retrieval_cfg("both")
    s2_kw = {k: v for k, v in (cfg.get("system2") or {}).items() if k != "enabled"}
    t = time.perf_counter()
    walks = System2(mem.store, mem.models.selector_llm, s2_kw).select(list(data.questions))
    s2 = time.perf_counter() - t
    t = time.perf_counter()
    res = run_retrieval(mem.store, list(data.questions), cfg, embedder=mem.models.embedder,
                        llm=mem.models.selector_llm, reranker=mem.models.reranker, system1=_s1(mem))
    full = time.perf_counter() - t
    return {"system2_select_s": round(s2, 2), "system2_questions": len(walks),
            "full_retrieval_s": round(full, 2), "rendered_chars_mean": round(
                sum(map(len, res.texts)) / max(len(res.texts), 1))}


def stage_process(stage: str, work: Path) -> dict[str, Any]:
    """Run one stage in a fresh process (its peak RSS is the stage's own)."""
    cmd = [sys.executable, __file__, "--stage", stage, "--work", str(work)]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"stage {stage} failed ({res.returncode}): {res.stderr[-3000:]}")
    return json.loads((work / f"stage_{stage}.json").read_text())


# ------------------------------------------------------------------------------------ real prompts
class _Counting:
    """A scripted backend that tokenizes every prompt it is sent (per stage) with a real tokenizer."""

    def __init__(self, tok) -> None:
        from mnemis.models.llm.scripted import ScriptedBackend
        from mnemis.testing.hierarchy_rules import hierarchy_responder

        self.inner = ScriptedBackend(hierarchy_responder, model_id="scripted-count")
        self.model_id = self.inner.model_id
        self.tok = tok
        self.prompt: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def complete(self, requests):
        texts = ["\n".join(m["content"] for m in r.messages) for r in requests]
        for r, n in zip(requests, [count_tokens(self.tok, [t]) for t in texts]):
            self.prompt[r.stage] = self.prompt.get(r.stage, 0) + n
            self.calls[r.stage] = self.calls.get(r.stage, 0) + 1
        out = self.inner.complete(requests)
        self.inner.batches.clear()
        return out


def real_prompt_tokens(tok, data, group: str, messages: int, work: Path, questions: int = 20) -> dict[str, Any]:
    """Ingestion + hierarchy + System-2 prompts of the first ``messages`` messages of one group of a real dataset
    (the scripted LLM answers), counted with the tokenizer: prompt tokens per episode (build, hierarchy) and per
    question (System-2 selection, the group's first ``questions`` questions)."""
    from mnemis.memory import Memory
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.llm.client import LLM
    from mnemis.models.rerank import CosineReranker
    from mnemis.retrieve.system2 import System2

    eps = data.episodes_of(group)[:messages]
    backend = _Counting(tok)
    llm = LLM(backend, cache_dir=None, cache_mode="off", max_retries=1)
    emb = HashingEmbedder(64)
    db = work / f"real-{group}.sqlite"
    for p in work.glob(f"real-{group}.sqlite*"):
        p.unlink()
    with Memory.from_models(llm, emb, CosineReranker(embedder=emb), path=db) as mem:
        mem.add_episodes(eps)
        build = dict(backend.prompt)
        mem.organize([group])
        hier = {k: v - build.get(k, 0) for k, v in backend.prompt.items() if v - build.get(k, 0)}
        before = dict(backend.prompt)
        qs = [q.model_copy(update={"evidence": []}) for q in data.questions_of(group)[:questions]]
        s2_kw = {k: v for k, v in (mem._retrieval_cfg("both").get("system2") or {}).items() if k != "enabled"}
        System2(mem.store, llm, s2_kw).select(qs)
        sel = {k: v - before.get(k, 0) for k, v in backend.prompt.items() if v - before.get(k, 0)}
    msg_tokens = count_tokens(tok, [e.content for e in eps])
    n = len(eps)
    return {"group": group, "messages": n, "tokens_per_message": round(msg_tokens / n, 1),
            "build_prompt_tokens_per_episode": round(sum(build.values()) / n, 1),
            "build_prompt_tokens_per_episode_by_stage": {k: round(v / n, 1) for k, v in sorted(build.items())},
            "hierarchy_prompt_tokens_per_episode": round(sum(hier.values()) / n, 1),
            "selection_prompt_tokens_per_question": round(sum(sel.values()) / max(len(qs), 1), 1),
            "questions": len(qs)}


def completion_ratio() -> dict[str, Any]:
    """Completion / prompt tokens of the ingestion stages of the 1.5B CPU run (experiments/results/cpu_quality.json)."""
    p = REPO / "experiments" / "results" / "cpu_quality.json"
    stages = json.loads(p.read_text())["modes"]["tuned"]["stages"]
    keys = ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts", "resolve_entities",
            "dedup_facts", "entity_attributes")
    pt = sum(stages[k]["prompt_tokens"] for k in keys if k in stages)
    ct = sum(stages[k]["completion_tokens"] for k in keys if k in stages)
    return {"ratio": round(ct / pt, 3), "from": str(p.relative_to(REPO)) + " modes.tuned.stages (ingestion)",
            "prompt_tokens": pt, "completion_tokens": ct}


def per_episode(points: list[dict[str, Any]], tokens_per_message: float) -> float:
    """Build + hierarchy prompt tokens per episode at ``tokens_per_message``: the line through the measured points
    (short LoCoMo turns, long BEAM messages)."""
    (x0, y0), (x1, y1) = [(p["tokens_per_message"], p["build_prompt_tokens_per_episode"]
                           + p["hierarchy_prompt_tokens_per_episode"]) for p in points]
    return y0 + (y1 - y0) * (tokens_per_message - x0) / (x1 - x0)


def estimates(points: list[dict[str, Any]], real_100k: dict[str, Any], ratio: float, a: dict[str, Any]
              ) -> list[dict[str, Any]]:
    """Per BEAM scale and LongMemEval-M: the LLM tokens of a Mnemis build and System-2 selection, and GPU hours
    on one H200 and on an array of H200s (every figure an ESTIMATE from the measured points and ``a``). BEAM
    100K's messages are counted; the other scales' follow from their nominal tokens per conversation at 100K's
    measured tokens per message."""
    beam = points[1]
    beam_tpm = real_100k["tokens_estimated"] / real_100k["messages"]
    rows = []
    for scale, convs in SCALES.items():
        msgs = real_100k["messages"] if scale == "100K" else convs * NOMINAL_TOKENS[scale] / beam_tpm
        rows.append(_row(f"BEAM {scale}", convs, msgs, convs * 20, per_episode(points, beam_tpm),
                         beam["selection_prompt_tokens_per_question"], ratio, a))
    lme_tpm = a["lme_m_tokens_per_question"] / (a["lme_m_sessions_per_question"] * a["lme_turns_per_session"])
    lme_msgs = 500 * a["lme_m_tokens_per_question"] / lme_tpm
    rows.append(_row("LongMemEval-M", 500, lme_msgs, 500, per_episode(points, lme_tpm),
                     beam["selection_prompt_tokens_per_question"], ratio, a))
    return rows


def _row(name, convs, msgs, questions, per_ep, per_q, ratio, a) -> dict[str, Any]:
    prompt = msgs * per_ep + questions * per_q
    completion = prompt * ratio
    h200_h = (prompt / a["h200_prefill_tokens_per_s"] + completion / a["h200_decode_tokens_per_s"]) / 3600
    n = int(a["array_gpus"])
    return {"dataset": name, "groups": convs, "messages (estimate)": round(msgs),
            "prompt tokens per episode (estimate)": round(per_ep),
            "prompt tokens (estimate)": round(prompt), "completion tokens (estimate)": round(completion),
            "one H200, hours (estimate)": round(h200_h, 1),
            f"array of {n} H200, hours (estimate)": round(h200_h / convs * math.ceil(convs / n), 1)}


_RATES = gpu_rates.llm_rates()
ASSUMPTIONS = {
    "model": "Qwen3-8B (the paper's extraction model), bf16, vLLM with prefix caching off",
    # measured by experiments/bench/gpu_smoke.sh once it has run, else 2 x 8.2e9 FLOP/token at 40% of 790 TFLOP/s
    # and 2,500 decode tokens/s (assumed): mnemis/testing/gpu_rates.py, which says which in "rates_source"
    "h200_prefill_tokens_per_s": _RATES["prefill_tokens_per_s"],
    "h200_decode_tokens_per_s": _RATES["decode_tokens_per_s"],
    "rates_source": _RATES["source"],
    "array_gpus": 8.0,                       # one memory per task: the array cannot use more GPUs than groups
    "lme_m_tokens_per_question": 1_500_000.0,  # LongMemEval's description of the M setting
    "lme_m_sessions_per_question": 500.0,      # the same
    "lme_turns_per_session": 10.0,             # an assumption (user + assistant turns per session)
    "completion": "completion / prompt tokens of the 1.5B CPU run's ingestion (cpu_quality.json); the scripted "
                  "LLM's own replies are minimal and not used",
    "array": "one memory (conversation or question) per task; an array of N GPUs runs ceil(groups / N) rounds",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "beam_scale")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--real-chat", type=Path, default=REAL_100K / "1")
    ap.add_argument("--real-locomo", type=Path, default=REPO.parent / "shared" / "data" / "locomo10.json")
    ap.add_argument("--real-messages", type=int, default=60)
    ap.add_argument("--skip", nargs="*", default=[], help="stages already done in --work (their JSON is reused)")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. how reused stages were run)")
    args = ap.parse_args(argv)
    if args.stage:
        res = run_stage(args.stage, args.work)
        (args.work / f"stage_{args.stage}.json").write_text(json.dumps(res, indent=1, default=str))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer()
    out: dict[str, Any] = {
        "what": "one BEAM-shaped conversation end to end with the scripted LLM (mnemis.testing.responder): ingestion, "
                "hierarchy, System-1, System-2; per stage wall time, peak RSS (each stage its own process) and store "
                "size. The conversation is SYNTHETIC (the upstream 10M chats are not reachable here); see the docstring.",
        "command": "python experiments/bench/beam_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_at_start": list(os.getloadavg())},
        "tokenizer": QWEN_TOKENIZER.name if tok is not None else "words x 1.3 (no tokenizer)",
        "note": args.note,
    }
    real_100k = chat_tokens(tok, args.real_chat.parent)
    out["real_beam_100K"] = {"path": "beam/100K (all 20 chats; tokens from a sampled ratio)", **real_100k}
    if "synth" not in args.skip:
        t = time.perf_counter()
        from mnemis.testing.beam_synth import synthesize

        out["synthetic"] = synthesize(args.work / "data", args.tokens,
                                      lambda texts: sum(map(len, texts)) / max(count_tokens(tok, texts), 1))
        out["synthetic"]["generate_s"] = round(time.perf_counter() - t, 1)
        (args.work / "synthetic.json").write_text(json.dumps(out["synthetic"]))
        for p in args.work.glob("memory.sqlite*"):
            p.unlink()
    else:
        out["synthetic"] = json.loads((args.work / "synthetic.json").read_text())
    out["synthetic"].update(chat_tokens(tok, args.work / "data" / "1"))
    out["stages"] = {}
    out["reused"] = [s for s in args.skip if s in ("synth", "ingest", "hierarchy", "system1", "system2")]
    for stage in ("ingest", "hierarchy", "system1", "system2"):
        res = (json.loads((args.work / f"stage_{stage}.json").read_text()) if stage in args.skip
               else stage_process(stage, args.work))
        out["stages"][stage] = res
        print(stage, {k: res.get(k) for k in ("wall_s", "peak_rss_mb", "store_mb")}, flush=True)
    s1 = out["stages"]["system1"]
    out["summary"] = {
        "messages": out["synthetic"]["messages"], "tokens_estimated": out["synthetic"]["tokens_estimated"],
        **{f"{s}_wall_s": out["stages"][s]["wall_s"] for s in out["stages"]},
        **{f"{s}_peak_rss_mb": out["stages"][s]["peak_rss_mb"] for s in out["stages"]},
        "store_mb": out["stages"]["system2"]["store_mb"], "index_build_s": s1["index_build_s"],
        "system1_p95_ms": s1["system1_per_question"]["p95_ms"],
    }
    from mnemis.data.beam import load_beam
    from mnemis.data.locomo import load_locomo

    beam = load_beam(args.real_chat.parent, scale="100K", conversations=[args.real_chat.name])
    locomo = load_locomo(args.real_locomo)
    points = [real_prompt_tokens(tok, locomo, "conv-26", args.real_messages, args.work),
              real_prompt_tokens(tok, beam, beam.groups[0], args.real_messages, args.work)]
    ratio = completion_ratio()
    out["measured_prompts"] = {"what": "the real prompts of the scripted build of the first messages of one real "
                                       "conversation, tokenized; LoCoMo's short turns and BEAM's long messages are "
                                       "the two points the per-episode cost is interpolated between",
                               "locomo": points[0], "beam": points[1]}
    out["completion_ratio"] = ratio
    out["assumptions"] = ASSUMPTIONS
    out["estimates"] = estimates(points, real_100k, ratio["ratio"], ASSUMPTIONS)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
