# xbench: the README's two commands are `make run` and `make test`; both set up .venv when needed.
SHELL := /bin/bash
# The interpreter both environments are built on: Debian's python3.11 where there is one (PGO + LTO, libpython
# linked in), else python3. pyenv's build here has neither: pure-Python work ran 15-20% slower on it (the report
# over 10,000 records 7.08 -> 6.45 s wall, alternated). PY=... picks another.
PY ?= $(or $(wildcard /usr/bin/python3.11),python3)
# Two environments, each from its lock: .venv (requirements/dev.lock: the newest torch PyPI serves, torchax on
# JAX's CPU backend; runs, lint and most tests) and .venv-xla (requirements/xla.lock: torch 2.9.0 + torch-xla 2.9.0,
# the only pair torch-xla's last release works with; the tests marked `xla`).
VENV ?= .venv
XVENV ?= .venv-xla
VPY := $(VENV)/bin/python
XPY := $(XVENV)/bin/python
# The stamp's name changes when the recipe gains a step that older .venvs lack (last: the interpreter, PY).
STAMP := $(VENV)/.xbench-installed-py
XSTAMP := $(XVENV)/.xbench-installed-py
ARGS ?=
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install install-xla run test test-default test-xla test-fast lint bench report drill lock clean browser slurm

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# One recipe for both environments: $(call venv,FOLDER,LOCK). uv when present (fast), pip otherwise; the stamp
# re-installs when the lock or pyproject changes.
# Bytecode is compiled at install (compileall over site-packages; uv does not by default): where
# PYTHONDONTWRITEBYTECODE=1 (this machine, CI) no process could write it, so each one compiled torch, sympy and
# Hydra from source again: a small CLI run took 10 s instead of 5, and the test suite starts hundreds.
define venv
	@echo "==> setting up $(1) from $(2) (first time: a few minutes, torch's CUDA build is several GB)"
	@command -v uv >/dev/null 2>&1 || $(PY) -m pip install -q uv || true
	@# built afresh: a folder left from another interpreter keeps its links to it
	@rm -rf $(1)
	@if command -v uv >/dev/null 2>&1; then \
	  uv venv -q --python $(PY) $(1) && \
	  uv pip install -q --prerelease allow --python $(1)/bin/python -r $(2) && \
	  uv pip install -q --python $(1)/bin/python --no-deps --no-build-isolation -e . ; \
	else \
	  $(PY) -m venv $(1) && $(1)/bin/python -m pip install -q --pre -r $(2) && \
	  $(1)/bin/python -m pip install -q --no-deps --no-build-isolation -e . ; \
	fi
	@# A module written for a newer Python fails to compile (torch 2.15 ships torch/testing/_internal/py312_intrinsics.py)
	@# and compileall then exits 1 after compiling everything else: that is not an install failure.
	@$(1)/bin/python -m compileall -q -j 0 "$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	@touch $(1)/.xbench-installed-py
endef

# xbench's own bytecode, before any command that starts processes: the editable install leaves xbench/ outside
# site-packages (compileall at install does not reach it) and PYTHONDONTWRITEBYTECODE=1 (this machine, CI) lets no
# process write it, so each one compiled ~100 modules again (a small CLI run 5.3-5.8 s -> 4.8 s with them). Only
# what changed since is compiled again (the .pyc keeps its source's mtime and size).
BYTECODE = @$(1) -m compileall -q -j 0 xbench hydra_plugins >/dev/null

$(STAMP): requirements/dev.lock pyproject.toml
	$(call venv,$(VENV),requirements/dev.lock)

$(XSTAMP): requirements/xla.lock pyproject.toml
	$(call venv,$(XVENV),requirements/xla.lock)

install: $(STAMP)  ## create .venv (the default environment, newest torch) with xbench (editable)

install-xla: $(XSTAMP)  ## create .venv-xla (torch 2.9.0 + torch-xla 2.9.0) with xbench (editable)

run: $(STAMP)  ## run the default benchmark on this machine (extra Hydra overrides: ARGS="...")
	$(call BYTECODE,$(VPY))
	$(VPY) -m xbench $(ARGS)

# Every test in the environment it needs: the tests marked `xla` in .venv-xla, the rest in .venv.
test: test-default test-xla  ## run every test, each in its environment (both)

# The default environment's tests in two passes (tests/conftest.py says which test goes where): first those marked
# `serial`, one at a time (a figure they hold depends on timing, contention or the length of warm-up; the fault drill
# and the tests run beside it are among them), then the rest on both cores (pytest-xdist, WORKERS processes, each
# test module whole on one). Both passes run; make fails with the first failing one's status. A pass that selects
# nothing (pytest's exit 5, as when PYTEST_ARGS names one file) is not a failure.
WORKERS ?= 2
define two_passes
	@rc=0; seen=$$(mktemp); \
	echo "==> pass 1/2: the tests marked serial, one at a time"; \
	$(VPY) -m pytest -m "($(1)) and serial" --modules-seen=$$seen $(PYTEST_ARGS) || { c=$$?; [ $$c = 5 ] || rc=$$c; }; \
	echo "==> pass 2/2: the other tests, $(WORKERS) at a time"; \
	$(VPY) -m pytest -m "($(1)) and not serial" -n $(WORKERS) --dist loadfile --modules-seen=$$seen $(2) \
	  $(PYTEST_ARGS) || { c=$$?; [ $$c = 5 ] || [ $$rc != 0 ] || rc=$$c; }; \
	rm -f $$seen; exit $$rc
