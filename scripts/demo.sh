#!/usr/bin/env bash
# One command on a fresh machine: install, convert the bundled Multi30k sample, iterate training batches.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
. .venv/bin/activate
arrowmt demo "$@"
