"""The measurement loop's rules, checked on real (small) CPU work."""

from __future__ import annotations

import time

import pytest
import torch

from xbench.bench import loop


class Probe:
    """A real workload (a matmul per step) that records when the loop synchronises and reads values."""

    def __init__(self, compiles_until=0, sleep_s=0.0):
        self.syncs, self.steps, self.compiles_until, self.sleep_s = [], 0, compiles_until, sleep_s
        self.w = torch.randn(64, 64)

    def step(self, x, y):
        self.steps += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return (x @ self.w).sum()

    def sync(self):
        self.syncs.append(self.steps)

    def compile_count(self):
        return min(self.steps, self.compiles_until)  # "compiles" on each of the first N steps

    def hooks(self, **kw):
        x = torch.randn(8, 64)
        return loop.Hooks(step=self.step, next_batch=lambda: (x, None), sync=self.sync,
                          compile_count=self.compile_count, read_losses=lambda ls: [float(v) for v in ls], **kw)


def test_timed_window_syncs_only_at_its_edges():
    p = Probe()
    w = loop.timed_window(p.hooks(), steps=25)
    assert p.syncs == [0, 25]  # once before the first step, once after the last
    assert w.steps == 25 and len(w.step_times_s) == 25 and len(w.losses) == 25
    assert w.step_time_source == "host"
    assert sum(w.step_times_s) == pytest.approx(w.wall_s, rel=0.2)


def test_warmup_lasts_until_compilation_stops():
    p = Probe(compiles_until=7)
    wu = loop.warmup(p.hooks(), min_steps=2, max_steps=50, stable_steps=3, cv_tol=10.0)
    assert wu.stable and wu.steps == 10  # compiles on steps 1..7, then 3 flat steps
    assert wu.compiles == 7


def test_warmup_hits_its_bound_and_says_so():
    p = Probe(compiles_until=1000)
    wu = loop.warmup(p.hooks(), min_steps=2, max_steps=6, stable_steps=3, cv_tol=10.0)
    assert not wu.stable and wu.steps == 6


def test_compilation_inside_the_window_is_counted():
    p = Probe(compiles_until=1000)
    w = loop.timed_window(p.hooks(), steps=5)
    assert w.compiles_during == 5


def test_throughput_grows_with_step_time_as_measured():
    """Host step times of a sleeping step are at least the sleep: the clock is real, not invented."""
    p = Probe(sleep_s=0.01)
    w = loop.timed_window(p.hooks(), steps=5)
    assert min(w.step_times_s) >= 0.0095 and w.wall_s >= 0.049


def test_stop_flag_interrupts_with_partial_figures():
    p = Probe()
    flag = loop.StopFlag()
    calls = []

    def on_step(phase, i):
        calls.append(i)
        if i == 3:
            flag.requested = True

    with pytest.raises(loop.StopRequested) as e:
        loop.timed_window(p.hooks(on_step=on_step, stop=flag), steps=10)
    assert e.value.partial["timed_steps"] == 4 and e.value.partial["phase"] == "timed"


def test_an_error_mid_window_keeps_the_steps_the_window_finished():
    """A collective whose peer stopped one step earlier (rule 10's unagreed stop, the race a 2-rank run under
    SIGTERM hits) raises inside step 5: the error carries the 4 steps done, their times and the window's
    wall time so far, which bench/windows.py hands the record as the lost rank's open window."""
    p = Probe(sleep_s=0.002)
    inner = p.step

    def step(x, y):
        if p.steps == 4:
            raise RuntimeError("Connection closed by peer")
        return inner(x, y)

    p.step = step
    with pytest.raises(RuntimeError) as e:
        loop.timed_window(p.hooks(), steps=10)
    part = e.value.xbench_open_window
    assert part["phase"] == "timed" and part["timed_steps"] == 4 and len(part["timed_step_times_s"]) == 4
    assert part["window_s"] == pytest.approx(sum(part["timed_step_times_s"])) and part["window_s"] >= 4 * 0.002


def test_cv():
    assert loop.cv([1.0]) == 0.0
    assert loop.cv([1.0, 3.0]) == pytest.approx(0.5)


def test_cpu_runtimes_keep_each_loss_as_a_float_and_other_devices_a_tensor():
    """On the CPU the step's loss is read at once (Runtime.keep_loss): a window of kept 4-byte tensors
    fragments the heap the step allocates from. Elsewhere a read would synchronise: the step is unchanged."""
    from xbench.runtimes.base import Runtime

    class Cfg:
        cudnn_benchmark = False

    def step(x, y):
        return (x * 2).sum().detach()

    cpu = Runtime(Cfg(), "cpu")
    kept = cpu.keep_loss(step)
    x = torch.arange(4.0)
    assert kept(x, None) == 12.0 and isinstance(kept(x, None), float)
    w = loop.timed_window(loop.Hooks(step=kept, next_batch=lambda: (x, None), sync=lambda: None,
                                     read_losses=cpu.read_losses), steps=5)
    assert w.losses == [12.0] * 5
    assert cpu.read_losses([torch.tensor(1.5), torch.tensor(2.5)]) == [1.5, 2.5]  # tensors still read
    assert Runtime(Cfg(), "meta").keep_loss(step) is step  # not the CPU: no read inside the window
