#!/usr/bin/env bash
# Run one study small, end to end, then draw its report.
#   scripts/study_walkthrough.sh [STUDY] [STORE] [OUT]     (defaults: cpu_vs_gpu, a temp store, report/<study>)
# STUDY is one of conf/experiment/{tpu_vs_gpu,cpu_vs_gpu,gpu_clouds,xla_speedup,pod_scaling}.yaml.
# Runs are not logged to W&B here (LOGGER=wandb to log them, offline without credentials).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${1:-cpu_vs_gpu}
STORE=${2:-$(mktemp -d /tmp/xbench-study-XXXX)/results}
OUT=${3:-report/$STUDY}
PY=${PY:-python}
LOGGER=${LOGGER:-none}
# The baseline each study normalises to, as far as what runs here allows (see docs/report.md).
case "$STUDY" in
  cpu_vs_gpu) BASELINE=(--baseline threads=2) ;;
  xla_speedup) BASELINE=(--baseline runtime=eager) ;;
  *) BASELINE=() ;;
esac

echo "==> 1/2 the sweep: $PY -m xbench -m +experiment=$STUDY store.root=$STORE logger=$LOGGER"
$PY -m xbench -m +experiment="$STUDY" store.root="$STORE" logger="$LOGGER" logger.progress=false
echo "==> 2/2 the report: $PY -m xbench.report $STORE --filter experiment=$STUDY ${BASELINE[*]} --out $OUT"
$PY -m xbench.report "$STORE" --filter experiment="$STUDY" "${BASELINE[@]}" --out "$OUT"
echo "==> open $OUT/report.html"
