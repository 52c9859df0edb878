"""A sweep's warm template: each isolated point's fresh process is forked from it (`bench.isolation`).

A spawned interpreter per point (launch/isolation.py) paid the whole start-up again at every point:
Python, torch, torchvision and xbench's rank wing imported anew, about 3.5-6 s a point on 2 cores (a
3-point sweep of a 5-step MLP took 28.6 s, each point reporting 6.5-8.3 s start-up). The template is
started once per sweep process (multiprocessing's forkserver, with `launch/warm.py` as its preload: the
imports and nothing else), and every point still runs in a process of its own, forked from it: its own
pid, memory, allocator, compile caches, contention probe and start-up figure. What the point runs is
what a spawned one runs (launch/inline._fresh_rank through child.wait: the same result, exceptions, stop
and exit status); it adopts the runner's environment as it is now (the template's is from its start)
and dies with the runner, not with the template.

The template is kept only while a fork of it is safe, checked once per template by a forked probe: one
Python thread, CUDA not initialised, neither JAX nor torch_xla imported. Where it cannot be (runtime=
torchax or an XLA runtime: JAX's and PJRT's threads; bench.cpu_capability, which torch reads when it
starts; a platform without fork; bench.isolation=spawn) a point is spawned as before, and the sweep
says why once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

from xbench import env_vars, parallel, runtimes
from xbench.launch import child

WARM = "xbench.launch.warm"
TEMPLATE_ENV = "XBENCH_TEMPLATE_OF"  # the runner's pid, in the template's environment as it starts
FORK = "template"  # launch.run's `fresh` for a point forked from the template
_SAID: set[str] = set()  # reasons already said in this process
_CHECKED: dict[int, str | None] = {}  # template pid -> why it is not used (None: clean)
_LAST: list[tuple[int | None, str | None]] = []  # the last check's answer, reused while its template lives


def say_once(why: str) -> None:
    if why not in _SAID:
        _SAID.add(why)
        print(f"xbench: sweep points are spawned, not forked from a warm template: {why}", file=sys.stderr,
              flush=True)


def refusal(cfg) -> str | None:
    """Why this run's isolated process cannot be forked from the template (None: it can). `cfg`: the root
    config or the plan (both carry the bench, runtime and parallel sections)."""
    if cfg.bench.isolation == "spawn":
        return "bench.isolation=spawn"
    if not sys.platform.startswith("linux") or "forkserver" not in multiprocessing.get_all_start_methods():
        return f"forking a process that imported torch is not safe on {sys.platform}"
    name = cfg.runtime.name
    if name == "torchax":
        return "runtime=torchax imports JAX, whose threads make a fork unsafe"
    if name in runtimes.RUNTIMES and "torch_xla" in runtimes.requires(name):
        return f"runtime={name} imports torch_xla, whose runtime threads make a fork unsafe"
    if cfg.bench.cpu_capability:
        return "bench.cpu_capability is read by torch when it starts (ATEN_CPU_CAPABILITY)"
    return None


def start_early(cfg) -> None:
    """Start the template now, without waiting for its imports (they go on beside the runner's work for the
    point): the sweeper calls it as an isolated point's config is composed, if the point can be forked."""
    with contextlib.suppress(Exception):  # only a head start: the launch says what went wrong, if anything
        if parallel.get(cfg.parallel.name).launcher == "inline" and refusal(cfg) is None:
            _context()


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([WARM])  # before it starts (it starts once per process)
    # Started here, not lazily by a pool, so that it knows it is this runner's template (launch/warm.py's
    # quick exit): the variable is set only while it starts, and a point takes the runner's environment.
    with env_vars.temporarily({TEMPLATE_ENV: str(os.getpid())}):
        multiprocessing.forkserver.ensure_running()
    return ctx


