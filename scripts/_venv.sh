# Sourced by scripts/demo, scripts/test and scripts/conformance: creates .venv on first use and keeps it in step
# with pyproject.toml (the test, conformance and lightning extras).
# torch is pinned to 2.13.0 so pip takes the CPU build instead of a multi-GB CUDA download.
# LATEST=1 (scripts/test --latest): .venv-latest instead, with the newest torch these machines install and the detection
# stack (torchvision; pycocotools and faster-coco-eval within torchmetrics 1.9.0's requirements/detection*.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
TORCH=("torch==${TORCH_VERSION:-2.13.0}")
if [ "${LATEST:-}" = 1 ]; then
  VENV="$ROOT/.venv-latest"
  TORCH=(torch==2.14.1 torchvision==0.29.1 pycocotools==2.0.8 faster-coco-eval==1.6.8)
fi
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
STAMP="$VENV/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "${TORCH[@]}"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,conformance,lightning]"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
