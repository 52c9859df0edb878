"""`bench.profile=torch|xla`: what the measured step does, recorded after the timed windows.

The profiled steps (`bench.profile_steps`, the same step on the same data) run after the last timed
window has closed and its figures were taken, so profiling never slows a measurement. Every rank runs
them (a data-parallel step's collectives must stay matched); each rank that knows the run folder
writes its own files under `<run>/profile/`, and the record names rank 0's (`record.artifacts`,
uploaded to W&B as a `profile` artifact).

- torch: torch.profiler over the steps (CPU, and CUDA kernels on a GPU). `torch/rank0.pt.trace.json`
  opens in chrome://tracing or Perfetto, and `tensorboard --logdir <run>/profile` shows it (the
  PyTorch profiler plugin reads `*.pt.trace.json`); `torch/rank0_ops.txt` is the top operators table.
- xla: the XLA metrics report after the steps (compilations, executions, transfers over the whole
  run: `xla/metrics_rank0.txt`) and XLA's dump of every graph compiled in the run (`xla/dump/`: HLO
  text before and after optimisation, per module). XLA reads its dump flag when its client starts, so
  `environment()` sets it before any rank starts; a process whose XLA client started earlier (an
  earlier XLA point of a sweep) dumps nothing, and the record says so.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from xbench import env_vars
from xbench.bench.meters.profiler import ProfilerMeter, profiled_window

DIR = "profile"


def _xla_dump(run_dir) -> Path:
    return Path(run_dir) / DIR / "xla" / "dump"


@contextlib.contextmanager
def environment(cfg, run_dir):
    """While the ranks run: XLA_FLAGS asks for the HLO dump (bench.profile=xla), inherited by launched
    ranks; the variable is restored afterwards (a sweep's next point must not dump)."""
    if cfg.bench.profile != "xla" or run_dir is None:
        yield
        return
    saved = os.environ.get("XLA_FLAGS")
    flags = f"--xla_dump_to={_xla_dump(run_dir)} --xla_dump_hlo_as_text"
    with env_vars.temporarily({"XLA_FLAGS": f"{saved} {flags}" if saved else flags}):
        yield


def capture(bench, p, run_dir, rank: int) -> tuple[dict[str, str], list[str]]:
    """Run the profiled steps of a prepared rank `p` (bench/worker.py) and write this rank's files (`bench`:
    the plan's bench section). Returns (artifacts: name -> path relative to the run folder, warnings)."""
    kind, steps, h = bench.profile, bench.profile_steps, p.hooks
    out = Path(run_dir) / DIR / kind if run_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if kind == "torch":
        return _torch(h, steps, p.work.runtime.device.type, out, rank, Path(run_dir) if run_dir else None)
    return _xla(h, steps, p.work.runtime, out, rank, run_dir)


def _steps(h, steps: int) -> None:
    h.sync()
    for _ in range(steps):
        h.step(*h.next_batch())
    h.sync()  # inside the profile: the device work of the last step is in the trace too


class _Trace(ProfilerMeter):
    """The profiled window's trace and its top operators table, written once every step of it ran."""

    def __init__(self, cuda: bool, steps: int, trace: Path, ops: Path, **options):
        super().__init__(cuda, steps, **options)
        self.trace, self.ops = trace, ops

    def figures_of(self, prof) -> dict:
        prof.export_chrome_trace(str(self.trace))
        sort = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
        self.ops.write_text(prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")
        return {}


def _torch(h, steps: int, device_type: str, out: Path | None, rank: int, run_dir: Path | None):
    if out is None:  # a rank whose record another process writes: run the steps, keep nothing
        _steps(h, steps)
        return {}, []
    trace, ops = out / f"rank{rank}.pt.trace.json", out / f"rank{rank}_ops.txt"
    cuda = device_type == "cuda"
    profiled_window(h, _Trace(cuda, steps, trace, ops, record_shapes=True))
    if not trace.exists():
        return {}, ["bench.profile=torch: torch.profiler could not start (another profiler is active?); the "
                    "profiled steps ran without it and wrote no trace"]
    return {
        "profile_trace": str(trace.relative_to(run_dir)),
        "profile_ops": str(ops.relative_to(run_dir)),
    }, []


def _xla(h, steps: int, runtime, out: Path | None, rank: int, run_dir):
    _steps(h, steps)
    if out is None:
        return {}, []
    report = out / f"metrics_rank{rank}.txt"
    report.write_text(runtime.metrics_report())
    artifacts = {"profile_xla_metrics": str(report.relative_to(run_dir))}
    dump = _xla_dump(run_dir)
    if dump.is_dir() and any(dump.iterdir()):
        artifacts["profile_hlo_dump"] = str(dump.relative_to(run_dir))
        return artifacts, []
    return artifacts, ["bench.profile=xla: XLA dumped no HLO (its client started before this run set "
                       "--xla_dump_to, e.g. an earlier XLA point of a sweep): run the point alone"]
