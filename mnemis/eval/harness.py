"""The evaluation stage in two calls, for the main job: ``evaluate_method`` per method, then ``finalize_run``.

Run-dir contract (every file is rewritten from scratch or replaced per method/seed):

- ``questions.jsonl``: one :class:`~mnemis.eval.records.QuestionRecord` per (method, seed, question);
- ``metrics.json``: ``{method: compute_metrics(...)}``; ``leniency.json``: ``judge_leniency(...)``;
- ``ledger.json``: ``Ledger.to_dict()``; ``recall.json`` / ``hierarchy_metrics.json``: written by the
  retrieval / hierarchy stages if they want them in the report; ``roles.json``: the models by role
  (written by the main job, ``mnemis.app.jobs``);
- ``report.md`` + ``accuracy.png`` / ``recall.png`` / ``cost.png``: ``write_report(run_dir)``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.answer import answer_questions
from mnemis.eval.audit import apply_audit, audit_id, audited_labels, default_audit_path
from mnemis.eval.graded import judge_mixed
from mnemis.eval.progress import progress_file
from mnemis.eval.records import QuestionRecord, build_records, dump_json, read_records, write_records
from mnemis.eval.run_dir import LEDGER_FILE, METRICS_FILE, QUESTIONS_FILE
from mnemis.prompts.answer import ANSWER
from mnemis.prompts.base import Prompt
from mnemis.settings import GradedSettings
from mnemis.types import Question, RetrievedContext

log = logging.getLogger(__name__)


def _episode_recall(questions: Sequence[Question], retrieved: Sequence[RetrievedContext | None]
                    ) -> list[dict[str, float | None]]:
    from mnemis.eval.recall import question_scores

    out: list[dict[str, float | None]] = []
    for q, ctx in zip(questions, retrieved):
        if ctx is None or not q.evidence:
            out.append({})
            continue
        s = question_scores([h.id for h in ctx.episodes], q.evidence, ks=(len(ctx.episodes) or 1,))
        out.append({"episodes_recall": next(v for k, v in s.items() if k.startswith("recall@")), "episodes_mrr": s["mrr"]})
    return out


def evaluate_method(
    *,
    method: str,
    questions: Sequence[Question],
    contexts: Sequence[str],
    answer_llm: Any,
    judges: Mapping[str, Any],
    run_dir: str | Path,
    retrieved: Sequence[RetrievedContext | None] | None = None,
    seed: int = 0,
    audit: bool | str | Path = False,
    answer_max_tokens: int = 256,
    judge_max_tokens: int = 200,
    flags: Sequence[Sequence[str]] | None = None,
    answer_prompt: Prompt = ANSWER,
    answer_temperature: float = 0.0,
    graded_settings: GradedSettings | None = None,
    progress_dir: str | Path | None = None,
) -> list[QuestionRecord]:
    """Answer (one batch), judge (one batch per judge), optionally audit, and store the records.

    Args:
        contexts: rendered memory per question (e.g. ``full_context(...).contexts``).
        retrieved: the raw contexts per question (ids go into the records; episode recall is computed
            against the gold — or audited — evidence).
        audit: True (default audit file) or a path: LoCoMo questions get audited labels (only the
            answer-changed ones are re-judged) and audited evidence for recall.
        judges: name -> ``mnemis.eval.judge.Judge`` (model + criterion) or a bare LLM.
        graded_settings: the graded scorers' settings (``judge.graded``; :mod:`mnemis.eval.graded`), for
            questions whose ``meta`` names a scorer (None: :class:`~mnemis.settings.GradedSettings`' defaults).
        answer_prompt / answer_temperature / seed: how the answers are sampled (one of
            ``mnemis.prompts.answer.ANSWER_PROMPTS``; the seed matters only with a temperature above 0).
        progress_dir: where the resumable progress files go (default ``run_dir``; a sharded job's node-local
            state dir, :mod:`mnemis.scale.node_state`).
    Rows of ``questions.jsonl`` with the same (method, seed) are replaced; other rows are kept.
    """
    # progress per method in the run dir (or progress_dir): a rerun there (hydra.run.dir=...) resumes (mnemis.eval.progress)
    answers = answer_questions(answer_llm, questions, contexts, max_tokens=answer_max_tokens, seed=seed,
                               prompt=answer_prompt, temperature=answer_temperature,
                               progress=progress_file(progress_dir or run_dir, "answer", method, seed))
    labels, graded, graded_flags = judge_mixed(  # graded scorers (BEAM, LoCoMo-Plus) where questions ask for one
        judges, questions, answers, max_tokens=judge_max_tokens,
        progress=progress_file(progress_dir or run_dir, "judge", method, seed),
        graded_progress=progress_file(progress_dir or run_dir, "graded", method, seed), settings=graded_settings)
    if any(graded_flags):
        flags = [[*(flags[i] if flags is not None else []), *f] for i, f in enumerate(graded_flags)]
    audited, aud_labels, gold_questions = None, None, list(questions)
    if audit and any(audit_id(q) is not None for q in questions):
        path = default_audit_path() if audit is True else Path(audit)
        if path.exists():
            res = apply_audit(questions, path)
            audited, gold_questions = res.questions, res.questions
            aud_labels = audited_labels(judges, questions, answers, labels, res, max_tokens=judge_max_tokens)
        else:
            log.warning("audit file %s not found; audited scores skipped", path)
    recall = _episode_recall(gold_questions, retrieved) if retrieved is not None else None
    records = build_records(questions, answers, labels, method=method, seed=seed, audited_labels=aud_labels,
                            audited_questions=audited, contexts=retrieved, recall=recall, flags=flags, graded_scores=graded)
    path = Path(run_dir) / QUESTIONS_FILE
    kept = [r for r in read_records(path) if (r.method, r.seed) != (method, seed)] if path.exists() else []
    write_records(path, kept + records)
    return records


def finalize_run(
    run_dir: str | Path,
    *,
    ledger: Any = None,
    leniency_judges: Mapping[str, Any] | None = None,
    leniency_n: int | None = 100,
    leniency_path: str | Path | None = None,
    separate: Sequence[str] = ("adversarial",),
    failed: str = "wrong",
    n_boot: int = 1000,
    seed: int = 0,
    tracker: Any = None,
    headline: str | None = None,
) -> dict[str, Any]:
    """Metrics, optional judge leniency, ledger, report and tracking for a run dir; returns the metrics."""
    from mnemis.eval.leniency import default_stress_path, judge_leniency
    from mnemis.eval.run_dir import LENIENCY_FILE
    from mnemis.eval.metrics import metrics_by_method
    from mnemis.eval.report import write_report

    run = Path(run_dir)
    metrics = metrics_by_method(read_records(run / QUESTIONS_FILE), separate=separate, failed=failed,
                                n_boot=n_boot, seed=seed, headline=headline)
    dump_json(run / METRICS_FILE, metrics)
    if leniency_judges:
        stress = Path(leniency_path) if leniency_path else default_stress_path()
        if stress.exists():
            dump_json(run / LENIENCY_FILE, judge_leniency(leniency_judges, path=stress, n=leniency_n, seed=seed))
        else:
            log.warning("judge stress file %s not found; leniency skipped", stress)
    if ledger is not None:
        ledger.save(run / LEDGER_FILE)
    write_report(run)
    if tracker is not None:
        tracker.log_run_dir(run)
    return metrics
