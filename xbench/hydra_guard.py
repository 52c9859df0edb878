"""Hydra's own files and folders, kept bounded, secret-free and out of the way (a Hydra callback).

Wired in conf/config.yaml as `hydra.callbacks.guard`; it runs before the sweeper
(hydra_plugins/xbench_sweeper, which checks that the points are distinct) is built:

- **A sweep too big is refused before anything is composed**: the points are counted from the override
  grammar alone (the product of each swept key's choices, the config's `hydra.sweeper.params` first, the
  command line winning on the same key, as Hydra's basic sweeper does); more than `sweep_max_points`
  exits 2 with the count and the setting to raise.
- **A stop signal while the sweep is being prepared exits at once** (130): until the first point starts,
  nothing has been measured, so there is nothing to save and no reason to wait for composition.
- **Hydra's basic sweeper is bounded like xbench's**: `hydra/sweeper=basic` composes every point of a batch
  before it runs one, and its batch is the whole sweep unless `hydra.sweeper.max_batch_size` is set: on the
  local launcher it is set to 1 (each point composed just before it runs, as xbench's sweeper does), said
  once.
- **No plain-text sweep file**: the sweeper writes `multirun.yaml` (the whole config and the command line)
  before the first point. xbench's sweeper (hydra_plugins/xbench_sweeper, the default) writes it through
  `save_sweep_file`; for Hydra's basic sweeper (`hydra/sweeper=basic`) its `OmegaConf.save` is replaced,
  for that module only, by one that redacts first. Either way the file is born redacted
  (xbench/records/redact.py) and a SIGKILL at any moment leaves no secret on disk.
- **Hydra's per-run files too** (`hydra.output_subdir=.hydra` brings back `config.yaml`, `hydra.yaml` and
  `overrides.yaml`: the config, Hydra's node and the command line): Hydra's writer of them is replaced, in
  every process that builds this callback, by one that redacts first and writes atomically, never through a
  link.
- **A store that cannot hold Hydra's folder** (read-only, full, a file in the way) is exit 74 with the
  folder and the reason, before Hydra's own traceback; and Hydra's per-run and per-point folders, empty
  since xbench keeps no Hydra files (`hydra.output_subdir: null`), are removed when the process ends.

No torch import. The callback never imports the run path: it runs before any point composes.

**Hydra's internals are touched here and nowhere else in xbench** (tests/test_hydra_internals.py walks every
module's imports). Each private thing, and why (Hydra 1.3; each is left as Hydra has it if it changed shape):

- `hydra._internal.config_loader_impl.ConfigLoaderImpl.get_group_options`, wrapped (`install_listing`, by the
  CLI before Hydra starts): a question with no config name and no overrides (`--help`'s listing, completion, a
  `glob()` sweep) goes to the loader's repository itself. Hydra answered each through a fresh
  `CachingConfigRepository`, a deep copy of the whole repository (ConfigStore's structured configs included)
  that such a question never changes: `xbench --help` asked 103 of them for 10 groups and 150 options, 620,000
  deepcopy calls and ~1 s of its ~1.5 s.
- `hydra._internal.hydra.Hydra.get_mode`, wrapped (`install_mode_shortcut`, by the CLI before Hydra starts):
  Hydra composes the whole config once only to read `hydra.mode` (then again for the run), 0.15 s of every
  command's start-up. Where the command line and the option files it names cannot set it (`_mode_unset`), the
  answer is Hydra's default, null, without composing; otherwise Hydra's own get_mode answers.
- `hydra.core.utils._save_config`, replaced (`redact_run_files_at_write`): Hydra's writer of the per-run files
  (`hydra.output_subdir`: config.yaml, hydra.yaml, overrides.yaml) has no hook; the replacement redacts first
  and writes atomically, never through a link.
- `hydra._internal.core_plugins.basic_sweeper.OmegaConf`, the module's name for OmegaConf, replaced by a shim
  whose `save` redacts first (`redact_sweep_file_at_write`): Hydra's basic sweeper (`hydra/sweeper=basic`)
  writes multirun.yaml through `OmegaConf.save` with no hook; patching OmegaConf itself would change every
  caller's.
- `hydra._internal.core_plugins.basic_sweeper.BasicSweeper` and `basic_launcher.BasicLauncher`, named by their
  `_target_` paths (`bound_basic_sweeper`: Hydra's basic sweeper on the local launcher composes the whole
  sweep before a point, so it gets one point per batch), and the launcher's class and logger for xbench's
  sweeper (`is_local_launcher`: points run in this process one at a time; `quiet_local_launches`: its two log
  lines per launch, said once by the sweeper's `point i/N`); `hydra.core.utils.JobReturn._return_value`
  (`job_raised`): the exception of a point the sweeper did not run, without `return_value`'s line on stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import re
import signal
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import Container, DictConfig, OmegaConf, open_dict

EXIT_STORE = 74  # the store could not take what the run writes (sysexits EX_IOERR, as the record's fallback)


def say(text: str) -> None:
    with contextlib.suppress(Exception):
        print(f"xbench: {text}", file=sys.stderr, flush=True)


def sweep_size(params: dict | None, overrides: list[str]) -> int:
    """How many points Hydra's basic sweeper would make of `params` (hydra.sweeper.params) and the command
    line's `overrides`, counted without building or composing any of them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (params or {}).items()] + list(overrides)
    choices: dict[str, int] = {}
    for o in OverridesParser.create().parse_overrides(args):
        key = o.get_key_element()
        if o.is_sweep_override() and o.is_discrete_sweep():
            choices[key] = choice_count(o)
        else:
            choices[key] = 1  # a fixed value replaces an earlier sweep of the same key
    return math.prod(choices.values()) if choices else 1


