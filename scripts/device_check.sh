#!/usr/bin/env bash
# The GPU check (issue 24, item 4; R4 3/7 item 5): one prepared run on the device machine that brings its answers
# back within 6 minutes of device time. The default runs, in order of value (each with an H200 estimate; 20 s of
# set-up plus those fit the 360-s deadline): the harness against a plain loop, ResNet-50 AMP fp16 channels_last
# against NVIDIA's recipe (NVML utilisation and energy, scaler syncs, contention, stalls, device time, peak memory
# and W&B from the same run), compile's speed-up, a Llama 3 1B-shape step's tokens/s and MFU, runtime=torchax,
# W&B from the carried files. --more runs the rest in a second call (deadline 540 s): compile with CUDA graphs,
# find_max_batch's OOM, digits, bench.self_check, tf32, DDP at world size 1, BERT's MFU. The rows one GPU cannot
# check are named unverified. scripts/device_check.py says what each row reads and holds it to.
#
# What comes back: $OUT/table.md, rows.jsonl, records.jsonl (each rewritten atomically after every run), log.txt:
# 4 files, none in a folder (the tool returns 8 files, 2 folders down). Records and W&B files stay in a temporary
# folder. A run the deadline reaches is skipped and says so; a skipped row fails the check like a failed one.
# Installs nothing from the network: run scripts/fetch_device_wheels.sh here first and carry .whl/ (38 wheels,
# 28.1 MB, torchax among them).
#   bash scripts/device_check.sh                 # on the GPU machine (deadline 6 minutes)
#   bash scripts/device_check.sh --more          # the rest, in a second call (deadline 9 minutes)
#   bash scripts/device_check.sh --dry-run       # anywhere: the CPU in CUDA's place at tiny sizes, every row judged
#                                                # (the default without a GPU; exit 1 on a failed or skipped row)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
out="${OUT:-${TMPDIR:-/tmp}/xbench-device-check}"
mkdir -p "$out"
# DEVICE_CHECK_WHEELS=0: use the packages this python has (the test suite's dry runs, in its venv)
if [ "${DEVICE_CHECK_WHEELS:-1}" != 0 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  site="${TMPDIR:-/tmp}/xbench-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    >"${TMPDIR:-/tmp}/xbench-wheels.log" 2>&1 \
    || { echo "device_check: could not install the carried wheels in .whl/:" >&2;
         tail -20 "${TMPDIR:-/tmp}/xbench-wheels.log" | tee "$out/log.txt" >&2; exit 2; }
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # Where PYTHONDONTWRITEBYTECODE is set and the packages have no bytecode (the carried wheels never do), every
  # run's process would compile torch, Hydra and W&B from source again (~5 s each on the development machine):
  # let the first one write it.
  unset PYTHONDONTWRITEBYTECODE
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export WANDB_MODE=offline WANDB_SILENT=true PYTHONUNBUFFERED=1
exec "$PY" scripts/device_check.py --out "$out" "$@"
