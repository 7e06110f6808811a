#!/usr/bin/env bash
# Create .venv (if missing) and install arrowmt with the extras named in $1 (default: none).
# torch is pinned to the CPU build 2.13.0 here; the package itself accepts a range.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
# PIP_CONSTRAINT reaches the build environments pip makes for sdists (fairseq-fixed compiles against torch),
# so nothing here ever pulls a CUDA torch onto a CPU machine.
export PIP_CONSTRAINT="$PWD/scripts/constraints-cpu.txt"
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
if [ -n "$extras" ]; then
  python -m pip install -q -e ".[$extras]"
else
  python -m pip install -q -e .
fi
# fairseq-fixed pulls in torchaudio, whose PyPI wheels are built for another torch and fail to load next to
# the CPU torch above; transformers imports torchaudio whenever it is installed, and nothing here uses it.
if python -m pip show -q torchaudio 2>/dev/null && ! python -c "import torchaudio" 2>/dev/null; then
  python -m pip uninstall -q -y torchaudio
fi
