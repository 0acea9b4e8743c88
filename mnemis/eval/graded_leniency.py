"""How lenient a graded judge is: its scores for replies whose quality is known, on the run's own questions.

For ``n`` sampled graded questions (seeded) three control replies are scored like answers:

* ``reference``: the question's own reference (BEAM's ideal answer; the reference event order, one item
  per line; LoCoMo-Plus's cue): a good judge scores it high (its sensitivity);
* ``swapped``: the reference of another question of the same category from another conversation: on
  topic in form, wrong in content, so a good judge scores it low;
* ``vague``: a fixed reply that sounds related and commits to nothing: a good judge scores it low.

The mean score per kind and judge is the judge's leniency (``swapped`` and ``vague``) beside its
sensitivity, reported with the scores it gives (``graded_leniency.json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnemis.eval.graded import is_graded, score_graded
from mnemis.eval.leniency import sample_items
from mnemis.eval.run_dir import GRADED_LENIENCY_FILE
from mnemis.settings import GradedSettings, JudgeSettings
from mnemis.types import Question

KINDS = ("reference", "swapped", "vague")
VAGUE = ("We went over this in several of our conversations. It depends on a few of the things you mentioned "
         "back then, and overall it has been coming along steadily.")


def reference_reply(q: Question) -> str:
    if q.meta.get("scorer") == "beam_event_ordering":
        return "\n".join(q.meta["rubric"])
    return q.answer


def control_items(questions: Sequence[Question], n: int | None = 40, seed: int = 0
                  ) -> list[tuple[Question, str, str]]:
    """``(question, kind, reply)`` for each sampled graded question and control kind (a question with no
    other-conversation question of its category gets no ``swapped`` reply)."""
    pool = [q for q in questions if is_graded(q)]
    chosen = sample_items(pool, n, seed)
    out = []
    for q in chosen:
        others = [o for o in pool if o.category == q.category and o.group_id != q.group_id]
        out.append((q, "reference", reference_reply(q)))
        if others:
            out.append((q, "swapped", reference_reply(others[(pool.index(q) + seed) % len(others)])))
        out.append((q, "vague", VAGUE))
    return out


def graded_leniency(judges: Mapping[str, Any], questions: Sequence[Question], *, n: int | None = 40, seed: int = 0,
                    max_tokens: int | str = 200, settings: GradedSettings | None = None) -> dict[str, Any]:
    """``{"n_questions", "seed", "judges": {name: {kind: {"mean", "n", "failures"}}}}``."""
    items = control_items(questions, n, seed)
    result: dict[str, Any] = {"n_questions": len({q.id for q, _, _ in items}), "seed": seed, "judges": {}}
    if not items:
        return result
    scored = score_graded(judges, [q for q, _, _ in items], [r for _, _, r in items], max_tokens=max_tokens,
                          settings=settings)
    for name, rows in scored.items():
        cells = {}
        for kind in KINDS:
            vals = [row["score"] for (_, k, _), row in zip(items, rows) if k == kind]
            ok = [v for v in vals if v is not None]
            cells[kind] = {"mean": sum(ok) / len(ok) if ok else None, "n": len(ok), "failures": len(vals) - len(ok)}
        result["judges"][name] = cells
    return result


def write_graded_leniency(run_dir, judges: Mapping[str, Any], questions: Sequence[Question],
                          judge: JudgeSettings) -> dict[str, Any] | None:
    """``graded_leniency.json`` in ``run_dir`` when the run has graded questions and
    ``judge.graded_leniency.enabled``; returns what it wrote (None when skipped)."""
    from pathlib import Path

    from mnemis.eval.records import dump_json

    controls = judge.graded_leniency
    if not controls.enabled or not any(is_graded(q) for q in questions):
        return None
    res = graded_leniency(judges, questions, n=controls.n, seed=controls.seed, max_tokens=judge.max_tokens,
                          settings=judge.graded)
    dump_json(Path(run_dir) / GRADED_LENIENCY_FILE, res)
    return res
