"""MLPerf-style event log of a train-to-target run, written with the `mlperf-logging` package's mllog.

One `:::MLLOG {...}` line per event in `mlperf.log` beside the record: init start/stop, run start/stop,
epoch start/stop, eval start/stop and eval accuracy, with MLPerf's own key names, and the recipe's
hyperparameters under MLPerf's keys (the optimizer's, the schedule's, gradient accumulation). A resumed run
appends to the same file and marks the resume with an `xbench_resume` event (MLPerf has no resume). In a
multi-rank run only rank 0 writes (`for_rank`); the others get a log that writes nothing.

The log passes mlperf-logging's compliance checker at format level under training ruleset 4.0.0
(`python -m mlperf_logging.compliance_checker --ruleset 4.0.0 mlperf.log`: the last ruleset with both
ResNet and BERT; the checker's default, 6.1.0, has neither): `init_start` carries the run's start (the
process's, or its sweep point's: start-up counts as init, as in MLPerf), `cache_clear` is logged (value
false: xbench drops no OS caches), and `submission_benchmark` is the MLPerf benchmark of the run's task
(`mlperf_benchmark`), with xbench's own workload name under `xbench_workload`.

Every way a run ends leaves a log the checker passes: `run_stop` closes an epoch left open (a target met at an
evaluation inside an epoch or at its last step, a time limit), and `close()` of a run that never reached
`run_stop` (a stop by signal) closes it with status aborted, those lines marked `xbench_stop`; a resume drops
the marked lines before it appends, so a stopped-and-resumed log still holds exactly one `run_stop`. Epoch
numbers are one meaning throughout: `epoch_num` of `epoch_start`/`epoch_stop` is the epoch's 1-based number
(MLPerf's), and an evaluation's is the epochs done when it ran, so it lies in (n - 1, n] inside epoch n.
`metadata.file` is relative to the directory that holds the xbench package (`xbench/bench/...`), never this
machine's absolute path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog.mllog import MLLogger

from xbench.metrics import goals
from xbench.records import safe_io

if TYPE_CHECKING:
    from xbench.plan import Plan

LOG_FILE = "mlperf.log"
RULESET = "4.0.0"  # the compliance checker's training ruleset these logs are written for (see above)
# MLPerf's benchmark for each goal metric (metrics/goals.py's `mlperf`): classification is MLPerf's ResNet
# benchmark, masked-LM accuracy its BERT one (conf/recipe/mlperf_resnet50.yaml, mlperf_bert.yaml),
# language-model perplexity its GPT-3 one (whose open rules also fix GPT-3's hyperparameters and log
# perplexity as eval_accuracy, so an xbench LM log passes the common checks, not those).
STOP_MARK = "xbench_stop"  # metadata on the lines a stop writes and a resume removes
_SOURCE_ROOT = re.escape(str(Path(__file__).resolve().parents[2]))  # the folder holding the xbench package


def mlperf_benchmark(metric: str) -> str:
    return goals.get(metric).mlperf


class _StopOnErrorHandler(logging.StreamHandler):
    """mllog's lines into the file. A write that fails (a full or read-only store: ENOSPC, EFBIG, EROFS) is
    said once, on stderr, and the log stops there: the run goes on and its record keeps every figure
    (logging's default printed a traceback per line: 905 in 5 minutes of a full store)."""

    def __init__(self, stream, path: Path):
        super().__init__(stream)
        self.path, self.problem = path, None  # problem: why the log stopped (None: every line was written)

    def emit(self, record: logging.LogRecord) -> None:
        if self.problem is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.problem is None:
            e = sys.exc_info()[1]
            self.problem = f"{type(e).__name__}: {e}"
            with contextlib.suppress(Exception):
                print(
                    f"xbench: {self.path} stopped ({self.problem}); the run goes on, its record keeps every "
                    "figure and says the log is incomplete",
                    file=sys.stderr,
                    flush=True,
                )


class MLPerfLog:
    def __init__(self, path: Path):
        # A logger of our own (not mllog's global default), so runs in one process never share handlers.
        self._logger = logging.getLogger(f"xbench.mllog.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._path = path
        self._stream = safe_io.open_append(path)  # appended, never through a planted link
        self._handler = _StopOnErrorHandler(self._stream, path)
        self._logger.addHandler(self._handler)
        self.ml = MLLogger(logger=self._logger, default_stack_offset=1, root_dir=_SOURCE_ROOT)
        self._open_epoch: int | None = None  # the 1-based number of an epoch started and not stopped
        self._run_open = False  # run_start (or a resume) logged and no run_stop yet

    def run_start(self, plan: Plan, train_samples: int, eval_samples: int, global_batch: int,
                  hyper: dict | None = None, started_at: float | None = None) -> None:
        """`plan`: the run's (xbench/plan.py). `started_at`: the run's start, wall seconds (default: this
        process's start), logged as init_start."""
        e = self.ml.event
        start_ms = round(1000 * (started_at if started_at is not None else psutil.Process().create_time()))
        self.ml.start(key=C.INIT_START, time_ms=start_ms)
        e(key=C.CACHE_CLEAR, value=False)  # MLPerf asks whether caches were dropped; xbench drops none
        e(key=C.SUBMISSION_BENCHMARK, value=mlperf_benchmark(plan.goal.metric))
        e(key="xbench_workload", value=f"{plan.model.name}_{plan.data.name}")
        e(key=C.SUBMISSION_ORG, value="xbench")
        e(key=C.SUBMISSION_DIVISION, value=C.OPEN)
        e(key=C.SUBMISSION_STATUS, value=C.RESEARCH)
        e(key=C.SUBMISSION_PLATFORM, value=plan.platform.name)
        e(key=C.SEED, value=plan.bench.seed)
        e(key=C.GLOBAL_BATCH_SIZE, value=global_batch)
        for key, value in recipe_events(
            plan.optim, hyper or {"lr_base": plan.optim.lr, "lr_schedule": "constant"}
        ):
            e(key=key, value=value)
        e(key=C.TRAIN_SAMPLES, value=train_samples)
        e(key=C.EVAL_SAMPLES, value=eval_samples)
        self.ml.end(key=C.INIT_STOP)
        self.ml.start(key=C.RUN_START)
        self._run_open = True

    def resumed(self, count: int, epoch: float, samples: int, open_epoch: int | None = None) -> None:
        """`open_epoch`: the 0-based index of the epoch the checkpoint stopped inside (None at an epoch's
        edge)."""
        self._drop_stop_lines()
        self.ml.event(
            key="xbench_resume", value=count, metadata={C.EPOCH_NUM: epoch, C.SAMPLES_COUNT: samples}
        )
        self._open_epoch = None if open_epoch is None else open_epoch + 1
        self._run_open = True

    def _drop_stop_lines(self) -> None:
        """Remove what a stop wrote to close the log (its epoch_stop and aborted run_stop): the run goes
        on."""
        self._stream.flush()
        with os.fdopen(safe_io.open_fd(self._path, os.O_RDONLY), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        kept = [ln for ln in text.splitlines(keepends=True) if f'"{STOP_MARK}": true' not in ln]
        if len(kept) != len(text.splitlines()):
            os.ftruncate(self._stream.fileno(), 0)  # O_APPEND: the next write lands at the (new) end
            self._stream.write("".join(kept))
            self._stream.flush()

    def epoch_start(self, epoch: int) -> None:
        """`epoch`: the 0-based index of the epoch (logged 1-based, as MLPerf numbers epochs)."""
        self._open_epoch = epoch + 1
        self.ml.start(key=C.EPOCH_START, metadata={C.EPOCH_NUM: epoch + 1})

    def epoch_stop(self, epoch: int, **meta) -> None:
        """`epoch`: the 0-based index of the epoch that ended."""
        self._open_epoch = None
        self.ml.end(key=C.EPOCH_STOP, metadata={C.EPOCH_NUM: epoch + 1, **meta})

    def eval_start(self, epoch: float) -> None:
        self.ml.start(key=C.EVAL_START, metadata={C.EPOCH_NUM: epoch})

    def eval_stop(self, epoch: float, metric: str, value: float, samples: int) -> None:
        self.ml.end(key=C.EVAL_STOP, metadata={C.EPOCH_NUM: epoch})
        meta = {C.EPOCH_NUM: epoch, C.SAMPLES_COUNT: samples}
        if metric == "perplexity":  # MLPerf's GPT-3 logs an LM's log-perplexity as its eval_accuracy
            self.ml.event(key="eval_perplexity", value=value, metadata=meta)
            value = math.log(value)
        self.ml.event(key=C.EVAL_ACCURACY, value=value, metadata=meta)

    def run_stop(self, reached: bool, **meta) -> None:
        if self._open_epoch is not None:  # the run ended inside an epoch (or before its edge was logged)
            self.epoch_stop(self._open_epoch - 1, **meta)
        self._run_open = False
        self.ml.end(key=C.RUN_STOP, metadata={C.STATUS: C.SUCCESS if reached else C.ABORTED, **meta})

    def close(self) -> None:
        # stopped (a signal) before run_stop: closed as aborted, marked for a resume to drop
        if self._run_open:
            self.run_stop(False, **{STOP_MARK: True})
        self._logger.removeHandler(self._handler)
        self._handler.close()
        with contextlib.suppress(OSError):  # lines a failed write left in the buffer (said once, above)
            self._stream.close()

    @property
    def problem(self) -> str | None:
        """Why the log stopped before its end (a failed write), or None."""
        return self._handler.problem


class NullLog:
    """What ranks other than 0 log: nothing (one mlperf.log per run)."""

    problem = None

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def for_rank(path: Path, rank: int):
    return MLPerfLog(path) if rank == 0 else NullLog()


def recipe_events(optim, hyper: dict) -> list[tuple[str, object]]:
    """(MLPerf key, value) for the optimizer and schedule (`hyper`: training.schedule.hyperparameters)."""
    name, lr, warm = optim.name, hyper["lr_base"], hyper.get("lr_warmup_epochs", 0.0)
    out = [(C.OPT_NAME, C.LARS if name == "lars" else C.LAMB if name == "lamb" else name),
           (C.GRADIENT_ACCUMULATION_STEPS, optim.accumulate_steps)]
    if name == "lars":  # MLPerf's ResNet-50 keys
        out += [(C.LARS_OPT_BASE_LEARNING_RATE, lr), (C.LARS_OPT_MOMENTUM, optim.momentum),
                (C.LARS_OPT_WEIGHT_DECAY, optim.weight_decay), (C.LARS_EPSILON, optim.eps),
                (C.LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS, warm)]
        if "lr_decay_steps" in hyper:
            out += [
                (C.LARS_OPT_END_LR, hyper["lr_end"]),
                (C.LARS_OPT_LR_DECAY_STEPS, hyper["lr_decay_steps"]),
            ]
        if "lr_poly_power" in hyper:
            out.append((C.LARS_OPT_LR_DECAY_POLY_POWER, hyper["lr_poly_power"]))
    elif name == "lamb":  # MLPerf's BERT keys
        out += [(C.OPT_BASE_LR, lr), (C.OPT_LAMB_BETA_1, optim.betas[0]), (C.OPT_LAMB_BETA_2, optim.betas[1]),
                (C.OPT_LAMB_EPSILON, optim.eps), (C.OPT_LAMB_WEIGHT_DECAY, optim.weight_decay),
                (C.OPT_LR_WARMUP_STEPS, hyper.get("lr_warmup_steps", 0))]
        if "lr_decay_steps" in hyper:
            out.append((C.OPT_LR_TRAINING_STEPS, hyper["lr_warmup_steps"] + hyper["lr_decay_steps"]))
        if "lr_poly_power" in hyper:
            out.append((C.OPT_LAMB_LR_DECAY_POLY_POWER, hyper["lr_poly_power"]))
    else:
        out += [(C.OPT_BASE_LR, lr), (C.OPT_WEIGHT_DECAY, optim.weight_decay), (C.OPT_LR_WARMUP_EPOCHS, warm)]
        if name == "sgd":
            out.append(("opt_momentum", optim.momentum))
        if name == "adamw":
            out += [(C.OPT_ADAMW_BETA_1, optim.betas[0]), (C.OPT_ADAMW_BETA_2, optim.betas[1]),
                    (C.OPT_ADAMW_EPSILON, optim.eps), (C.OPT_ADAMW_WEIGHT_DECAY, optim.weight_decay)]
        if "lr_milestones_epochs" in hyper:
            out += [(C.OPT_LR_DECAY_BOUNDARY_EPOCHS, hyper["lr_milestones_epochs"]),
                    (C.OPT_LR_DECAY_FACTOR, hyper["lr_gamma"])]
        if "lr_decay_steps" in hyper:
            out += [(C.OPT_LR_DECAY_STEPS, hyper["lr_decay_steps"]), (C.OPT_END_LR, hyper["lr_end"])]
    if optim.label_smoothing:
        out.append(("label_smoothing", optim.label_smoothing))
    if getattr(optim, "grad_clip_norm", None):
        out.append((C.OPT_GRADIENT_CLIP_NORM, optim.grad_clip_norm))
    out.append(("opt_learning_rate_schedule", hyper["lr_schedule"]))
    return out
