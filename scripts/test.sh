#!/usr/bin/env bash
# One command on a fresh machine: install everything (all extras, fairseq included) and run lint + tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh "test,hf,fairseq,sentencepiece,notebook,dask,transformers,docs"
. .venv/bin/activate
ruff check .
ruff format --check .
python -m pytest "$@"
