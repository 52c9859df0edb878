"""A module's fresh processes, started together when its first test asks, each test then taking its own result.

Why: a CLI run here is mostly one busy thread (imports, composition, a model on bench.threads=1), so two at once
on the 2-core test machine take about the time of one. Only the jobs of the tests pytest selected start (`-k`
runs one test's processes, not the module's); a job's exception (a timeout, a failed assertion inside it) is
raised in the test that takes its result, and the module's teardown waits for every job it started.

    @pytest.fixture(scope="module")
    def runs(request, tmp_path_factory):
        with Jobs(request) as jobs:
            jobs.submit("test_a", run_cli, *FAST, store=tmp_path_factory.mktemp("a"))
            yield jobs

    def test_a(runs):
        p = runs["test_a"]  # waits for it
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest


class Jobs:
    def __init__(self, request: pytest.FixtureRequest, workers: int = 2):  # the test machine's 2 cores
        # The selected tests of the requesting module, by function name (a parametrized test's once).
        self._selected = {getattr(item, "originalname", item.name) for item in request.session.items
                          if item.module is request.module}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"jobs-{request.module.__name__}")
        self._futures: dict[str, Future] = {}

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, tests: tuple[str, ...] = (), **kwargs: Any) -> None:
        """Start `fn(*args, **kwargs)` if a test that needs it is selected: `tests`, or the test named `key`."""
        if key in self._futures:
            raise ValueError(f"job {key!r} submitted twice")
        if self._selected & set(tests or (key,)):
            self._futures[key] = self._pool.submit(fn, *args, **kwargs)

    def __getitem__(self, key: str) -> Any:
        if key not in self._futures:
            raise KeyError(f"job {key!r} was not started: name the tests that need it in submit(tests=...)")
        return self._futures[key].result()

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)
