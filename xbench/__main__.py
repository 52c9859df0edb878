"""`python -m xbench [overrides]`: compose -> runner.run (record, compat, mode, sinks) -> exit status.

Every run that gets past composition leaves a record: `running` as soon as it starts, then `ok`,
`failed`, `oom`, `interrupted` or `diverged` with the reason (xbench/envelope.py). A single run exits
non-zero when it did not succeed; a `--multirun` sweep goes on to the next point and exits non-zero at
the end if any point failed; an interrupted point ends the sweep.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from xbench import runner
from xbench.config import config_dir, register_configs
from xbench.hints import compose_hints
from xbench.launch.isolation import isolated
from xbench.records.redact import RedactingStream, argv_secret_values
from xbench.runtimes import preload_xla

_FAILED_RUNS: list[str] = []
_STARTED = False  # a run got past composition (else a failure is Hydra's, before any record)
_PRELOADED: list[bool] = []
register_configs()


def run(dcfg: DictConfig):
    """One benchmark run from a composed config; returns the final RunRecord (None off rank 0)."""
    global _STARTED
    _STARTED = True
    record = runner.run(dcfg)
    if record is not None and record.status != "ok":
        _FAILED_RUNS.append(record.run_id)
    return record


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(dcfg: DictConfig) -> None:
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and not _PRELOADED:
        _PRELOADED.append(True)
        if not isolated(dcfg):  # points sharing this process: an XLA one needs torch_xla before any backward
            preload_xla(" ".join(sys.argv) + str(OmegaConf.to_container(HydraConfig.get().sweeper)))
    record = run(dcfg)
    if record is None:  # a rank > 0: rank 0 writes the record and sets the exit status
        return
    if record.status == "interrupted":  # a preempted machine or Ctrl-C: the rest of a sweep is not run
        if multirun:
            print("xbench: interrupted; the remaining points of the sweep are skipped", file=sys.stderr)
        raise SystemExit(130)
    if record.status != "ok" and not multirun:
        raise SystemExit(1)


def cli() -> None:
    # The console is an output too: secret override values and secret environment values never reach it
    # (Hydra echoes overrides when it launches a sweep and in compose errors).
    sys.stdout = RedactingStream(sys.stdout, argv_secret_values(sys.argv))
    sys.stderr = RedactingStream(sys.stderr, argv_secret_values(sys.argv))
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None) and not _STARTED:  # Hydra refused the config: add what is allowed
            for line in compose_hints(sys.argv[1:]):
                print(f"xbench: {line}", file=sys.stderr)
        raise
    if _FAILED_RUNS:  # multirun: every point ran; say which did not succeed
        print(f"xbench: {len(_FAILED_RUNS)} run(s) did not succeed: {', '.join(_FAILED_RUNS)}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    cli()
