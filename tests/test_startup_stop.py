"""A stop signal during start-up (imports, compat, the plan: nothing measured yet) ends the run at once with its
record, instead of after start-up's remaining seconds; after start-up a signal asks the loop to stop after its
step, as before. Real signals to this process, the real envelope and store."""

import json
import os
import signal
import time

import pytest
from omegaconf import OmegaConf

from xbench.config import XBenchConfig
from xbench.envelope import SIGNALS, RunEnvelope

# serial: alone, never beside another test (a stop during start-up is bounded in seconds)
pytestmark = pytest.mark.serial


def _cfg(tmp_path) -> XBenchConfig:
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(XBenchConfig), {
        "model": {"name": "m"}, "data": {"name": "d"}, "platform": {"name": "p"}, "runtime": {"name": "eager"},
        "parallel": {"name": "single"}, "precision": {"name": "fp32"}, "logger": {"name": "none"},
        "store": {"root": str(tmp_path)}}))


@pytest.fixture
def handlers():
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    SIGNALS.uninstall()
    for s, h in kept.items():
        signal.signal(s, h)


def _record(tmp_path, run_id: str) -> dict:
    return json.loads((tmp_path / run_id / "record.json").read_text())


def test_a_signal_in_start_up_stops_it_at_once_and_the_record_says_start_up(tmp_path, handlers):
    worked = []
    with RunEnvelope(_cfg(tmp_path), {}, "r1") as env:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):  # start-up's remaining work (the imports, compat): 10 s if it ran to the end
            time.sleep(0.05)
            worked.append(1)
        env.check_stop("start-up")
    rec = _record(tmp_path, "r1")
    assert rec["status"] == "interrupted" and rec["reason"] == "SIGTERM during start-up"
    assert rec["measurements"]["phase"] == "start-up"
    assert len(worked) <= 1  # stopped at the next bytecode the handler ran at, not after start-up


def test_an_except_exception_in_start_up_code_does_not_swallow_the_stop(tmp_path, handlers):
    """The stop lands wherever the main thread is, inside library code: torch's imports catch `Exception` in many
    places, and one of them took the old StopAtOnce (an Exception) for a failed optional import and went on (a
    SIGTERM at a sweep's first point took 11-18 s under load). As KeyboardInterrupt, it passes through."""
    swallowed = []
    with RunEnvelope(_cfg(tmp_path), {}, "r4") as env:
        try:  # as a library's optional import: `try: import x / except Exception: x = None`
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Exception as e:
            swallowed.append(e)
        time.sleep(5)  # the rest of start-up: not reached
        env.check_stop("start-up")
    assert swallowed == []
    rec = _record(tmp_path, "r4")
    assert rec["status"] == "interrupted" and rec["reason"] == "SIGTERM during start-up"


def test_after_start_up_a_signal_asks_and_the_phase_finishes(tmp_path, handlers):
    with RunEnvelope(_cfg(tmp_path), {}, "r2") as env:
        env.check_stop("start-up")
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)  # the handler has run: it only set the flag
        assert env.stop.requested and env.stop.reason == "SIGHUP"
        env.record.measurements["throughput_samples_per_s"] = 3.0
        env.record.finish("ok")  # the phase that was running finishes; a loop would stop after its step
    rec = _record(tmp_path, "r2")
    assert rec["status"] == "ok" and rec["measurements"]["throughput_samples_per_s"] == 3.0


def test_before_the_record_a_signal_raises_the_handlers_own_stop_and_the_envelope_takes_over_asking(tmp_path, handlers):
    """The CLI's point (xbench/__main__.py) sets `at_once` before the run's envelope exists: the handler raises
    StopAtOnce there (nothing written yet). The envelope's first write clears it (a record and a lock are held)
    and sets it again once the record is written."""
    from xbench.envelope import StopAtOnce

    SIGNALS.install()
    SIGNALS.at_once = "start-up"
    with pytest.raises(StopAtOnce):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert SIGNALS.flag.requested and SIGNALS.at_once is None
    SIGNALS.uninstall()
    SIGNALS.install()  # a fresh flag: the next run
    SIGNALS.at_once = "start-up"
    with RunEnvelope(_cfg(tmp_path), {}, "r3") as env:
        assert SIGNALS.at_once == "start-up"  # set again at the end of __enter__, after the record's first write
        env.check_stop("start-up")
        assert SIGNALS.at_once is None
        env.record.finish("ok")
    assert _record(tmp_path, "r3")["status"] == "ok"
