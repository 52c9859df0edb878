#!/usr/bin/env bash
# Download, here (where PyPI is reachable), the wheels that scripts/device_check.sh needs on a GPU
# machine that has PyTorch but no network: hydra-core, omegaconf, antlr4, mlperf-logging, and wandb with
# every dependency pip resolves for it. They land in .whl/ (git-ignored); carry it with the run (~28 MB of the 64 MiB).
#
# Nothing is dropped because "the image has it": the image lacks platformdirs, pydantic, annotated-types,
# typing-inspection, opentelemetry and cwevals, which wandb imports (seen: `import wandb` and an offline
# run in a clean target dir, python -S, PYTHONPATH=that dir only, loaded from it: annotated_types antlr4
# certifi charset_normalizer click google hydra idna omegaconf opentelemetry packaging platformdirs pydantic
# pydantic_core requests typing_extensions typing_inspection urllib3 wandb xxhash yaml), and a version
# the image has may not be the one wandb needs. The set pip resolves is consistent; carrying it whole is.
#   bash scripts/fetch_device_wheels.sh [PYTHON_VERSION]          # default 3.12 (the H200 image's python3)
#   bash scripts/fetch_device_wheels.sh --check [PYTHON_VERSION]  # then import them all in a clean target
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
pyver="${1:-3.12}"
pins=(wandb==0.31.0)
# Without their dependencies: hydra's antlr4 is built below; mlperf-logging (xbench's MLPerf log) needs
# numpy, pandas, scipy and pyyaml, which the image has and torch was built against: never shadow them.
# torchax (the device check's runtime=torchax row: the image has JAX with CUDA but no torchax): a pure wheel, 118 KB.
nodeps=(hydra-core==1.3.2 omegaconf==2.3.0 mlperf-logging==4.1.68 torchax==0.0.14.dev20261026)

fetch() {  # fetch DIR [pip download's target flags...]: the whole set into DIR
  local dir="$1"; shift
  python3 -m pip download -q --only-binary=:all: "$@" -d "$dir" "${pins[@]}"
  python3 -m pip download -q --no-deps --only-binary=:all: "$@" -d "$dir" "${nodeps[@]}"
  # antlr4's runtime 4.9.3 (what omegaconf 2.3 needs) is published as an sdist only: build its pure wheel.
  python3 -m pip wheel -q --no-deps -w "$dir" antlr4-python3-runtime==4.9.3
  rm -f "$dir"/antlr4*.tar.gz
}

rm -rf .whl && mkdir -p .whl
fetch .whl --python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform any
dups=$(ls .whl | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "fetch_device_wheels: two versions of: $dups (the install would stop)" >&2; exit 1; }
ls -la .whl
du -sh .whl

if [ "$check" = 1 ]; then
  # The same pins for this machine's python, installed alone into a clean folder, imported with no
  # site-packages (python -S): a module wandb or hydra needs that the set lacks fails here.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  fetch "$tmp/whl"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$tmp/site" "$tmp"/whl/*.whl
  PYTHONPATH="$tmp/site" WANDB_SILENT=true python3 -S - "$tmp/site" <<'EOF'
import sys, tempfile
import hydra, omegaconf, platformdirs, wandb  # what xbench's CLI and its W&B sink import
run = wandb.init(mode="offline", dir=tempfile.mkdtemp(), project="check", settings=wandb.Settings(silent=True))
run.log({"x": 1.0})
run.finish()
site = sys.argv[1]
used = sorted({n.split(".")[0] for n, mod in list(sys.modules.items())
               if (getattr(mod, "__file__", None) or "").startswith(site)})
print("fetch_device_wheels: imported in a clean target, loaded from the carried set:", " ".join(used))
EOF
fi
