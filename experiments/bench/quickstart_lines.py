"""Count what a fresh ``make run`` prints before the report path (progress lines apart).

Runs ``mnemis run experiment=quickstart`` from a fresh clone of this checkout with the Makefile's environment,
a fresh response cache and artifacts dir, and an empty data dir (so the LoCoMo fetch on first use is included;
``--mirror`` names where it is fetched from, e.g. a folder holding the pinned files)::

    python experiments/bench/quickstart_lines.py --mirror <folder or URL> --out experiments/results/quickstart_lines.json

The JSON holds the counts, the wall time, the exit status and the lines themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"\d[\d,]*/[\d,]+ \(\d+%\) [\d.]+/s ETA ")
BUDGET = 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=None, help="MNEMIS_DATA_MIRROR for the data fetch (default: upstream)")
    ap.add_argument("--out", default="experiments/results/quickstart_lines.json")
    ap.add_argument("overrides", nargs="*", help="extra overrides, e.g. llm.backend.gpu_memory_utilization=0.08 "
                    "on a machine short of free memory (they change no log line)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemis-quickstart-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_ERROR_REPORTING": "false",
               "PYTHONPATH": str(clone), "MNEMIS_DATA_DIR": str(Path(tmp) / "data")}
        env.pop("WANDB_MODE", None)
        if args.mirror:
            env["MNEMIS_DATA_MIRROR"] = args.mirror
        t0 = time.time()
        res = subprocess.run([sys.executable, "-m", "mnemis.app.cli", "run", "experiment=quickstart",
                              f"paths.cache_dir={tmp}/cache", *args.overrides], cwd=clone, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        wall = time.time() - t0
    lines = res.stdout.splitlines()  # stdout and stderr merged, in order
    report_at = next((i for i, line in enumerate(lines) if line.startswith("report: ")), None)
    before = lines[:report_at] if report_at is not None else lines
    progress = [line for line in before if PROGRESS.search(line)]
    result = {
        "command": "mnemis run experiment=quickstart (fresh clone, fresh cache, data fetched on first use)",
        "returncode": res.returncode, "wall_s": round(wall, 1), "report_printed": report_at is not None,
        "lines_before_report": len(before), "progress_lines": len(progress),
        "lines_before_report_without_progress": len(before) - len(progress), "budget": BUDGET,
        "within_budget": len(before) - len(progress) <= BUDGET, "load_average": os.getloadavg(),
        "mirror": args.mirror, "overrides": args.overrides, "lines": before,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "lines"}, indent=1))


if __name__ == "__main__":
    main()
