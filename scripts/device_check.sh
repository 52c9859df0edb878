#!/usr/bin/env bash
# The GPU check (issue [7/8]): ResNet-50 training on synthetic ImageNet for fp32/tf32 eager, amp_bf16,
# amp_bf16 + channels_last, + torch.compile; DDP at world size 1 against single; a bert_base step with
# bf16 and its MFU; CV over repeats. Prints a table last. Installs nothing from the network: run
# scripts/fetch_device_wheels.sh here first and carry .whl/ (hydra-core, omegaconf, antlr4, wandb).
# Without a GPU it runs its dry-run mode on the CPU (tiny sizes); the test suite runs that.
#   bash scripts/device_check.sh            # on the GPU machine (under 8 minutes on one H200)
#   bash scripts/device_check.sh --dry-run  # anywhere
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  site="${TMPDIR:-/tmp}/xbench-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || { echo "device_check: could not install the carried wheels in .whl/" >&2; exit 2; }
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export WANDB_MODE=offline WANDB_SILENT=true PYTHONUNBUFFERED=1
out="${OUT:-${TMPDIR:-/tmp}/xbench-device-check}"
mkdir -p "$out"
exec "$PY" scripts/device_check.py --out "$out" "$@"
