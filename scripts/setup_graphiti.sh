#!/usr/bin/env bash
# graphiti-core for ingest.builder=graphiti (mode=paper's base graph): the `graphiti` extra (graphiti-core and
# Kuzu, which the peer method also runs), then the release mode=paper pins (ingest.graphiti.version) in its own
# folder, <venv>/graphiti-core-<version>, which the builder puts first on its path. Its other dependencies come
# from the extra. A few MB; idempotent.
# Usage: scripts/setup_graphiti.sh [venv-dir] [version]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
VERSION="${2:-0.24.3}"
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no environment at $VENV: run make setup first" >&2; exit 1; }
"$PY" -m pip install -q -e ".[graphiti]"
DEST="$VENV/graphiti-core-$VERSION"
if [ ! -d "$DEST/graphiti_core-$VERSION.dist-info" ]; then
  "$PY" -m pip install -q --upgrade --no-deps --target "$DEST" "graphiti-core==$VERSION" "diskcache==5.6.3"
fi
echo "graphiti-core $VERSION ready: $DEST"
