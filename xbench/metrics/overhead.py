"""Compiled runtimes against the eager baseline: speed-up and break-even step count (pure Python).

A compiled runtime pays `compile_time_s` once and then saves (eager step - compiled step) every step,
so it has paid for itself after  compile_time_s / (t_eager - t_compiled)  steps. Steady step times are
window wall time over timed steps (correct for asynchronous runtimes, whose per-step host times are
not device times). A runtime that is not faster never pays back: break_even_steps_vs_eager is None.

This needs two records (one record holds one runtime), so it is not a `@derived` function: the
analysis layer pairs stored runs (xbench/analysis/overhead.py `versus_eager`); the math for one pair
is here, on plain dicts (a record's measurements, or a tidy row).
"""

from __future__ import annotations


def steady_step_s(m: dict) -> float | None:
    total, steps, reps = m.get("window_s_total"), m.get("timed_steps_per_window"), m.get("repeats")
    return total / (steps * reps) if total and steps and reps else None


def break_even(m: dict, eager: dict) -> dict:
    t_c, t_e = steady_step_s(m), steady_step_s(eager)
    if not t_c or not t_e:
        return {}
    out = {"speedup_vs_eager": t_e / t_c}
    compile_s = m.get("compile_time_s")
    if compile_s is not None:
        saving = t_e - t_c
        out["break_even_steps_vs_eager"] = compile_s / saving if saving > 0 else None
    return out
