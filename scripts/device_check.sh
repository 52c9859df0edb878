#!/usr/bin/env bash
# The GPU check (issue 24, item 4): one prepared run on the device machine that brings its answers back.
# Rows for fp16 with a scaler (NVIDIA's ResNet-50 AMP NHWC recipe, like for like with its ~3,000 img/s
# per H200) and its sync count, compile with CUDA graphs and 0 recompiles, contention and stalls, NVML
# utilisation and energy, device time against CUDA-event step time, peak memory, real data (digits),
# find_max_batch's OOM and the memory freed after it, bench.self_check, W&B from the carried files,
# tf32, DDP at world size 1, BERT's MFU and the harness overhead; the rows one GPU cannot check are named
# unverified. scripts/device_check.py says what each row reads and holds it to.
#
# What comes back: $OUT/table.md (rewritten after every run), rows.jsonl, records.jsonl, log.txt: 4
# files, none in a folder (the tool returns 8 files, 2 folders down). Records and W&B files stay in a
# temporary folder. An overall deadline (--deadline-s, default 360 s: the answer in one run within 6 minutes of
# device time) skips what is left and says so; on the GPU a skipped row fails the check like a failed one. Rows in
# order of value: the harness against a plain loop, ResNet-50 AMP against NVIDIA's recipe, compile's speed-up, a
# Llama 3 step's tokens/s and MFU, runtime=torchax on the GPU, NVML utilisation and energy, then the rest.
# Installs nothing from the network: run scripts/fetch_device_wheels.sh here first and carry .whl/.
#   bash scripts/device_check.sh                 # on the GPU machine (deadline 8 minutes)
#   bash scripts/device_check.sh --dry-run       # anywhere: tiny sizes on the CPU (the default without a GPU)
# Dry run measured on the development machine (2 CPU cores shared, load ~3), every run: 153-217 s wall,
# 4 files under $OUT (~70 KB).
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
