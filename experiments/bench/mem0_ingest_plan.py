"""The Mem0 ingestion plan on LoCoMo without any model: message pairs, summary refreshes, requests.

Measures what the Mem0 schedule does to the real conversations (no LLM call, seconds on a CPU)::

    python experiments/bench/mem0_ingest_plan.py --out experiments/results/mem0_ingest_plan.json

- pairs cut over the whole conversation (the former schedule) vs inside each session (the Mem0
  evaluation's), and how many sessions start in the middle of a pair under each;
- summary refreshes with ``m`` / ``summary_every`` under the former rule (every ``summary_every``
  messages) and the current one (also whenever the ``m``-message window would not reach the summary),
  and the most messages a pair's prompt saw in neither the summary nor the window;
- extraction requests with one memory store per conversation vs one per speaker.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mnemis.baselines.mem0.extract import Pair, make_pairs, sorted_messages, summary_due
from mnemis.baselines.mem0.pipeline import group_messages, mines, store_layout


def whole_conversation_pairs(msgs: list[Any], size: int) -> list[Pair]:
    """The former cut: consecutive pairs over the whole conversation, across session boundaries."""
    return [Pair(msgs[0].group_id, i, msgs[i:i + size]) for i in range(0, len(msgs), size)]


def mid_pair_sessions(pairs: list[Pair], msgs: list[Any]) -> int:
    starts = {p.start for p in pairs}
    first = {}
    for i, m in enumerate(msgs):
        first.setdefault(m.session, i)
    return sum(1 for i in first.values() if i not in starts)


def summary_schedule(pairs: list[Pair], m: int, every: int, window_rule: bool) -> tuple[int, int]:
    """(refreshes, most messages seen by neither the summary nor the window) for one conversation."""
    covered, refreshes, gap = 0, 0, 0
    for p in pairs:
        due = summary_due(covered, p, every, m) if window_rule else (every > 0 and p.start - covered >= every)
        if due:
            covered, refreshes = p.start, refreshes + 1
        gap = max(gap, max(0, p.start - m) - covered)
    return refreshes, gap


def plan(path: str | None, m: int, every: int, size: int) -> dict[str, Any]:
    from mnemis.data.locomo import load_locomo

    ds = load_locomo(path)
    msgs = {g: sorted_messages(v) for g, v in group_messages(ds.episodes).items()}
    out: dict[str, Any] = {"m": m, "summary_every": every, "pair_size": size, "conversations": len(msgs),
                           "messages": sum(map(len, msgs.values())),
                           "sessions": sum(len({e.session for e in v}) for v in msgs.values())}
    old = {g: whole_conversation_pairs(v, size) for g, v in msgs.items()}
    new = {g: make_pairs(v, size) for g, v in msgs.items()}
    for name, pairs in (("whole_conversation", old), ("per_session", new)):
        refresh_old = [summary_schedule(pairs[g], m, every, False) for g in msgs]
        refresh_new = [summary_schedule(pairs[g], m, every, True) for g in msgs]
        out[name] = {
            "pairs": sum(map(len, pairs.values())),
            "sessions_starting_mid_pair": sum(mid_pair_sessions(pairs[g], msgs[g]) for g in msgs),
            "summary_refreshes_every_rule": sum(r for r, _ in refresh_old),
            "max_unseen_messages_every_rule": max(gap for _, gap in refresh_old),
            "summary_refreshes_window_rule": sum(r for r, _ in refresh_new),
            "max_unseen_messages_window_rule": max(gap for _, gap in refresh_new),
        }
    for per_speaker in (False, True):
        layout = store_layout(msgs, per_speaker)
        key = "per_speaker" if per_speaker else "per_conversation"
        out[key] = {"stores": sum(map(len, layout.values())),
                    "extraction_requests": sum(1 for g in msgs for p in new[g] for r in layout[g] if mines(r, p))}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", default=None, help="locomo10.json (default: the shared data folder)")
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--summary-every", type=int, default=20)
    ap.add_argument("--pair-size", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    result = plan(args.locomo, args.m, args.summary_every, args.pair_size)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
