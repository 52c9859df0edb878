"""MLPerf-style event log of a train-to-target run, written with the `mlperf-logging` package's mllog.

One `:::MLLOG {...}` line per event in `mlperf.log` beside the record: init start/stop, run start/stop,
epoch start/stop, eval start/stop and eval accuracy, with MLPerf's own key names. A resumed run appends
to the same file and marks the resume with an `xbench_resume` event (MLPerf has no resume).
"""

from __future__ import annotations

import logging
from pathlib import Path

from mlperf_logging.mllog import constants as C
from mlperf_logging.mllog.mllog import MLLogger

LOG_FILE = "mlperf.log"


class MLPerfLog:
    def __init__(self, path: Path):
        # A logger of our own (not mllog's global default), so runs in one process never share handlers.
        self._logger = logging.getLogger(f"xbench.mllog.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler = logging.FileHandler(path, mode="a")
        self._logger.addHandler(self._handler)
        self.ml = MLLogger(logger=self._logger, default_stack_offset=1)

    def run_start(self, cfg, train_samples: int, eval_samples: int, global_batch: int) -> None:
        e = self.ml.event
        e(key=C.SUBMISSION_BENCHMARK, value=f"{cfg.model.name}_{cfg.data.name}")
        e(key=C.SUBMISSION_ORG, value="xbench")
        e(key=C.SUBMISSION_DIVISION, value=C.OPEN)
        e(key=C.SUBMISSION_STATUS, value=C.RESEARCH)
        e(key=C.SUBMISSION_PLATFORM, value=cfg.platform.name)
        self.ml.start(key=C.INIT_START)
        e(key=C.SEED, value=cfg.bench.seed)
        e(key=C.GLOBAL_BATCH_SIZE, value=global_batch)
        e(key=C.OPT_NAME, value=cfg.optim.name)
        e(key=C.OPT_BASE_LR, value=cfg.optim.lr)
        e(key=C.TRAIN_SAMPLES, value=train_samples)
        e(key=C.EVAL_SAMPLES, value=eval_samples)
        self.ml.end(key=C.INIT_STOP)
        self.ml.start(key=C.RUN_START)

    def resumed(self, count: int, epoch: float, samples: int) -> None:
        self.ml.event(key="xbench_resume", value=count, metadata={C.EPOCH_NUM: epoch, C.SAMPLES_COUNT: samples})

    def epoch_start(self, epoch: int) -> None:
        self.ml.start(key=C.EPOCH_START, metadata={C.EPOCH_NUM: epoch})

    def epoch_stop(self, epoch: int) -> None:
        self.ml.end(key=C.EPOCH_STOP, metadata={C.EPOCH_NUM: epoch})

    def eval_start(self, epoch: float) -> None:
        self.ml.start(key=C.EVAL_START, metadata={C.EPOCH_NUM: epoch})

    def eval_stop(self, epoch: float, metric: str, value: float, samples: int) -> None:
        self.ml.end(key=C.EVAL_STOP, metadata={C.EPOCH_NUM: epoch})
        key = C.EVAL_ACCURACY if metric != "perplexity" else "eval_perplexity"
        self.ml.event(key=key, value=value, metadata={C.EPOCH_NUM: epoch, C.SAMPLES_COUNT: samples})

    def run_stop(self, reached: bool) -> None:
        self.ml.end(key=C.RUN_STOP, metadata={C.STATUS: C.SUCCESS if reached else C.ABORTED})

    def close(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()