def choice_count(override) -> int:
    """How many values a discrete sweep lists, without listing them: `range(0,1000000000)` is a billion from
    its bounds (iterating it took minutes before the count could refuse it); a list or `choice()` by length;
    a glob (`model=glob(*)`, a group's options) by listing them."""
    from decimal import Decimal

    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = override.value()
    if isinstance(value, RangeSweep):  # shuffled or sorted too: the same values
        start, stop, step = value.start, value.stop, value.step
        if all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stop, step)):
            return len(range(start, stop, step))  # a step of 0: range's own ValueError, as Hydra raises
        start, stop, step = (Decimal(x) for x in (start, stop, step))  # Hydra's FloatRange counts in Decimal
        return max(0, math.ceil((stop - start) / step)) if step else 0
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    if isinstance(value, list):
        return len(value)
    return sum(1 for _ in override.sweep_string_iterator())


def _redacted(config) -> DictConfig:
    from xbench.records.redact import redact

    tree = OmegaConf.to_container(config, resolve=False) if isinstance(config, Container) else config
    return OmegaConf.create(redact(tree))


def save_sweep_file(config: DictConfig, path: Path) -> None:
    """multirun.yaml as xbench's sweeper writes it (hydra_plugins/xbench_sweeper): redacted first, then
    atomically and never through a link (records/safe_io.py)."""
    from xbench.records.safe_io import atomic_write

    atomic_write(path, OmegaConf.to_yaml(_redacted(config)), fsync=False)


def _redacting_save():
    """OmegaConf.save, redacted first: what Hydra's basic sweeper (hydra/sweeper=basic) writes as
    multirun.yaml."""

    def save(config, f, resolve: bool = False) -> None:
        OmegaConf.save(_redacted(config), f, resolve=resolve)

    class RedactingOmegaConf:
        def __getattr__(self, name):
            return getattr(OmegaConf, name)

    shim = RedactingOmegaConf()
    shim.save = save
    return shim


def _redacting_save_config(cfg, filename: str, output_dir: Path) -> None:
    """hydra.core.utils._save_config (config.yaml, hydra.yaml, overrides.yaml), redacted first, written
    atomically and never through a planted link."""
    from xbench.records.safe_io import atomic_write

    Path(output_dir).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(output_dir) / filename, OmegaConf.to_yaml(_redacted(cfg)), fsync=False)


# ---------- Hydra's internals (the module's docstring says what each is and why) ----------

_LISTING_MARK = "_xbench_listing"


