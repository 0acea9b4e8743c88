"""How long ``make test`` takes here: runs it once and writes each pass's counts and wall time to a JSON.

``make test`` has two passes (the unit tests on both cores, then the real-model tests one after another); this
records, for each, what pytest printed (passed, skipped, failed, deselected, its own seconds) beside the whole
command's wall time, the machine (cores, load average before and after: a busy machine makes every figure
larger) and the commit. The venv set-up that ``make`` may run first is timed apart when it happens.

    python experiments/bench/suite_time.py [--out experiments/results/suite_time.json] [--log FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "suite_time.json"
SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s")
PASSES = ("unit tests (pytest-xdist, 2 workers)", "real-model tests (one at a time)")


def pytest_summaries(output: str) -> list[dict[str, Any]]:
    """Every pytest summary line of ``output`` (``1068 passed, 19 skipped in 267.62s (0:04:27)``), in order, as
    ``{"passed": 1068, "skipped": 19, "seconds": 267.62}`` (the words pytest printed become the keys)."""
    out = []
    for line in output.splitlines():
        m = SUMMARY.match(line.strip())
        if not m:
            continue
        counts: dict[str, Any] = {}
        for part in m.group(1).split(", "):
            n, word = part.split(" ", 1)
            counts[word] = int(n)
        counts["seconds"] = float(m.group(2))
        out.append(counts)
    return out


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (no machine's folder in a committed JSON)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _git(*args: str) -> str:
    res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return res.stdout.strip()


def measure(log: Path) -> dict[str, Any]:
    """Run ``make test`` once (after ``make setup``, timed apart) and describe the run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    load_before = os.getloadavg()
    t0 = time.monotonic()
    setup = subprocess.run(["make", "setup"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    setup_s = time.monotonic() - t0
    if setup.returncode != 0:
        raise SystemExit(f"make setup failed ({setup.returncode}):\n{setup.stderr[-3000:]}")
    t1 = time.monotonic()
    res = subprocess.run(["make", "test"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    test_s = time.monotonic() - t1
    output = res.stdout + res.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output)
    summaries = pytest_summaries(output)
    passes = {name: s for name, s in zip(PASSES, summaries)}
    return {
        "what": "wall time of `make test` on this machine (both passes), and pytest's own summary of each pass",
        "command": "python experiments/bench/suite_time.py",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "cpus": os.cpu_count(),
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "exit_code": res.returncode,
        "make_setup_s": round(setup_s, 1),
        "make_test_s": round(test_s, 1),
        "make_test_min": round(test_s / 60, 2),
        "passes": passes,
        "log": repo_relative(log),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--log", type=Path, default=REPO / "runs" / "suite_time.log")
    args = ap.parse_args(argv)
    result = measure(args.log)
    if len(result["passes"]) != len(PASSES):
        print(f"expected {len(PASSES)} pytest summaries, found {len(result['passes'])}; see {args.log}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("make_test_min", "exit_code", "passes")}, indent=1))
    print(f"wrote {args.out}")
    return result["exit_code"]


if __name__ == "__main__":
    raise SystemExit(main())