endef

test-default: $(STAMP) browser slurm  ## the tests not marked xla, on the newest torch (.venv), in two passes
	$(call BYTECODE,$(VPY))
	$(call two_passes,not xla)

test-xla: $(XSTAMP)  ## the tests marked xla, on torch 2.9.0 + torch-xla 2.9.0 (.venv-xla)
	$(call BYTECODE,$(XPY))
	$(XPY) -m pytest -m xla $(PYTEST_ARGS)

# The report's browser test opens report.html in headless Chromium (tests/test_report_browser.py): installed
# here when missing and this is root on Debian/Ubuntu; otherwise that test skips and says why.
browser:  ## install headless Chromium for the report's browser check (root, apt), when missing
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "==> installing chromium (the report's browser check)"; \
	      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	        echo "==> could not install chromium: the report's browser test will skip"; \
	    else echo "==> no chromium and not root: the report's browser test will skip"; fi; }

# The SLURM tests (tests/test_slurm.py) start a one-node cluster of this machine in a temporary folder
# (munged, slurmctld, slurmd) from Debian's packages: installed here when missing and this is root on
# Debian/Ubuntu; otherwise those tests skip and say why.
slurm:  ## install SLURM and munge for the SLURM tests (root, apt), when missing
	@{ PATH="$$PATH:/usr/sbin:/sbin"; command -v slurmctld && command -v slurmd && command -v munged; } >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "==> installing slurm-wlm and munge (the SLURM tests)"; \
	      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; } || \
	        echo "==> could not install slurm-wlm: the SLURM tests will skip"; \
	    else echo "==> no SLURM and not root: the SLURM tests will skip"; fi; }

# --every-module (tests/conftest.py): the run fails when a module of xbench or hydra_plugins was never imported
# by the tests that ran, naming it; a run narrowed by PYTEST_ARGS="-k ..." or test paths skips that check.
# --every-module is checked at the end of the second pass, over both passes' modules (--modules-seen).
test-fast: $(STAMP)  ## run the tests not marked slow or xla (.venv); fails when they leave a module of xbench unimported
	$(call BYTECODE,$(VPY))
	$(call two_passes,not slow and not xla,--every-module)

lint: $(STAMP)  ## ruff, and the import layers of docs/architecture.md (import-linter contracts in pyproject.toml)
	$(VENV)/bin/ruff check xbench tests scripts hydra_plugins
	$(VENV)/bin/lint-imports --no-cache

bench: $(STAMP) $(XSTAMP)  ## harness overhead (in-process and process-level, quiet and loaded) and report-scale benchmarks (ratios side by side)
	$(call BYTECODE,$(VPY))
	$(call BYTECODE,$(XPY))
	$(VPY) scripts/bench_overhead.py --runtime eager  # the newest torch
	$(XPY) scripts/bench_overhead.py --runtime xla  # XLA:CPU: torch-xla lives in .venv-xla (torch 2.9.0)
	$(VPY) scripts/bench_process.py --runtime eager  # start-up, and the CLI against a plain script
	$(XPY) scripts/bench_process.py --runtime xla --startup-pairs 0  # the same on XLA:CPU (.venv-xla)
	$(VPY) scripts/bench_sweep.py  # a 10-point sweep: overhead per point, spawned vs forked from the warm template
	$(VPY) scripts/bench_report.py 10000 --plots
	$(VPY) scripts/bench_fsdp.py  # DDP vs FSDP2 at the same global batch: step time, tokens/s, memory per device

report: $(STAMP)  ## tables and plots from ./results into ./report
	$(VPY) -m xbench.report results --out report

drill: $(STAMP)  ## fault drill: every fault against the real CLI, as a table (ARGS="--short" for the quick one)
	$(call BYTECODE,$(VPY))
	PYTHON=$(VPY) scripts/fault_drill.sh $(ARGS)

lock:  ## recompile requirements/dev.lock and xla.lock from their .in files
	uv pip compile --prerelease allow requirements/dev.in -o requirements/dev.lock --python-version 3.11 --python-platform x86_64-manylinux_2_28
	uv pip compile requirements/xla.in -o requirements/xla.lock --python-version 3.11 --python-platform x86_64-manylinux_2_28

clean:  ## remove the environment and local outputs
	rm -rf $(VENV) $(XVENV) results outputs multirun wandb report
