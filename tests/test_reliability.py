"""Reliability and safety: secrets, bad input, out-of-memory classification, the memory guard, and the
fault drill (every fault against the real CLI; see scripts/fault_drill.py for what each row checks)."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import CONF, REPO, drill_test
from xbench import compat
from xbench.bench.meters.memory import host_memory_guard, memory_figures
from xbench.config import register_configs
from xbench.hints import compose_hints, hint_for
from xbench.platforms.detect import HostFacts
from xbench.records.record import RunRecord, is_oom
from xbench.records.redact import (
    REDACTED,
    RedactingStream,
    argv_secret_values,
    is_secret_key,
    redact,
    redact_argv,
)
from xbench.records.store import write_record

CPU_HOST = HostFacts(cuda_devices=[], torch_xla=True, logical_cores=2, torch_version="2.9.0")


def _cfg(*overrides):
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="config", overrides=list(overrides)))


# ---- secrets ---------------------------------------------------------------------------------------

def test_secret_keys_are_redacted_but_look_alikes_are_kept():
    assert all(is_secret_key(k) for k in ("api_key", "MY_API_KEY", "apikey", "hf_token", "db_password",
                                          "+model.options.secret", "aws_secret_access_key"))
    assert not any(is_secret_key(k) for k in ("max_tokens", "exclude_keys", "tokenizer", "batch_size", "monkeys"))
    out = redact({"a": {"api_key": "s3cr3t-value", "max_tokens": 5, "empty_token": None},
                  "overrides": ["+hf_token=abc", "bench.steps=1,+db_password=xyz,data.x=2"]}, values=[])
    assert out["a"] == {"api_key": REDACTED, "max_tokens": 5, "empty_token": None}
    assert out["overrides"] == [f"+hf_token={REDACTED}", f"bench.steps=1,+db_password={REDACTED},data.x=2"]


def test_environment_secret_values_are_redacted_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # short: not treated as a secret value
    out = redact({"entity": "team-tok-0123456789", "flag": "false"})
    assert out == {"entity": f"team-{REDACTED}", "flag": "false"}
    assert redact_argv(["xbench", "logger.wandb.entity=tok-0123456789", "+api_key=k"]) == \
        ["xbench", f"logger.wandb.entity={REDACTED}", f"+api_key={REDACTED}"]


def test_store_never_writes_an_environment_secret(monkeypatch, tmp_path):
    monkeypatch.setenv("DB_PASSWORD", "pw-9876543210")
    rec = RunRecord(run_id="r1", status="failed", reason="could not connect with pw-9876543210")
    text = write_record(tmp_path, rec).read_text()
    assert "pw-9876543210" not in text and json.loads(text)["reason"] == f"could not connect with {REDACTED}"


def test_console_stream_redacts_command_line_and_environment_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-abcdefghij")
    buf = io.StringIO()
    s = RedactingStream(buf, argv_secret_values(["x", "+db_password=hunter22", "data.batch_size=8"]))
    s.write("overrides: +db_password=hunter22 and hf-abcdefghij, batch 8\n")
    assert buf.getvalue() == f"overrides: +db_password={REDACTED} and {REDACTED}, batch 8\n"
    assert s.getvalue() == buf.getvalue()  # everything else is delegated


def test_environment_capture_is_an_allow_list(monkeypatch):
    from xbench.records.env import safe_environ

    monkeypatch.setenv("MY_API_KEY", "k-123456789")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    env = safe_environ()
    assert env.get("OMP_NUM_THREADS") == "2" and "MY_API_KEY" not in env and "SOMETHING_ELSE" not in env


# ---- bad input -------------------------------------------------------------------------------------

def test_hints_name_the_key_and_what_is_allowed():
    h = hint_for("data.batchsize=3")
    assert "did you mean 'data.batch_size'" in h and "image_size" in h
    assert hint_for("data.batch_size=abc") == "data.batch_size takes a whole number, got 'abc'"
    assert "keys of the top level" in hint_for("nosuch=1")
    assert hint_for("bench.warmup_cv_tol=x").endswith("takes a number, got 'x'")
    # fine, or Hydra's business: group choices, sweeps, appends, free-form options, hydra's own keys
    assert compose_hints(["model=nosuch", "data.batch_size=8,16", "+foo=1", "model.options.width=8",
                          "hydra.verbose=true", "-m", "bench.threads=null"]) == []


def test_impossible_combinations_are_refused_before_device_work(tmp_path):
    no_xla = HostFacts(cuda_devices=[], torch_xla=False, logical_cores=2, torch_version="2.9.0")
    reasons = compat.check(_cfg("runtime=xla"), no_xla)
    assert any("needs torch-xla, which is not installed" in r for r in reasons)
    # with torch-xla present that reason goes (the runtime itself may be registered on another branch)
    assert not any("needs torch-xla" in r for r in compat.check(_cfg("runtime=xla"), CPU_HOST))
    reasons = compat.check(_cfg("precision=amp_fp16", "platform=cpu"), CPU_HOST)
    assert reasons == ["precision amp_fp16 (fp16 autocast with a gradient scaler) needs a CUDA GPU; this run is "
                       "on cpu. Use amp_bf16 or bf16 there"]
    missing = tmp_path / "nope"
    assert any(f"data.path='{missing}' does not exist" in r
               for r in compat.check(_cfg(f"data.path={missing}"), CPU_HOST))
    assert not compat.check(_cfg(f"data.path={tmp_path}"), CPU_HOST)
    assert any("bench.mode='nosuch' is not available; allowed: throughput, train_to_target, find_max_batch" in r
               for r in compat.check(_cfg("bench.mode=nosuch"), CPU_HOST))


# ---- out of memory ---------------------------------------------------------------------------------

def test_out_of_memory_errors_are_recognised():
    import torch

    assert is_oom(MemoryError())
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:124] DefaultCPUAllocator: can't allocate memory"))
    assert is_oom(RuntimeError("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory"))
    assert not is_oom(RuntimeError("injected fault at step 3"))


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_cpu_allocation_failure_under_an_address_space_cap_is_an_oom():
    # A child process (never this one) with a 7 GiB cap asks torch for 16 GiB: it must raise, not die.
    code = ("import resource, torch\n"
            "resource.setrlimit(resource.RLIMIT_AS, (7 << 30, 7 << 30))\n"
            "from xbench.records.record import is_oom\n"
            "try:\n    torch.empty(4 << 30)\nexcept Exception as e:\n    print('OOM' if is_oom(e) else repr(e))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.strip() == "OOM", p.stdout + p.stderr[-2000:]


def test_memory_figures_and_host_guard_restores_the_limit():
    m = memory_figures()
    assert m["host_rss_gib"] > 0 and m["host_peak_rss_gib"] >= m["host_rss_gib"] * 0.5
    assert m["host_total_gib"] >= m["host_available_gib"] > 0
    before = resource.getrlimit(resource.RLIMIT_AS)
    with host_memory_guard(0.5) as cap:
        assert resource.getrlimit(resource.RLIMIT_AS)[0] == cap < 2**62
    assert resource.getrlimit(resource.RLIMIT_AS) == before


# ---- the drill: every fault against the real CLI ---------------------------------------------------

@drill_test(short=True)
def test_fault_drill_short_every_row_as_expected(drill):
    """The --short rows, from the session's drill (scripts/fault_drill.sh --short, with the cases other tests
    read: tests/conftest.py::drill); its exit status is 0 exactly when no row is a mismatch."""
    rows = [r for r in drill.rows if r["short"]]
    bad = [r for r in rows if not r["ok"]]
    assert not bad, f"{bad}\n{drill.console[-4000:]}"
    assert drill.returncode == (1 if any(r["verdict"] == "MISMATCH" for r in drill.rows) else 0)
    expected = {r["expected"] for r in rows}
    assert {"rejected", "failed", "oom", "interrupted", "diverged", "ok"} <= expected
    assert len(rows) >= 15


def test_hint_for_pins_every_branch():
    # added forms: a group or package is Hydra's; an unknown added key is named, a known one passes
    assert hint_for("+experiment=x", added=True) is None and hint_for("+a/b=1", added=True) is None
    assert hint_for("+foo@bar=1", added=True) is None
    assert "keys of the top level" in hint_for("++nosuch=1", added=True)
    assert hint_for("+bench.threads=2", added=True) is None and hint_for("+bench.threads=2") is None
    assert hint_for("~bench.threads") is None and hint_for("hydra.run.dir=x") is None
    # a value has no sub-keys; a free-form value takes any; a section is a group choice; sweeps are Hydra's
    assert hint_for("data.batch_size.x=1") == "'data.batch_size' is a value, it has no sub-key 'x'"
    assert hint_for("model.options.width=8") is None and hint_for("bench=x") is None
    assert hint_for("data.batch_size=1,x") is None and hint_for("data.batch_size=8") is None
    assert "keys of data:" in hint_for("data.nosuch=1")
