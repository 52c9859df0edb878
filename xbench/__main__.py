"""`python -m xbench [overrides]`: compose -> runner.run (record, compat, mode, sinks) -> exit status.

Every run that gets past composition leaves a record: `running` as soon as it starts, then `ok`,
`failed`, `oom`, `interrupted` or `diverged` with the reason (xbench/envelope.py). A single run exits
non-zero when it did not succeed; a `--multirun` sweep goes on to the next point and exits non-zero at
the end if any point failed; a stop signal ends the sweep.

Exit status: 0 ok; 1 a run did not succeed, or Hydra refused the command line (also `+key=v` with a key
the schema lacks); 2 refused before it started (a bad `resume=`, `baseline=`, `store.root` or run name:
nothing written; a number out of its range is a `failed` record, exit 1, before any device work); 74 the store
could not take the record (it went to a fallback folder the console names); 130 stopped by a signal (the
record says what was measured); 128+N a second signal N (exited at once).
"""

from __future__ import annotations

import platform
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from xbench import runner
from xbench.config import config_dir, register_configs, register_model_choices
from xbench.envelope import SIGNALS, StopAtOnce, redact_hydra_files, say
from xbench.hints import added_key_problems, compose_hints, moved_key_problems, refusals, resume_ignored
from xbench.hydra_guard import install_listing, install_mode_shortcut
from xbench.launch.isolation import isolated
from xbench.models import patterns
from xbench.rank import startup_phase
from xbench.records.redact import RedactingStream, argv_secret_values
from xbench.runtimes import preload_xla
from xbench.sinks import sweep
from xbench.tools import leave
from xbench.version import __version__

HELP_FLAGS = frozenset(("--help", "-h", "--hydra-help"))
_FAILED_RUNS: list[str] = []
_STARTED = False  # a run got past composition (else a failure is Hydra's, before any record)
_PRELOADED: list[bool] = []
register_configs()
install_listing()  # --help's group listing without a copy of Hydra's repository per option
install_mode_shortcut()  # a run composes its config once, not twice


def run(dcfg: DictConfig):
    """One benchmark run from a composed config; returns the final RunRecord (None off rank 0)."""
    global _STARTED
    _STARTED = True
    record = runner.run(dcfg)
    sweep.note(record)  # a local sweep's end table (hydra_plugins/xbench_sweeper)
    if record is not None and record.status != "ok":
        _FAILED_RUNS.append(record.run_id)
    return record


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(dcfg: DictConfig) -> None:
    redact_hydra_files()  # the sweeper has just written multirun.yaml
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    if SIGNALS.flag.requested:  # a stop between two sweep points (or before the one run): no new point starts
        say(
            f"xbench: {SIGNALS.flag.reason} received; "
            + (
                "the remaining points of the sweep are skipped"
                if multirun
                else "the run was not started (no record)"
            )
        )
        raise SystemExit(130)
    # Until the run's envelope takes over (it writes the record, then stops start-up at once itself), a stop
    # signal ends the point from the handler: nothing is written yet, nothing to wait for (imports take
    # seconds).
    SIGNALS.at_once = "start-up"
    try:
        _point(dcfg, multirun)
    # the handler's, before the envelope took over (a rank's own stops are not caught here)
    except StopAtOnce:
        say(f"xbench: {SIGNALS.flag.reason} received before the run's record was written; nothing was run"
            + ("; the remaining points of the sweep are skipped" if multirun else ""))
        raise SystemExit(130) from None
    finally:
        SIGNALS.at_once = None


