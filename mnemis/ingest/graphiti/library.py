"""Which graphiti-core release the Graphiti builder runs (``ingest.graphiti.version``).

The pinned release may live beside the environment's own graphiti-core (the ``peers`` extra installs another
one for the peer method): ``scripts/setup_graphiti.sh <venv>`` installs it into ``<venv>/graphiti-core-<version>``,
which is put first on ``sys.path`` before graphiti-core is imported. A different release already imported, or
none found, is an error naming the setting, never a silent substitute.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from pathlib import Path
from types import ModuleType


class GraphitiUnavailable(RuntimeError):
    """graphiti-core (at the pinned release) cannot be imported."""


def library_dir(version: str | None, library_path: str | None = None) -> Path | None:
    """The folder holding the pinned release: ``library_path`` when given, else ``<sys.prefix>/graphiti-core-<v>``
    when it exists (None: use whatever graphiti-core the environment has)."""
    if library_path:
        path = Path(library_path)
        if not path.is_dir():
            raise GraphitiUnavailable(f"ingest.graphiti.library_path: {path} is not a folder")
        return path
    if version:
        path = Path(sys.prefix) / f"graphiti-core-{version}"
        return path if path.is_dir() else None
    return None


TELEMETRY_ENV = "GRAPHITI_TELEMETRY_ENABLED"  # graphiti-core's own switch for its usage telemetry


def load_graphiti(version: str | None, library_path: str | None = None) -> ModuleType:
    """Import graphiti-core, the pinned ``version`` when set (else any), and return the package. Its telemetry
    (PostHog, on unless the environment says otherwise) is switched off first: a build sends nothing anywhere
    but to the configured model endpoint (the user's own setting wins)."""
    os.environ.setdefault(TELEMETRY_ENV, "false")
    folder = library_dir(version, library_path)
    loaded = sys.modules.get("graphiti_core")
    if folder is not None and loaded is None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
        importlib.invalidate_caches()
    try:
        module = importlib.import_module("graphiti_core")
        importlib.import_module("kuzu")
    except ImportError as exc:
        raise GraphitiUnavailable(f"ingest.builder=graphiti needs graphiti-core and kuzu ({exc}): "
                                  "pip install -e '.[graphiti]' and bash scripts/setup_graphiti.sh <venv>") from exc
    found = installed_version(module)
    if version and found != version:
        raise GraphitiUnavailable(
            f"ingest.graphiti.version pins graphiti-core {version}, but {found} is imported "
            f"({Path(module.__file__ or '?').parent}); install the pinned release with "
            f"`bash scripts/setup_graphiti.sh <venv>` (it goes to <venv>/graphiti-core-{version}), "
            "or set ingest.graphiti.library_path, or ingest.graphiti.version=null to run the installed one")
    return module


def installed_version(module: ModuleType) -> str:
    """The release of the imported graphiti-core (read from the dist-info beside it)."""
    root = Path(module.__file__ or ".").parent.parent
    for dist in importlib.metadata.distributions(path=[str(root)]):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == "graphiti-core":
            return str(dist.version)
    return importlib.metadata.version("graphiti-core")
