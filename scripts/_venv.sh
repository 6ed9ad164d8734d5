# Sourced by scripts/demo, scripts/test and scripts/conformance: creates .venv on first use and keeps it in step
# with pyproject.toml (the test, conformance and lightning extras).
# torch is pinned to 2.13.0 so pip takes the CPU build instead of a multi-GB CUDA download.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
STAMP="$VENV/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,conformance,lightning]"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
