"""bench.profile: a torch.profiler trace (Chrome trace / TensorBoard) or the XLA metrics report and HLO
dump of steps run after the timed windows; the record names the files and W&B uploads them."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from omegaconf import OmegaConf

from tests.conftest import FAST, cli_env, records, run_cli
from xbench.api import compose
from xbench.compat import check
from xbench.platforms.detect import host_facts
from xbench.records.record import RunRecord
from xbench.records.wandb_files import read_offline_run
from xbench.sinks.console import summary


def _reasons(*overrides):
    return check(OmegaConf.to_object(compose(overrides)), host_facts())


XLA_TEST = "test_xla_profile_writes_the_metrics_report_and_the_hlo_dump"


@pytest.fixture(scope="module")
def xla_cli(request, tmp_path_factory):
    """(a future of the XLA profile's CLI run, its store), started in the background when the session selected its
    test, at the module's first slow test: the XLA process (its own core) runs while the torch profile runs here."""
    store = tmp_path_factory.mktemp("xla_profile") / "results"
    if XLA_TEST not in {item.name for item in request.session.items}:
        yield None, store
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(run_cli, *FAST, "runtime=xla", "bench.profile=xla", "bench.profile_steps=2", "model=mlp",
                          "model.options.hidden=16", "model.options.depth=1", "data.batch_size=4", store=store,
                          env=cli_env(PJRT_DEVICE="CPU")), store


@pytest.mark.parametrize("overrides,said", [
    (["bench.profile=perf"], "bench.profile='perf' is unknown; allowed: null, torch, xla"),
    (["bench.profile=torch", "+experiment=digits_to_target"], "bench.mode=train_to_target is not supported"),
    (["bench.profile=xla"], "bench.profile=xla needs an XLA runtime (runtime=xla or xla_compile)"),
    (["bench.profile=torch", "runtime=xla"], "use bench.profile=xla"),
    (["bench.profile=torch", "bench.profile_steps=0"], "bench.profile_steps=0 is out of range; allowed: [1, "),
])
def test_a_profile_that_cannot_be_taken_is_refused_before_device_work(overrides, said):
    assert any(said in r for r in _reasons(*overrides)), _reasons(*overrides)


def test_the_summary_names_the_profiles_files_where_they_are(tmp_path):
    """The console's end-of-run summary gives each bench.profile file's path in the run folder, and what opens the
    trace (before: the record named them, the console did not)."""
    art = {"profile_trace": "profile/torch/rank0.pt.trace.json", "profile_ops": "profile/torch/rank0_ops.txt",
           "traceback": "traceback.txt"}
    run = tmp_path / "results" / "r1"
    text = summary(RunRecord("r1", status="ok", artifacts=art), run / "record.json")
    lines = text.splitlines()
    assert lines[-3:] == [
        f"  {'profile trace':<30} {run}/profile/torch/rank0.pt.trace.json (ui.perfetto.dev or chrome://tracing; "
        f"tensorboard --logdir {run}/profile)",
        f"  {'profile top operators':<30} {run}/profile/torch/rank0_ops.txt",
        f"  record: {run}/record.json"]
    xla = summary(RunRecord("r2", status="ok", artifacts={"profile_xla_metrics": "profile/xla/metrics_rank0.txt",
                                                          "profile_hlo_dump": "profile/xla/dump"}), "(nowhere)")
    assert "XLA metrics report             profile/xla/metrics_rank0.txt" in xla and "XLA HLO dump" in xla
    assert "profile" not in summary(RunRecord("r3", status="ok"), run / "record.json")


@pytest.mark.slow
def test_torch_profile_of_steps_after_the_timed_window_is_recorded_and_uploaded(store, xla_cli, capsys):
    """Through the Python API in this process (the CLI's runner and W&B sink); `xla_cli` starts the XLA profile's
    CLI run (the test below) in the background meanwhile."""
    import xbench

    done = xbench.run([*[a for a in FAST if not a.startswith("logger=")], "logger=wandb", "logger.wandb.mode=offline",
                       "bench.profile=torch", "bench.profile_steps=3", "model=mlp",
                       "model.options.hidden=16", "data.batch_size=4", f"store.root={store}"])
    assert done.status == "ok", done.reason
    [rec] = records(store)
    run_dir = store / rec["run_id"]
    art = rec["artifacts"]
    assert art["profile_trace"] == "profile/torch/rank0.pt.trace.json"  # TensorBoard's profiler plugin reads *.pt.trace.json
    assert f"profile trace                  {run_dir / art['profile_trace']} (" in capsys.readouterr().out  # the console
    events = json.loads((run_dir / art["profile_trace"]).read_text())["traceEvents"]
    ops = [e["name"] for e in events if e.get("cat") == "cpu_op"]
    # the profiled steps are the measured step: the MLP's 3 linear layers each step, and the optimizer's steps
    assert ops.count("aten::addmm") == 3 * 3
    assert sum(e["name"] == "Optimizer.step#SGD.step" for e in events) == 3
    # one ProfilerStep#N per profiled step (TensorBoard's profiler plugin reads them as the step boundaries),
    # each holding that step's 3 linear layers
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    for st in steps:
        inside = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"
                  and st["ts"] <= e["ts"] <= st["ts"] + st["dur"]]
        assert len(inside) == 3, st
    assert "Self CPU" in (run_dir / art["profile_ops"]).read_text()
    m = rec["measurements"]
    assert len(rec["series"]["step"]) == m["warmup_steps"] + 5  # the profiled steps are not in the measurement
    [uploaded] = [a for a in read_offline_run(art["wandb_offline_dir"])["artifacts"] if a["type"] == "profile"]
    assert sorted(uploaded["paths"]) == sorted([art["profile_trace"], art["profile_ops"]])


@pytest.mark.slow
@pytest.mark.xla
def test_xla_profile_writes_the_metrics_report_and_the_hlo_dump(xla_cli):
    future, store = xla_cli
    p = future.result()
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    run_dir, art = store / rec["run_id"], rec["artifacts"]
    report = (run_dir / art["profile_xla_metrics"]).read_text()
    assert "Metric: CompileTime" in report and "Metric: ExecuteTime" in report
    dump = run_dir / art["profile_hlo_dump"]
    before = sorted(dump.glob("*before_optimizations.txt"))
    assert before and all(f.read_text().startswith("HloModule") for f in before)
    assert len(before) >= rec["measurements"]["compiles_warmup"]  # every graph compiled in the run
