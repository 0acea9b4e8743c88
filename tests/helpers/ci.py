"""Whether the suite runs in CI (``CI=true``): there a missing data file fails instead of skipping, and the
tests that scale with it (the reply fuzz) run at full size."""

from __future__ import annotations

import os


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