def install_listing() -> None:
    """Route Hydra's plain option listings to its repository (idempotent; Hydra's internals as they were if
    they changed shape)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.object_type import ObjectType
    except ImportError:  # another Hydra: its own listing
        return
    original = ConfigLoaderImpl.get_group_options
    if getattr(original, _LISTING_MARK, False):
        return

    def get_group_options(self, group_name: str, results_filter=ObjectType.CONFIG, config_name=None,
                          overrides=None):
        repository = getattr(self, "repository", None)
        if config_name is None and not overrides and repository is not None:
            return repository.get_group_options(group_name, results_filter)
        return original(self, group_name, results_filter, config_name, overrides)

    setattr(get_group_options, _LISTING_MARK, True)
    get_group_options.__doc__ = original.__doc__
    ConfigLoaderImpl.get_group_options = get_group_options


_MODE_MARK = "_xbench_mode"


def install_mode_shortcut() -> None:
    """Answer Hydra's `get_mode` without composing when the answer is surely Hydra's default (idempotent;
    Hydra's own get_mode where its internals changed shape)."""
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:  # another Hydra: its own
        return
    original = Hydra.get_mode
    if getattr(original, _MODE_MARK, False):
        return

    def get_mode(self, config_name, overrides):
        if config_name == "config" and _mode_unset(overrides, getattr(self, "config_loader", None)):
            return None  # what Hydra's composition would have read: hydra.mode is null
        return original(self, config_name, overrides)

    setattr(get_mode, _MODE_MARK, True)
    get_mode.__doc__, get_mode.__wrapped__ = original.__doc__, original
    Hydra.get_mode = get_mode


def _mode_unset(overrides: list[str], loader) -> bool:
    """Whether `hydra.mode` is surely null in the config these overrides compose, read from the command line
    and the option files it names, without composing. Only a `hydra:` node sets it, so: no override of a
    hydra key or group, each group override names one of xbench's option files, and none of them, nor the
    options their defaults name (`[override] /group: option` only), nor a conf/local file (the primary
    config takes it when present) mentions hydra; and no config folder was added (--config-dir).
    conf/config.yaml and its defaults leave it null (tests/test_startup.py checks that, and this answer
    against Hydra's for every experiment)."""
    from xbench.config import config_dir

    sources = loader.repository.get_sources() if hasattr(loader, "repository") else None
    if sources is None or any(getattr(s, "provider", None) == "command-line" for s in sources):
        return False
    conf = Path(config_dir())
    named = list(conf.glob("local/*.yaml"))
    for text in overrides:
        key, eq, value = text.partition("=")
        key = key.lstrip("+~")
        if not eq or not key or key.startswith("hydra") or "@" in key:
            return False
        if (conf / key).is_dir():  # a group: its option file, one value (a sweep's list is composed by Hydra)
            if not value or "," in value or "(" in value:
                return False
            named.append(conf / key / f"{value}.yaml")
    try:
        return _no_hydra_node(named, conf)
    except OSError:
        return False


# A defaults entry naming another group's option: `- override /model: mlp`, `- /workload: mlp_mnist`.
_NAMED_OPTION = re.compile(rb"-\s*(?:override\s+)?/([\w/]+)\s*:\s*([\w.-]+)\s*(?:#.*)?")
_NOT_FOLLOWED = (b"experiment", b"hydra", b"local")


def _no_hydra_node(files: list[Path], conf: Path, depth: int = 0) -> bool:
    """None of these option files, nor the options their defaults name, mentions hydra (False when unsure)."""
    for f in files:
        if not f.is_file() or depth > 4:
            return False
        text = f.read_bytes()
        if b"hydra" in text:
            return False
        if b"defaults" in text:
            more = _defaults_named(text, conf)
            if more is None or not _no_hydra_node(more, conf, depth + 1):
                return False
    return True


def _defaults_named(text: bytes, conf: Path) -> list[Path] | None:
    """The option files a block-style `defaults:` list names; None for any other entry or form."""
    lines = text.splitlines()
    try:
        first = next(i for i, line in enumerate(lines) if line.rstrip() == b"defaults:")
    except StopIteration:
        return None  # `defaults: [...]` or the word elsewhere: not read here
    out = []
    for line in lines[first + 1:]:
        entry = line.strip()
        if not entry or entry.startswith(b"#"):
            continue
        if not entry.startswith(b"-"):
            break  # the next key: the list has ended
        m = _NAMED_OPTION.fullmatch(entry)
        if m is None or m[1].split(b"/")[0] in _NOT_FOLLOWED:
            return None
        out.append(conf / m[1].decode() / f"{m[2].decode()}.yaml")
    return out


def redact_run_files_at_write() -> None:
    """From now on, Hydra writes its per-run files (hydra.output_subdir) redacted (idempotent)."""
    from hydra.core import utils

    if utils._save_config is not _redacting_save_config:
        utils._save_config = _redacting_save_config


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def is_local_launcher(launcher) -> bool:
    """Hydra's basic launcher: the points run in this process, one after another."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    return isinstance(launcher, BasicLauncher)


def job_raised(ret) -> BaseException | None:
    """What a failed job raised (None: it did not fail), read from `JobReturn._return_value`: its public
    `return_value` re-raises it after writing `Error executing job with overrides` to stderr."""
    from hydra.core.utils import JobStatus

    return ret._return_value if ret.status == JobStatus.FAILED else None


@contextlib.contextmanager
def quiet_local_launches():
    """Hydra's basic launcher logs `Launching 1 jobs locally` and `#i : <every override>` per launch: quiet
    while inside (xbench's sweeper says `point i/N` once, with the count)."""
    import logging

    from hydra._internal.core_plugins import basic_launcher

    class _AboveInfo(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.levelno > logging.INFO

    quiet, log = _AboveInfo(), logging.getLogger(basic_launcher.__name__)
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def bound_basic_sweeper(config: DictConfig) -> bool:
    """hydra/sweeper=basic on the local launcher with no max_batch_size (the whole sweep composed before its
    first point): one point per batch. True when it was bounded here."""
    sweeper, launcher = config.hydra.sweeper, config.hydra.get("launcher") or {}
    if sweeper.get("_target_") != BASIC_SWEEPER or launcher.get("_target_") != BASIC_LAUNCHER \
            or sweeper.get("max_batch_size") is not None:
        return False
    with open_dict(sweeper):
        sweeper.max_batch_size = 1
    return True


def redact_sweep_file_at_write() -> None:
    """From now on, Hydra's basic sweeper writes multirun.yaml redacted (idempotent)."""
    from hydra._internal.core_plugins import basic_sweeper

    if basic_sweeper.OmegaConf is OmegaConf:
        basic_sweeper.OmegaConf = _redacting_save()


# ---------- Hydra's folders, the stop signals while preparing, the callback ----------

def make_folder(folder: str, what: str) -> bool:
    """Create Hydra's folder; exit 74 with the reason when the store cannot hold it. True if it was
    created."""
    path = Path(folder)
    existed = path.is_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        say(f"cannot create {what} {path}: {e.strerror or e} (is store.root writable, with space left?); "
            "nothing was run")
        raise SystemExit(EXIT_STORE) from None
    return not existed


def remove_empty(folder: Path, below: Path | None = None) -> None:
    """Remove `folder`'s empty subfolders and `folder` itself when empty; then its empty parents up to
    (not including) `below`. Nothing that holds a file is touched."""
    with contextlib.suppress(OSError):
        for sub in sorted(folder.iterdir(), reverse=True):
            if sub.is_dir() and not sub.is_symlink():
                with contextlib.suppress(OSError):
                    sub.rmdir()
    path = folder
    while below is None or path != below:
        try:
            path.rmdir()
        except OSError:
            return
        if below is None or path.parent == path:
            return
        path = path.parent


class _PreparingSignals:
    """Stop signals exit at once (130) while the sweep is being prepared; the run's handlers come back at
    the first point."""

    def __init__(self):
        self.previous: dict = {}

    def install(self) -> None:
        from xbench.rank import STOP_SIGNALS

        if threading_main():
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._exit)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    @staticmethod
    def _exit(signum, frame):
        say(
            f"{signal.Signals(signum).name} received before this process started a point of the sweep; "
            "exited at once"
        )
        raise SystemExit(130)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class HydraGuard(Callback):
    """The Hydra callback (see the module's docstring)."""

    def __init__(self):
        self.preparing = _PreparingSignals()
        redact_run_files_at_write()  # here: every process that runs a job builds its callbacks first

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        run_dir = Path(str(config.hydra.run.dir))
        if make_folder(str(run_dir), "Hydra's run folder (hydra.run.dir)"):
            store = Path(str(config.store.root))
            atexit.register(remove_empty, run_dir, store if store in run_dir.parents else run_dir.parent)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        redact_sweep_file_at_write()
        self.preparing.install()
        overrides = [o for o in config.hydra.overrides.task if not o.lstrip("+~").startswith("hydra")]
        params = config.hydra.sweeper.get("params")
        params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else {}
        try:
            n = sweep_size(params, overrides)
        # range(0,3,0), range('a','b'): one line, nothing composed or run
        except (ValueError, TypeError) as e:
            self.preparing.restore()
            say(f"this sweep cannot be counted: {e}; nothing was composed or run "
                "(https://hydra.cc/docs/advanced/override_grammar/extended)")
            raise SystemExit(2) from None
        limit = int(config.get("sweep_max_points", 1000))
        if n > limit:
            self.preparing.restore()
            say(
                f"this sweep has {n:,} points, more than sweep_max_points={limit:,}; nothing was composed or "
                f"run (to run it, add sweep_max_points={n})"
            )
            raise SystemExit(2)
        say(f"sweep: {n:,} point{'s' if n != 1 else ''}")
        if n > 1 and bound_basic_sweeper(config):
            say(
                "hydra/sweeper=basic composes a whole batch before it runs a point; each point is its own "
                "batch here (hydra.sweeper.max_batch_size=1): composed just before it runs"
            )
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if make_folder(str(sweep_dir), "Hydra's sweep folder (hydra.sweep.dir)"):
            atexit.register(remove_empty, sweep_dir, sweep_dir)  # the per-point folders, empty

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        self.preparing.restore()  # a point runs: a stop now saves what it measured (xbench/envelope.py)

