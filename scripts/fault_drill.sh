#!/usr/bin/env bash
# Fault drill: every fault xbench must survive, run against the real CLI; prints a table
# (fault, expected status, observed status, record complete). Usage: scripts/fault_drill.sh [--short]
# [--jobs N] [--json FILE] [--keep DIR]. Python: $PYTHON, else ./.venv/bin/python, else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" scripts/fault_drill.py "$@"