def adopt(runner_pid: int, environ: dict) -> None:
    """First thing in a process forked from the template: stop signals back to their defaults (a held one
    ends it now, as it would a spawned process still starting), the runner's environment as it is now
    (XBENCH_POINT, the free cores, what the launch set), fresh seeds, and death with the runner."""
    from xbench.launch import warm

    for sig in warm.STOP_SIGNALS:  # as a fresh interpreter has them: SIGINT raises KeyboardInterrupt
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    if warm._HELD:
        os.kill(os.getpid(), warm._HELD[0])
    os.environ.clear()
    os.environ.update(environ)
    if "numpy" in sys.modules:  # numpy's global generator would be the template's in every point
        sys.modules["numpy"].random.seed()
    child.die_with_parent(runner_pid)


def _pool(ctx) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=adopt,
                               initargs=(os.getpid(), dict(os.environ)))


def _facts() -> dict:
    """warm.facts, asked in the forked probe: the runner never imports warm.py itself (its imports are the
    template's business)."""
    from xbench.launch import warm

    return warm.facts()


def check() -> tuple[int | None, str | None]:
    """(the template's pid, why it is not used): started if it is not running, probed once per template."""
    import psutil


    if _LAST and _LAST[0][0] is not None:
        try:
            if psutil.Process(_LAST[0][0]).status() != psutil.STATUS_ZOMBIE:
                return _LAST[0]
        except psutil.Error:
            pass
    try:
        with _pool(_context()) as pool:
            facts = pool.submit(_facts).result()
    except Exception as e:  # the template failed to start or to fork: the points are spawned
        return None, f"the template did not start ({type(e).__name__}: {e})"
    pid = facts["parent_pid"]
    if pid not in _CHECKED:
        problems = []
        if not facts["forked"]:
            problems.append(f"it did not import {WARM}")
        if facts["python_threads"] != 1:
            problems.append(f"it runs {facts['python_threads']} Python threads")
        if facts["cuda_initialized"]:
            problems.append("it initialised CUDA")
        if facts["imported"]:
            problems.append(f"it imported {', '.join(facts['imported'])}")
        _CHECKED[pid] = f"the template is not clean: {'; '.join(problems)}" if problems else None
    _LAST[:] = [(pid, _CHECKED[pid])]
    return _LAST[0]


def decide(cfg) -> dict:
    """How this isolated run's process starts, for the record's env.point: `process` is "template fork"
    (with `template_pid`) or "spawn" (with `spawn_reason`, said once per sweep); a strategy whose launcher
    is not inline starts its own processes ("<name> launcher")."""
    try:
        launcher = parallel.get(cfg.parallel.name).launcher
    except ValueError:  # an unknown strategy: compat says so, and nothing is launched
        return {}
    if launcher != "inline":
        return {"process": f"{launcher} launcher"}
    why = refusal(cfg)
    pid = None
    if why is None:
        pid, why = check()
    if why is not None:
        say_once(why)
        return {"process": "spawn", "spawn_reason": why}
    return {"process": "template fork", "template_pid": pid}


def usable(cfg) -> bool:
    """Whether the run's isolated process is forked from the template (the decision `decide` recorded)."""
    return decide(cfg)["process"] == "template fork"


def in_template(fn, args: tuple, stop, what: str):
    """fn(*args) in a process forked from the template, waited for as child.in_fresh_process does."""
    with _pool(_context()) as pool:
        return child.wait(pool.submit(fn, *args), stop, what)


def for_ranks(plan) -> str | None:
    """Why torchrun's ranks of this run are spawned rather than forked from the template (None: forked). The
    same rules as a point's (`refusal`, and the template clean): each spawned rank imported torch and the
    rank wing anew, ~2.5 s of a 2-rank MLP run's 8.6-9.0 s on 2 cores."""
    why = refusal(plan)
    if why is None:
        why = check()[1]
    return why


def adopt_rank(runner_pid: int, environ: dict) -> None:
    """`adopt`, first thing in a rank the elastic agent forked from the template: the runner's environment as
    it launched, plus what the agent set for this rank (RANK, MASTER_PORT, ...: the variables that differ
    from the template's own)."""
    from xbench.launch import warm

    agent = {k: v for k, v in os.environ.items() if warm.START_ENV.get(k) != v}
    adopt(runner_pid, {**environ, **agent})
