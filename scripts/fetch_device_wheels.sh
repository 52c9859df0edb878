#!/usr/bin/env bash
# Download, here (where PyPI is reachable), the wheels that scripts/device_check.sh needs on a GPU
# machine that has PyTorch but no network: hydra-core, omegaconf, antlr4 and wandb with the
# dependencies that machine's image lacks. They land in .whl/ (git-ignored); carry it with the run.
#   bash scripts/fetch_device_wheels.sh [PYTHON_VERSION]    # default 3.12 (the H200 image's python3)
set -euo pipefail
cd "$(dirname "$0")/.."
pyver="${1:-3.12}"
rm -rf .whl && mkdir -p .whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp "${plat[@]}" \
  -d .whl wandb==0.31.0
# hydra-core and omegaconf without their resolver: their antlr4 pin has no wheel (built below).
python3 -m pip download -q --no-deps -d .whl hydra-core==1.3.2 omegaconf==2.3.0
# antlr4's runtime 4.9.3 (what omegaconf 2.3 needs) is published as an sdist only: build its pure wheel.
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
rm -f .whl/antlr4*.tar.gz
# Packages the GPU image already has (see the device tool's KINDS.md): keep its versions, carry fewer bytes.
for have in click packaging platformdirs protobuf PyYAML pyyaml requests typing_extensions urllib3 idna certifi \
            charset_normalizer xxhash anyio h11 httpcore httpx sniffio; do
  rm -f .whl/"${have}"-*.whl
done
ls -la .whl
du -sh .whl
