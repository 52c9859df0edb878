"""The console as people read it: the bars' totals (warm-up closed at its real length, the timed bar sized
once the windows are), the summary in plain words and units, and no line printed twice."""

from __future__ import annotations

import io
import re
import sys

import pytest

from tests.conftest import run_cli
from xbench.sinks.console import Progress, scaled, seconds

BAR = re.compile(r"(warm-up \(until stable\)|timed steps):\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+)")


def _bars(stderr: str) -> dict[str, list[tuple[int, int, int]]]:
    """Every state each bar was drawn in: (percent, n, total); tqdm redraws with \\r."""
    out: dict[str, list] = {}
    for part in re.split(r"[\r\n]", stderr):
        m = BAR.search(part)
        if m:
            out.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def test_bars_close_at_their_real_length_and_never_pass_their_total(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = Progress(warmup_max=50, timed_total=None)
    for i in range(7):  # warm-up stable after 7 of at most 50 steps
        bar("warmup", i)
    bar("timed", -1, window_steps=10, windows=2)  # the windows are sized: 2 x 10 steps
    for _window in range(3):  # one window measured again (a stall): 30 steps in all
        for i in range(10):
            bar("timed", i)
    bar.close()
    drawn = _bars(err.getvalue())
    assert drawn["warm-up (until stable)"][-1] == (100, 7, 7)
    assert drawn["timed steps"][0][2] == 20 and drawn["timed steps"][-1] == (100, 30, 30)
    assert all(n <= total and pct <= 100 for pct, n, total in drawn["timed steps"])


def test_units_people_read():
    assert [seconds(v) for v in (0.00085, 0.02117, 2.415, 300.0, 14400.0)] == \
        ["850.0 us", "21.17 ms", "2.415 s", "5.00 min", "4.00 h"]
    assert scaled(3.846e9, "FLOP/s") == "3.846 GFLOP/s" and scaled(11_689_512, "") == "11.69 M"


@pytest.mark.slow
def test_real_run_console(store):
    """A real run with windows sized by time (the default kind) and W&B offline: the console as captured."""
    p = run_cli("model=mlp", "data=synthetic_mnist", "data.batch_size=16", "platform=cpu", "bench.min_window_s=0.2",
                "bench.repeats=2", "bench.warmup_max_steps=40", "bench.warmup_min_steps=3",
                "bench.warmup_stable_steps=2", "bench.warmup_cv_tol=10", "bench.isolation=shared",
                "logger.progress=true", store=store, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    drawn = _bars(p.stderr)
    warm, timed = drawn["warm-up (until stable)"], drawn["timed steps"]
    assert warm[-1][1] == warm[-1][2] and warm[-1][0] == 100  # closed at the length it ran
    assert all(n <= total and pct <= 100 for pct, n, total in timed)  # never past 100%, never a bare counter
    assert timed[-1][0] == 100 and timed[-1][1] == timed[-1][2]
    out = p.stdout
    assert re.search(r"throughput\s+[\d,.]+ samples/s \([\d,.]+ steps/s\)", out)
    assert re.search(r"step time \(median\)\s+[\d.]+ (ms|us|s)$", out, re.M)
    assert re.search(r"warm-up\s+\d+ steps in [\d.]+ (ms|s)$", out, re.M)
    assert re.search(r"waiting for data\s+[\d.]+% of the timed window", out)
    assert re.search(r"parameters\s+[\d.]+ k$", out, re.M)  # the MLP's 670 k
    assert re.search(r"FLOPs per sample\s+[\d.]+ MFLOP forward, [\d.]+ MFLOP training step", out)
    assert re.search(r"achieved\s+[\d.]+ GFLOP/s", out)
    assert " / s" not in out and "True" not in out and "TFLOP/s" not in out
    assert not re.search(r"\b0\.0000\d", out)  # no fraction with four leading zeros
    said = [line.strip() for line in (out + p.stderr).splitlines() if line.strip() and not BAR.search(line)]
    assert sum("W&B: offline" in line for line in said) == 1
    assert len(said) == len(set(said)), [line for line in said if said.count(line) > 1]
