#!/usr/bin/env bash
# Create .venv-peers (gitignored, separate from .venv) for benchmarks/bench_s3.py: the CPU torch 2.13.0, the
# peers Mosaic streaming 0.13.0 and litdata 0.2.76, moto's S3 server, and arrowmt itself (editable).
# torch is installed first and then held by a constraint, so that no peer's requirement pulls another torch
# (an unpinned one brings gigabytes of CUDA libraries). The main .venv is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-peers/bin/python ]; then
  python3 -m venv .venv-peers
fi
py=.venv-peers/bin/python
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q "torch==2.13.0"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" >"$constraints"
"$py" -m pip install -q -c "$constraints" "mosaicml-streaming==0.13.0" "litdata==0.2.76" "moto[server]"
"$py" -m pip install -q -c "$constraints" -e .
# import streaming needs bench_s3's allow_cpu_torchvision() first: PyPI's torchvision is a CUDA build whose ops
# library does not load next to the CPU torch (see its docstring).
"$py" - <<'PY'
import importlib.metadata as md
import sys

sys.path.insert(0, "benchmarks")
from bench_s3 import allow_cpu_torchvision

allow_cpu_torchvision()
import litdata  # noqa: E402,F401
import moto.server  # noqa: E402,F401
import streaming  # noqa: E402,F401
import torch  # noqa: E402

import arrowmt  # noqa: E402,F401

names = ("mosaicml-streaming", "litdata", "moto", "pyarrow")
print("torch", torch.__version__, "|", *(f"{p} {md.version(p)}" for p in names))
PY
