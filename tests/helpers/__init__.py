"""Code shared by the tests (no test functions here): record builders, scripted responders and fakes, the
suite's run order, and the worker scripts that tests start as subprocesses (``HELPERS / "<name>.py"``)."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
