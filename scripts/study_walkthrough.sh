#!/usr/bin/env bash
# Run the studies small, end to end, then draw each one's report: the commands come from
# xbench/studies/studies.yaml (python -m xbench.studies prints them all), so this script cannot drift from them.
#   scripts/study_walkthrough.sh [STUDY ...]      (default: the five studies)
# Cost, measured 2026-12-01 on a 2-core VM shared with other work (/usr/bin/time -v, user + sys CPU seconds, one
# invocation per study, small commands + report + check): tpu_vs_gpu 109 s, cpu_vs_gpu 219 s, gpu_clouds 61 s,
# xla_speedup 140 s, pod_scaling 57 s = 586 s, 9 min 46 s of CPU (28.5 min wall under that load; less when quiet).
#   STORE=/tmp/mystore OUT=report PY=.venv/bin/python LOGGER=wandb scripts/study_walkthrough.sh cpu_vs_gpu
# Runs are not logged to W&B here (LOGGER=wandb to log them, offline without credentials).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
STORE=${STORE:-$(mktemp -d /tmp/xbench-studies-XXXX)/results}
OUT=${OUT:-report}
LOGGER=${LOGGER:-none}
if [ "$#" -eq 0 ]; then set -- tpu_vs_gpu cpu_vs_gpu gpu_clouds xla_speedup pod_scaling; fi

for STUDY in "$@"; do
  mapfile -t SMALLS < <($PY -m xbench.studies --print small "$STUDY")  # the small command, then its `also`
  # shell words as the manifest quotes them (a baseline query joins keys with '&')
  mapfile -t REPORT < <($PY -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' \
                          "$($PY -m xbench.studies --print report "$STUDY")")
  DRAW=("$PY")
  for w in "${REPORT[@]:1}"; do  # the report reads this store and writes under $OUT
    case "$w" in results) DRAW+=("$STORE") ;; report/*) DRAW+=("$OUT/${w#report/}") ;; *) DRAW+=("$w") ;; esac
  done
  for SMALL_LINE in "${SMALLS[@]}"; do
    mapfile -t SMALL < <($PY -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$SMALL_LINE")
    RUN=("$PY" "${SMALL[@]:1}" "store.root=$STORE" "logger=$LOGGER" "logger.progress=false")
    echo "==> $STUDY 1/2 the sweep: ${RUN[*]}"
    "${RUN[@]}"
  done
  echo "==> $STUDY 2/2 the report: ${DRAW[*]}"
  "${DRAW[@]}" --no-progress
  $PY -m xbench.studies --check-report "${DRAW[-1]}" "$STUDY"  # every figure kind the study promises
  echo "==> open ${DRAW[-1]}/report.html"
done
