"""Each local worker claims its own GPUs (joblib launcher): distinct slots, held for the process's life."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from mnemis.scale.gpu_slots import claim_gpus, pin_worker, visible_gpus


def _claim(lock_dir, visible, per_job, start, out):
    start.wait()
    try:
        out.put(tuple(claim_gpus(per_job, visible, lock_dir)))
    except RuntimeError as exc:
        out.put(str(exc))
    start.wait()  # hold the slot until every worker has tried


@pytest.mark.parametrize("per_job,workers,expect", [(1, 4, {("0",), ("1",), ("2",), ("3",)}),
                                                    (2, 2, {("0", "1"), ("2", "3")})])
def test_concurrent_workers_get_distinct_gpus(tmp_path, per_job, workers, expect):
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(tmp_path / "locks", ["0", "1", "2", "3"], per_job, start, out))
             for _ in range(workers)]
    for p in procs:
        p.start()
    got = {out.get(timeout=60) for _ in procs}
    for p in procs:
        p.join(timeout=60)
    assert got == expect


def test_one_worker_too_many_is_refused_and_a_process_keeps_its_slot(tmp_path):
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(tmp_path / "locks", ["4", "5"], 1, start, out)) for _ in range(3)]
    for p in procs:
        p.start()
    got = sorted(map(str, (out.get(timeout=60) for _ in procs)))
    for p in procs:
        p.join(timeout=60)
    assert got[:2] == ["('4',)", "('5',)"]
    assert "no free GPU slot: 2 GPU(s) (4,5) make 2 slot(s) of 1" in got[2] and "hydra.launcher.n_jobs" in got[2]
    env = {"CUDA_VISIBLE_DEVICES": "2,3,6,7"}  # what the node (or SLURM) lets the workers see
    assert pin_worker(2, tmp_path / "mine", env) == ["2", "3"] and env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert pin_worker(2, tmp_path / "mine", env) == ["2", "3"]  # a later job in the same worker: same GPUs
    assert pin_worker(0, tmp_path / "cpu", {"CUDA_VISIBLE_DEVICES": "0"}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