def _point(dcfg: DictConfig, multirun: bool) -> None:
    """One point: refusals, then the run (runner.run), then its exit status."""
    if multirun and not _PRELOADED:
        _PRELOADED.append(True)
        if not isolated(dcfg):  # points sharing this process: an XLA one needs torch_xla before any backward
            preload_xla(" ".join(sys.argv) + str(OmegaConf.to_container(HydraConfig.get().sweeper)))
    # as typed: an override's `${...}` is the config's to resolve, and a bad one is refusals' one line
    overrides = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
    for line in resume_ignored(overrides):
        say(f"xbench: WARNING {line}")
    problems = refusals(dcfg, overrides)
    if problems:  # out-of-range knobs, ignored resume overrides: all said at once, nothing written
        for line in problems:
            say(f"xbench: {line}")
        if not multirun:
            raise SystemExit(2)
        _FAILED_RUNS.append(f"point {HydraConfig.get().job.num} (refused)")
        return
    try:
        record = run(dcfg)
    except runner.Refused as e:  # nothing was written; a sweep goes on to its next point
        say(f"xbench: {e}")
        if not multirun:
            raise SystemExit(2) from None
        _FAILED_RUNS.append(f"point {HydraConfig.get().job.num} (refused)")
        return
    if record is None:  # a rank > 0: rank 0 writes the record and sets the exit status
        return
    if record.status == "interrupted" or SIGNALS.flag.requested:  # the rest of a sweep is not run
        if multirun:
            say("xbench: interrupted; the remaining points of the sweep are skipped")
        raise SystemExit(130)
    if record.status != "ok" and not multirun:
        raise SystemExit(1)


def version() -> str:
    return f"xbench {__version__} (Hydra {hydra.__version__}, Python {platform.python_version()})"


def cli() -> None:
    if "--version" in sys.argv[1:]:  # xbench's own version (Hydra's flag would print Hydra's)
        print(version())
        return
    try:  # -m 'model=timm/convnext_*': the family's matching names, listed before anything runs
        sys.argv[1:], listed = patterns.expand(sys.argv[1:])
    except ValueError as e:
        say(f"xbench: {e}")
        raise SystemExit(2) from None
    for line in listed:
        say(f"xbench: {line}")
    register_model_choices(sys.argv[1:])  # model=torchvision/NAME and the like: the open zoo
    # The console is an output too: secret values never reach it (Hydra echoes overrides when it launches
    # a sweep and in compose errors).
    values = argv_secret_values(sys.argv)
    # xbench's own help: by value only, its examples as written
    helping = not HELP_FLAGS.isdisjoint(sys.argv[1:])
    sys.stdout = RedactingStream(sys.stdout, values, by_name=not helping)
    sys.stderr = RedactingStream(sys.stderr, values, by_name=not helping)
    SIGNALS.install()  # from the start, for the whole process: a stop at start-up or between sweep points
    refused = moved_key_problems(sys.argv[1:]) or added_key_problems(sys.argv[1:])
    if refused:  # an old spelling; `+bench.step=5`: Hydra would accept a key that nothing reads
        for line in refused:
            say(f"xbench: {line}")
        raise SystemExit(1)
    startup_phase("compose")
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None) and not _STARTED:  # Hydra refused the config: add what is allowed
            for line in compose_hints(sys.argv[1:]):
                say(f"xbench: {line}")
        raise
    finally:
        redact_hydra_files()  # also when the first point never started
    if _FAILED_RUNS:  # multirun: every point ran; say which did not succeed
        say(f"xbench: {len(_FAILED_RUNS)} run(s) did not succeed: {', '.join(_FAILED_RUNS)}")
        raise SystemExit(1)


def entry() -> None:
    """The console script and `python -m xbench`: cli(), then out without the interpreter's teardown.

    Tearing down a process that imported torch (its ~360,000 objects, every module's dict) took 1.5-2.2 s
    after the record's line on this 2-core machine, on every run and every CLI call. What a normal exit does
    that matters is done here first: non-daemon threads joined, atexit handlers run (W&B, logging, pools),
    streams flushed; then os._exit with cli's status. An unexpected exception still exits the normal way,
    with its traceback."""
    code: int | str | None = 0
    try:
        cli()
    except SystemExit as e:
        code = e.code
    leave(code)


if __name__ == "__main__":
    entry()
