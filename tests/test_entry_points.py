"""The entry points, in this process, so the fast set covers them (`make test-fast --every-module`): `xbench
--version`, `python -m xbench.parity` and `python -m xbench.studies`. Their fresh-process runs are in
test_cli.py, test_runtimes.py (parity eager vs compile and vs accelerate, slow) and scripts/study_walkthrough.sh."""

from __future__ import annotations

import sys

import hydra

from tests.conftest import FAST, records
from xbench import __main__ as cli_main
from xbench import parity, studies
from xbench.studies.__main__ import main as studies_main
from xbench.version import __version__

# Two tiny eager runs in this process (the inline launcher): a 32-unit MLP on synthetic MNIST, one thread.
TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "data.batch_size=16", "bench.threads=1",
        "bench.contention_probe_s=0")


def test_version_is_xbenchs_with_hydras_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["xbench", "--version", "model=no_such_model"])
    cli_main.cli()
    out = capsys.readouterr().out.strip()
    assert out == cli_main.version() and out.startswith(f"xbench {__version__} (Hydra {hydra.__version__}, Python ")


def test_parity_of_two_learning_rates_fails_naming_the_step_and_keeps_both_runs(tmp_path, capsys):
    store = tmp_path / "results"
    code = parity.main(["--a=optim.lr=0.05", "--b=optim.lr=0.5", "--steps=4", *TINY, *FAST, f"store.root={store}"])
    out = capsys.readouterr()
    assert code == 1, out.out[-2000:] + out.err[-2000:]
    verdict = next(r for r in records(store) if r["experiment"] == "parity")
    assert verdict["status"] == "failed" and verdict["reason"].startswith("parity: losses differ by ")
    assert verdict["config"]["parity"]["steps"] == 4 and verdict["config"]["parity"]["rtol"] == 1e-3  # fp32's
    runs = {r["run_id"]: r for r in records(store) if r["experiment"] != "parity"}
    assert set(runs) == {verdict["measurements"]["run_a"], verdict["measurements"]["run_b"]}
    assert all(r["status"] == "ok" for r in runs.values())
    assert verdict["series"]["loss_a"][0] == verdict["series"]["loss_b"][0]  # same weights, same first batch
    assert verdict["series"]["loss_a"][1:] != verdict["series"]["loss_b"][1:]
    assert "FAILED" in out.out and verdict["reason"] in out.err


def test_studies_prints_its_small_commands_and_checks_a_report(tmp_path, capsys):
    s = studies.get("cpu_vs_gpu")
    assert studies_main(["cpu_vs_gpu", "--print", "small"]) == 0
    assert capsys.readouterr().out.splitlines() == studies.small_commands(s)
    assert studies_main(["cpu_vs_gpu", "--check-report", str(tmp_path)]) == 1  # an empty folder draws nothing
    err = capsys.readouterr().err
    assert f"the report in {tmp_path} lacks cpu_vs_gpu: " in err
    assert err.count("lacks") == len(s["small"]["figures"])


def test_the_cli_leaves_without_teardown_but_after_a_normal_exits_duties(tmp_path):
    """`xbench` (the console script and `python -m xbench`) ends by os._exit with cli's status, after what a
    normal exit does: a non-daemon thread joined, atexit handlers run, buffered output flushed; SystemExit's
    meanings kept (a string is printed and exits 1, None is 0); an idle ThreadPoolExecutor worker (torch.compile
    leaves inductor's) is woken, not joined forever. Before: the interpreter's teardown of torch's objects,
    1.5-2.2 s after the record's line on this machine (the status and output were the same)."""
    import subprocess

    from tests.conftest import REPO, cli_env

    code = ("import atexit, sys, threading, time\nfrom xbench.__main__ import leave\n"
            "atexit.register(lambda: print('atexit ran', flush=False))\n"
            "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', end=' '))).start()\n"
            "from concurrent.futures import ThreadPoolExecutor\n"  # an idle pool worker (inductor's) is woken
            "ThreadPoolExecutor(1).submit(int).result()\n"
            "sys.stdout.write('buffered ')\nleave(eval(sys.argv[1]))\n")
    for given, status, err in (("3", 3, ""), ("None", 0, ""), ("'bad input'", 1, "bad input")):
        p = subprocess.run([sys.executable, "-c", code, given], cwd=REPO, env=cli_env(), capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == status and p.stdout == "buffered thread done atexit ran\n", (given, p)
        assert p.stderr.strip() == err
