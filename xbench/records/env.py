"""Where a run happened, on the host side: Python, OS, CPU model and flags, cores, git revision,
library versions and an allow-listed slice of the environment. No torch import (see
xbench.platforms.detect for what torch and the accelerators say).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from xbench.records.redact import is_secret_name, redact_argv, redact_text
from xbench.version import __version__

# CPU flags that change deep-learning speed (vector width, bf16/int8 dot products, AMX tiles).
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")
PACKAGES = ("torch", "torch_xla", "torchvision", "hydra-core", "omegaconf", "wandb", "accelerate",
            "numpy", "scikit-learn", "nvidia-ml-py", "transformers", "timm", "mlperf-logging")
# Only these variables are recorded, and never one whose name looks like a secret.
ENV_ALLOW = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PJRT_DEVICE",
             "CPU_NUM_DEVICES", "XLA_FLAGS", "XLA_USE_BF16", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG",
             "TORCHINDUCTOR_CACHE_DIR", "TORCH_COMPILE_DEBUG", "USE_TORCH_XLA", "ACCELERATE_USE_CPU",
             "WORLD_SIZE", "LOCAL_WORLD_SIZE", "WANDB_MODE", "SLURM_JOB_ID", "TPU_NAME", "HF_HUB_OFFLINE")


def safe_environ() -> dict[str, str]:
    return {k: redact_text(os.environ[k]) for k in ENV_ALLOW if k in os.environ and not is_secret_name(k)}


def cpu_info() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        model = m.group(1).strip() if m else model
        f = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        flags = set(f.group(1).split()) if f else set()
    except OSError:
        pass
    return {
        "model": model,
        "flags": [x for x in CPU_FLAGS if x in flags],
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 2),
    }


def git_revision() -> dict:
    """The checkout xbench runs from (or the working directory's), with a dirty flag."""
    for where in (Path(__file__).resolve().parents[2], Path.cwd()):
        try:
            rev = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                                 text=True, timeout=5)
            if rev.returncode != 0:
                continue
            dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "-uno"],
                                   capture_output=True, text=True, timeout=5)
            return {"revision": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip()), "path": str(where)}
        except (OSError, subprocess.SubprocessError):
            continue
    return {"revision": None, "dirty": None, "path": None}


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def host_env() -> dict:
    return {
        "xbench_version": __version__,
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "cpu": cpu_info(),
        "git": git_revision(),
        "packages": package_versions(),
        "environ": safe_environ(),
        "argv": redact_argv(sys.argv),
    }
