"""Hostile input beyond the drill's first rows: secrets in every shape, names that try to leave the store,
odd files in a store, impossible values, a store that cannot take the final record, resume safety, stop
signals at every phase, children that outlive their parent, unknown keys, a W&B host that never answers.

Unit tests first (the functions that decide); then the real CLI, through the fault drill's cases (each
asserts its rows: the status expected, a complete record, no record lost, no secret found, no hang).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from tests.conftest import REPO, drill_test
from xbench.hints import added_key_problems, unknown_keys
from xbench.records import redact as R
from xbench.records.record import RunRecord, impossible_values
from xbench.records.store import (
    MAX_RECORD_BYTES,
    RunLock,
    RunLocked,
    atomic_write_text,
    find_run,
    name_problem,
    new_run_id,
    run_dir,
    scan_records,
    write_record,
)
from xbench.sinks.local import LocalSink


@pytest.fixture(autouse=True)
def _forget_learned_secrets():
    R.forget()
    yield
    R.forget()


# ---- secrets: every shape, every net -----------------------------------------------------------------

@pytest.mark.parametrize("arg, values", [
    ("+db_password=hx-A1aa,hx-B2bb", {"hx-A1aa", "hx-B2bb", "hx-A1aa,hx-B2bb"}),
    ('+model.options.api_key="a,b c d"', {"a,b c d"}),
    ("+hf_token=[tok-1111,tok-2222]", {"tok-1111", "tok-2222"}),
    ("+model.options.creds={user:someone,password:pw-dict-33}", {"pw-dict-33"}),  # the user is no secret
    ("data.path=https://someone:pw-url-44@example.invalid/x", {"pw-url-44"}),
    ("+api_key=choice(ch-aaaa,ch-bbbb)", {"ch-aaaa", "ch-bbbb"}),
    ("data.batch_size=8,16", set()),
    ("model.options.key_dim=128", set()),  # a number is never learned: "128" stays readable everywhere
])
def test_override_secret_values_in_every_shape(arg, values):
    learned = set(R.argv_secret_values(["xbench", arg])) - set(R.secret_values())
    assert values <= learned
    raw = arg.partition("=")[2]  # under a secret key, the whole value as written is learned too
    assert not learned - values - {raw, *(f'"{v}"' for v in values)}


@pytest.mark.parametrize("text, clean", [
    ("#0 : +db_password=A1", "#0 : +db_password=<redacted>"),  # Hydra's launch line, short values too
    ("- +db_password=A1,B2", "- +db_password=<redacted>"),  # multirun.yaml's task overrides: the whole sweep
    ("a=1,+db_password=A1,b=2", "a=1,+db_password=<redacted>,b=2"),  # override_dirname
    ('+api_key="a,b c" data.x=1', "+api_key=<redacted> data.x=1"),
    ("+hf_token=[a1,b2] next=1", "+hf_token=<redacted> next=1"),
    ("{'db_password': 'xyz', 'x': 1}", "{'db_password': <redacted>, 'x': 1}"),
    ('{"api_key": "abc"}', '{"api_key": <redacted>}'),
    ("creds={user:u,password:p1}", "creds={user:u,password:<redacted>}"),
    ("https://u:pw@host/x and https\\://u\\:pw@host", "https://u:<redacted>@host/x and https\\://u\\:<redacted>@host"),
    ("full_key: bench.step  max_tokens=5  https://host/a  12:30", "full_key: bench.step  max_tokens=5  https://host/a  12:30"),
])
def test_redact_text_by_name_keeps_keys_and_drops_whole_values(text, clean):
    assert R.redact_text(text, []) == clean


def test_learned_values_are_redacted_everywhere_and_short_ones_only_by_name(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    R.remember(R.argv_secret_values(["x", "+model.options.creds={user:u,password:pw-dict-33}", "+api_key=ab"]))
    assert R.redact_text("connect failed for pw-dict-33@db") == "connect failed for <redacted>@db"
    assert R.redact_text("ab is a short word; api_key=ab") == "ab is a short word; api_key=<redacted>"
    assert R.redact({"entity": "team-pw-dict-33", "n": 128}) == {"entity": "team-<redacted>", "n": 128}


def test_console_stream_redacts_values_learned_later_and_survives_a_closed_terminal():
    buf = io.StringIO()
    s = R.RedactingStream(buf)
    R.remember(["later-secret-1"])  # learned from the composed config after the stream was made
    s.write("value later-secret-1, +db_password=A1,B2 done\n")
    assert buf.getvalue() == "value <redacted>, +db_password=<redacted> done\n"

    class Gone(io.StringIO):
        def write(self, text):
            raise OSError(5, "Input/output error")  # a terminal closed under SIGHUP

        def flush(self):
            raise BrokenPipeError

    gone = R.RedactingStream(Gone())
    assert gone.write("x") == 1
    gone.flush()  # no exception: the record, not the console, is the result


# ---- names and paths stay in the store -----------------------------------------------------------------

def test_names_that_would_leave_the_store_are_refused(tmp_path):
    for bad in ("../escaped", "a/b", ".hidden", "-flag", "..", "", "x" * 200):
        assert name_problem(bad, "store.run_name"), bad
        with pytest.raises(ValueError):
            run_dir(tmp_path, bad)
    with pytest.raises(ValueError, match="store.run_name"):
        new_run_id("../x")
    assert new_run_id("nightly.v2_a-b").startswith("nightly.v2_a-b-")
    # an id is looked up only directly under the root; a path must exist as given
    (tmp_path / "outside").mkdir()
    write_record(tmp_path / "outside", RunRecord(run_id="r1"))
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(FileNotFoundError):
        find_run("../outside/r1", root)
    assert find_run(tmp_path / "outside" / "r1", root).parent.name == "r1"


def test_record_files_get_the_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_record(tmp_path, RunRecord(run_id="r1"))
        lock = RunLock(path.parent).acquire()
        lock.release()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640  # mkstemp alone gives 0600: the group could not read it
    assert (path.parent / ".lock").stat().st_mode & 0o777 == 0o640


# ---- the reader takes only sane regular files; impossible values never reach an average -------------------

def _odd_store(root):
    good = RunRecord(run_id="good", status="ok", config={"bench": {"mode": "throughput"}},
                     measurements={"throughput_samples_per_s": 100.0})
    write_record(root, good)
    cases = {}
    for name in ("fifo", "folder", "huge", "zero", "nan", "inf", "list", "deep", "latin1", "schema", "negative",
                 "price"):
        (root / name).mkdir()
        cases[name] = root / name / "record.json"
    os.mkfifo(cases["fifo"])
    cases["folder"].mkdir()
    with open(cases["huge"], "wb") as f:
        f.truncate(MAX_RECORD_BYTES + 1)  # sparse
    cases["zero"].symlink_to("/dev/zero")
    cases["nan"].write_text('{"run_id": "nan", "measurements": {"throughput_samples_per_s": NaN}}')
    cases["inf"].write_text('{"run_id": "inf", "measurements": {"throughput_samples_per_s": 1e999}}')
    cases["list"].write_text("[]")
    cases["deep"].write_text("[" * 200_000 + "]" * 200_000)
    cases["latin1"].write_bytes(b'{"run_id": "\xe9"}')
    d = good.to_dict()
    cases["schema"].write_text(json.dumps({**d, "run_id": "schema", "schema_version": 99}))
    cases["negative"].write_text(json.dumps({**d, "run_id": "negative",
                                             "measurements": {"throughput_samples_per_s": -3.0}}))
    cases["price"].write_text(json.dumps({**d, "run_id": "price", "config": {
        "bench": {"mode": "throughput"}, "platform": {"price": [{"amount": -1.0}]}}}))
    return cases


def test_reader_skips_every_odd_file_naming_it_without_blocking(tmp_path):
    cases = _odd_store(tmp_path)
    result = {}
    t = threading.Thread(target=lambda: result.update(out=scan_records(tmp_path)), daemon=True)
    t.start()
    t.join(60)  # a FIFO or /dev/zero would block or never end: bounded, generously
    assert not t.is_alive(), "the reader blocked"
    records, skipped = result["out"]
    assert [r.run_id for r in records] == ["good"] and records[0].source.endswith("good/record.json")
    assert len(skipped) == len(cases)
    for path in cases.values():
        [msg] = [m for m in skipped if str(path) in m]
        assert "skipping unreadable record" in msg
    text = "\n".join(skipped)
    for why in ("a FIFO", "a folder", "more than a record holds", "a device", "NaN is not a number",
                "1e999 is not a number", "holds a list", "nested too deeply", "not UTF-8",
                "schema_version 99", "throughput_samples_per_s=-3.0 cannot be negative", "is not a price"):
        assert why in text, why


def test_impossible_values_are_named():
    rec = RunRecord(run_id="r", measurements={"throughput_samples_per_s": -1, "step_time_s_median": -0.1,
                                              "loss_last": -2.0, "overhead_fraction": -0.3},
                    derived={"usd_per_hour": float("inf"), "window_cost_usd": -1.0, "mfu": float("nan")})
    probs = impossible_values(rec)
    assert len(probs) == 5 and not any("loss_last" in p or "overhead" in p for p in probs)
    # the at-once check (min >= 0 and a finite sum) never hides one: a NaN beside positives, a float
    # subclass, an integer past a float's range (named by its size, not a traceback); a sum that overflows
    # from finite figures is no problem
    import numpy as np

    for bad, said in (({"a_s": 1.0, "b_s": float("nan"), "c_s": 2.0}, "b_s=nan is not a finite number"),
                      ({"a_s": 1.0, "b_s": np.float64("inf")}, "b_s=inf is not a finite number"),
                      ({"a_s": 10**400, "step_time_s_median": -0.1}, "step_time_s_median=-0.1 cannot be negative"),
                      ({"a_s": 10**400, "b_s": 1.0}, "a_s=an integer of 401 digits is not a finite number")):
        assert [p for p in impossible_values(RunRecord(run_id="r", measurements=bad)) if said in p], bad
    assert impossible_values(RunRecord(run_id="r", measurements={"a_s": 1e308, "b_s": 1e308, "c": 3})) == []
    assert impossible_values(RunRecord(run_id="r", measurements={"a_s": 2.0, "n": 7, "ok": True})) == []
    with pytest.raises(ValueError, match="JSON object"):
        RunRecord.from_dict([1, 2])


def test_frame_and_cost_skip_a_record_whose_contents_cannot_be_laid_out(tmp_path, capsys):
    from xbench.analysis.frame import to_frame
    from xbench.cost import main as cost_main

    good = RunRecord(run_id="good", status="ok", config={"bench": {"mode": "throughput"}, "platform": {"name": "x"}},
                     measurements={"throughput_samples_per_s": 100.0, "window_s_total": 1.0})
    odd = RunRecord(run_id="odd", status="ok", config={"bench": {"mode": "throughput"}},
                    measurements={"throughput_samples_per_s": 100.0}, warnings=[1, 2])  # not text
    odd.source = "/somewhere/odd/record.json"
    skipped = []
    df = to_frame([good, odd], skipped)
    assert list(df.run_id) == ["good"] and "/somewhere/odd/record.json" in skipped[0]
    write_record(tmp_path, good)
    write_record(tmp_path, RunRecord(run_id="neg", status="ok", config={"bench": {"mode": "throughput"}},
                                     measurements={"throughput_samples_per_s": -5.0}))
    assert cost_main([str(tmp_path), "--platform", "gce_n1_standard_8"]) == 0
    out = capsys.readouterr()
    assert "good" in out.out and "neg/record.json" in out.err and "cannot be negative" in out.err
    for bad in ("nan", "-1", "inf"):
        assert cost_main([str(tmp_path), "--platform", "gce_n1_standard_8", "--price", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("amount=") == 3 and "amount=-1.0 is out of range; allowed: [0, 1e12]" in err  # once each


# ---- locks and the fallback --------------------------------------------------------------------------------

def test_run_lock_refuses_a_second_owner_and_dies_with_its_process(tmp_path):
    lock = RunLock(tmp_path).acquire()
    with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
        RunLock(tmp_path).acquire()
    lock.release()
    RunLock(tmp_path).acquire().release()
    code = (f"import os, sys; sys.path.insert(0, {str(REPO)!r}); from xbench.records.store import RunLock; "
            f"RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); os.kill(os.getpid(), 9)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "held" in p.stdout and p.returncode == -9
    RunLock(tmp_path).acquire().release()  # SIGKILL released it: a stale lock file never blocks


def test_local_sink_falls_back_names_it_and_the_record_says_so(tmp_path, monkeypatch):
    blocked = tmp_path / "store"
    blocked.write_text("a file where the store should be")  # writes under it fail (NotADirectoryError)
    monkeypatch.setenv("XBENCH_FALLBACK_DIR", str(tmp_path / "fallback"))
    sink = LocalSink(str(blocked))
    rec = RunRecord(run_id="r1", status="ok")
    path = sink.write(rec)
    assert path == tmp_path / "fallback" / "r1" / "record.json" and sink.unsaved and not sink.nowhere
    saved = json.loads(path.read_text())
    assert saved["status"] == "ok" and saved["warnings"][0].startswith("not in its store:")
    sink.write(rec)
    assert len(rec.warnings) == 1  # said once however often it is written
    monkeypatch.setattr("xbench.sinks.local.fallback_roots", lambda: [blocked / "x"])
    assert sink.write(rec) is None and sink.nowhere


def test_envelope_prints_the_record_when_no_folder_can_take_it(tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    from xbench.config import XBenchConfig
    from xbench.envelope import EXIT_UNSAVED, RunEnvelope

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(XBenchConfig), {
        "model": {"name": "m"}, "data": {"name": "d"}, "platform": {"name": "p"}, "runtime": {"name": "eager"},
        "parallel": {"name": "single"}, "precision": {"name": "fp32"}, "logger": {"name": "none"},
        "store": {"root": str(tmp_path / "store")}}))
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    monkeypatch.setattr("xbench.sinks.local.fallback_roots", lambda: [blocked / "x"])
    with RunEnvelope(cfg, {"bench": {"mode": "throughput"}}, "r1") as env:
        env.local.root = str(blocked)  # the store goes away under the run
        env.record.measurements["throughput_samples_per_s"] = 12.5
        env.record.finish("ok")
    out, err = capsys.readouterr()
    assert env.unsaved and "could not be written anywhere" in err
    printed = json.loads(out[out.index("{"):])
    assert printed["measurements"]["throughput_samples_per_s"] == 12.5 and "record: (nowhere" in out
    cfg.store.root = str(blocked)  # unwritable from the start: nothing runs
    with pytest.raises(SystemExit) as e, RunEnvelope(cfg, {}, "r2"):
        raise AssertionError("must not run")
    assert e.value.code == EXIT_UNSAVED


def test_atomic_write_leaves_no_half_file_when_the_disk_refuses(tmp_path, monkeypatch):
    target = tmp_path / "record.json"
    target.write_text('{"old": true}')

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        atomic_write_text(target, '{"new": true}')
    assert target.read_text() == '{"old": true}' and [p.name for p in tmp_path.iterdir()] == ["record.json"]


# ---- unknown keys, whichever way they are written ---------------------------------------------------------

def test_keys_added_with_plus_must_exist_in_the_schema():
    [step, step2, pw] = added_key_problems(["+bench.step=5", "++bench.step=5", "+db_password=x",
                                            "+experiment=scaling", "+workload=vgg_cifar10", "+model.options.width=8",
                                            "+hydra.callbacks.x._target_=y", "bench.steps=5"])
    assert "did you mean 'bench.steps'" in step and step == step2
    assert "'db_password' is not a config key" in pw and "x" not in pw.split(";")[0].replace("'db_password'", "")
    assert unknown_keys({"bench": {"step": 5, "steps": 3}, "extra": 1, "model": {"options": {"any": 1}}}) == \
        [("bench", "step"), ("extra",)]


def test_resume_is_checked_whole_and_unknown_keys_of_an_older_record_are_left_out(tmp_path, capsys):
    import shutil

    from omegaconf import OmegaConf

    from xbench import runner
    from xbench.config import XBenchConfig

    cfg = {"bench": {"mode": "train_to_target", "step": 5, "seed": 3}, "model": {"name": "mlp"}}
    write_record(tmp_path, RunRecord(run_id="r1", status="interrupted", reason="SIGTERM", config=cfg))
    write_record(tmp_path, RunRecord(run_id="tp", status="failed", reason="x", config={"bench": {"mode": "throughput"}}))
    shutil.copytree(tmp_path / "r1", tmp_path / "renamed")
    dcfg = OmegaConf.structured(XBenchConfig)
    dcfg.store.root = str(tmp_path)

    def refused(ref, match):
        dcfg.resume = ref
        with pytest.raises(runner.Refused, match=match):
            prior, path = runner.check_resume(dcfg)
            runner.resume_config(dcfg, prior, path)

    refused("nosuch", "no run 'nosuch'")
    refused("../r1", "no run")  # an id never climbs out of the store
    refused("tp", "train_to_target runs only")
    refused(str(tmp_path / "renamed"), "holds the record of run 'r1'")
    refused("r1", "no checkpoint.pt")
    (tmp_path / "r1" / "checkpoint.pt").write_bytes(b"state")
    dcfg.resume = "r1"
    stored = runner.resume_config(dcfg, *runner.check_resume(dcfg))
    assert "step" not in stored.bench and stored.bench.seed == 3 and stored.bench.mode == "train_to_target"
    assert "bench.step" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == ["checkpoint.pt", "record.json"]  # nothing written


# ---- children die with their parent -------------------------------------------------------------------------

def _python(code: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, **kw)


def test_a_launched_process_dies_with_its_parent_and_exits_on_a_signal_once_idle():
    import psutil

    # parent -> child; the child watches its parent (child.stop_on_signals) and sleeps; the parent is killed
    # (the parent passes its pid, as the pool's initializer does: a parent that dies while the child is
    # still starting is noticed too)
    parent = _python("""
        import os, subprocess, sys, time
        c = subprocess.Popen([sys.executable, "-c", "import sys, time; from xbench.launch import child; "
                              "child.die_with_parent(int(sys.argv[1])); time.sleep(600)", str(os.getpid())])
        print(c.pid, flush=True)
        time.sleep(600)
    """)
    pid = int(parent.stdout.readline())
    kid = psutil.Process(pid)
    parent.kill()
    parent.wait(30)
    kid.wait(30)  # gone within the bound (PARENT_POLL_S polls), not after its sleep (raises if alive)
    assert not kid.is_running()

    idle = _python("""
        from xbench.launch import child
        import time
        flag = child.stop_on_signals()
        with child.reason_on_stop(flag):
            pass                      # the work is done
        print('idle', flush=True)
        time.sleep(600)
    """)
    assert idle.stdout.readline().strip() == "idle"
    idle.send_signal(signal.SIGTERM)
    assert idle.wait(30) == 128 + signal.SIGTERM  # an idle child no longer ignores SIGTERM


HANDBACK = """
import os, signal
from xbench.launch import child


class Handback:
    \"\"\"A work's result that signals its own process while it is pickled to be handed back.\"\"\"

    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the parent's forwarded stop, as the result goes back
        return (Handback, ())


def work():
    flag = child.stop_on_signals()
    with child.reason_on_stop(flag):
        pass  # the work is done: its result is what is left
    return Handback()


if __name__ == "__main__":
    print("handed back:", type(child.in_fresh_process(work, (), None, "the test's process")).__name__)
"""


def test_a_stop_signal_while_a_finished_process_hands_back_its_result_lets_the_result_arrive(tmp_path):
    """A real spawned process (child.in_fresh_process, as bench.process_repeats and the XLA launchers use)
    whose work has returned and whose result is being pickled onto the pool's pipe when a stop signal
    arrives: the result reaches the parent. Ended at once there (before child.HANDBACK_S), the parent got
    'died without a result' for a run that had finished."""
    script = tmp_path / "handback.py"
    script.write_text(HANDBACK)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0 and "handed back: Handback" in p.stdout, p.stderr[-2000:]


# ---- the real CLI: the drill's hostile cases ---------------------------------------------------------------

def _drill(drill, only: str) -> list[dict]:
    """The rows of the cases `--only only` runs, from the session's drill (tests/conftest.py::drill)."""
    rows = drill.rows_of(only)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, f"{bad}\n{drill.console[-4000:]}"
    assert sum(r["lost"] for r in rows) == 0 and sum(r["leaks"] for r in rows) == 0
    assert not any(r["hang"] for r in rows)
    return rows


@drill_test()
@pytest.mark.parametrize("case, rows", [("resume_safety", 5), ("signal_phases", 6), ("orphans", 2),
                                        ("odd_store", 4), ("secrets", 4), ("wandb_blackhole", 1)])
def test_drill_case(drill, case, rows):
    got = _drill(drill, case)
    assert len(got) == rows, [r["fault"] for r in got]


@drill_test("store_fails")
def test_drill_store_that_fails_mid_run(drill):
    rows = _drill(drill, "store_fails")
    if rows[0]["observed"] == "skipped":
        pytest.skip("no private mount namespace here (unshare -rm): " + rows[0]["detail"])
    assert [r["observed"] for r in rows] == ["ok", "ok"]
    assert all("exit 74" in r["detail"] for r in rows)


@pytest.mark.parametrize("text,clean", [
    ("passphrase=open-sesame-1", "passphrase=<redacted>"),
    ("db.credentials={user:u,pw:x}", "db.credentials=<redacted>"),
    ("pwd=abc userPwd=def DB_PASS=ghi smtp_pw=jkl", "pwd=<redacted> userPwd=<redacted> DB_PASS=<redacted> smtp_pw=<redacted>"),
    ("auth=tok basic_auth=u:p oauth=zz jwt=abc", "auth=<redacted> basic_auth=<redacted> oauth=<redacted> jwt=<redacted>"),
    ("Authorization: Bearer abc.def-ghi123", "Authorization: <redacted> <redacted>"),
    ('-H "authorization: Basic dXNlcjpwYXNzd29yZA=="', '-H "authorization: <redacted> <redacted>"'),
    ("sent eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "sent <redacted>"),
    ("https://ghp_abcdefgh12345@github.com/x.git", "https://<redacted>@github.com/x.git"),
    # what must stay readable
    ("ssh://git@github.com/x author=me passes=3 bypass=1 Basic configuration; bearer of news",
     "ssh://git@github.com/x author=me passes=3 bypass=1 Basic configuration; bearer of news"),
])
def test_the_wider_name_net(text, clean):
    assert R.redact_text(text, []) == clean


def test_wider_names_in_the_environment_and_values_learned_from_them(monkeypatch):
    for name in ("DB_PWD", "BASIC_AUTH", "MY_JWT", "SMTP_PASS", "GPG_PASSPHRASE", "GOOGLE_APPLICATION_CREDENTIALS"):
        assert R.is_secret_name(name), name
    for name in ("PWD", "OLDPWD", "GIT_AUTHOR_NAME", "XAUTHORITY", "HOME", "BYPASS_CACHE"):
        assert not R.is_secret_name(name), name
    monkeypatch.setenv("DB_PWD", "env-pwd-value-1")
    monkeypatch.setenv("PWD", "/work/some/folder")
    assert R.redact_text("failed: env-pwd-value-1 in /work/some/folder") == "failed: <redacted> in /work/some/folder"
    # a token seen once (a URL's user part, a bearer token) is redacted by value anywhere after
    R.remember(R.argv_secret_values(["x", "data.path=https://ghp_tok12345678@github.com/d",
                                     "+model.options.header=Bearer bearer-tok-999"]))
    assert R.redact_text("cloning ghp_tok12345678 / bearer-tok-999") == "cloning <redacted> / <redacted>"


# ---- Hydra's files: bounded, born redacted, out of the way (xbench/hydra_guard.py) --------------------------

def test_sweep_points_are_counted_without_composing_and_the_command_line_wins():
    from xbench.hydra_guard import sweep_size

    assert sweep_size({}, ["data.batch_size=8,16", "runtime=eager,compile,xla", "bench.steps=5"]) == 6
    assert sweep_size({}, ["bench.seed=range(0,2000)", "data.batch_size=range(1,3000)"]) == 2000 * 2999
    assert sweep_size({"workload": "a,b,c"}, ["model=mlp"]) == 3
    assert sweep_size({"workload": "a,b,c"}, ["workload=a"]) == 1  # a fixed value replaces the preset's sweep
    assert sweep_size({}, []) == 1


def test_hydras_sweep_file_is_born_redacted(tmp_path):
    """multirun.yaml is written by Hydra's basic sweeper through the module's OmegaConf.save: after the
    guard, what reaches the disk is already redacted (a SIGKILL before the first point leaves no secret)."""
    from hydra._internal.core_plugins import basic_sweeper
    from omegaconf import OmegaConf

    from xbench.hydra_guard import redact_sweep_file_at_write

    R.remember(["sweep-secret-77"])
    cfg = OmegaConf.create({"hydra": {"overrides": {"task": ["+db_password=sweep-secret-77", "x=1"]}},
                            "logger": {"wandb": {"api_key": "k-123456789"}}, "note": "uses sweep-secret-77"})
    redact_sweep_file_at_write()
    redact_sweep_file_at_write()  # idempotent
    basic_sweeper.OmegaConf.save(cfg, tmp_path / "multirun.yaml")
    text = (tmp_path / "multirun.yaml").read_text()
    assert "sweep-secret-77" not in text and "k-123456789" not in text
    assert "+db_password=<redacted>" in text and "x=1" in text
    assert basic_sweeper.OmegaConf.create({"a": 1}).a == 1  # everything else is OmegaConf's own


def test_a_store_that_cannot_hold_hydras_folder_is_exit_74_and_empty_folders_go(tmp_path, capsys):
    from xbench.hydra_guard import make_folder, remove_empty

    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit) as e:
        make_folder(str(tmp_path / "afile" / "store" / ".hydra" / "multirun-x"), "Hydra's sweep folder")
    assert e.value.code == 74
    assert "cannot create Hydra's sweep folder" in capsys.readouterr().err
    store = tmp_path / "store"
    run = store / ".hydra" / "run-x"
    assert make_folder(str(run / "0"), "x") and not make_folder(str(run / "0"), "x")  # made, then already there
    (run / "1").mkdir()
    (store / "kept").mkdir()
    (store / "kept" / "record.json").write_text("{}")
    remove_empty(run, store)
    assert not (store / ".hydra").exists() and (store / "kept" / "record.json").exists()


@pytest.mark.slow
def test_the_drill_reports_a_planted_defect(tmp_path):
    """The drill is tested: a copy of this checkout whose text redaction is switched off (a planted defect,
    one line) makes the secrets case find the leaks and the drill exit 1, naming the row a MISMATCH."""
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(REPO / "xbench", copy / "xbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "conf", copy / "conf")
    redact = copy / "xbench" / "records" / "redact.py"
    text = redact.read_text()
    planted = text.replace("    text = redact_values(text, values)\n", "    return text  # planted defect\n", 1)
    assert planted != text
    redact.write_text(planted)
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "fault_drill.py"), "--only", "secrets_wider",
                        "--xbench", str(copy), "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert p.returncode == 1, p.stdout[-3000:]
    first = json.loads(out.read_text())[0]
    assert first["leaks"] > 0 and first["verdict"] == "MISMATCH" and first["klass"] == "secrets", first
    assert "<-- MISMATCH" in p.stdout


@drill_test()
@pytest.mark.parametrize("case, rows", [("bounds", 3), ("secrets_wider", 2), ("hydra_folder_store", 1)])
def test_drill_case_round_3(drill, case, rows):
    got = _drill(drill, case)
    assert len(got) == rows, [r["fault"] for r in got]


def test_plural_secret_names_need_a_credential_word_before_keys_and_tokens():
    for name in ("SECRETS", "DB_PASSWORDS", "COOKIES", "API_KEYS", "ACCESS_TOKENS", "APIKEYS",
                 "X_AUTHTOKENS"):
        assert R._secret_plural(name.split("_")), name
    for name in ("MAX_TOKENS", "EXCLUDE_KEYS", "MONKEYS", "TOKENS", "KEYS_API", "HOME", "PASSES"):
        assert not R._secret_plural(name.split("_")), name


def test_impossible_epochs_and_prices_are_named():
    def rec(done, most, price):
        return RunRecord(run_id="r", measurements={"epochs_done": done},
                         config={"goal": {"max_epochs": most}, "platform": {"price": price}})

    assert impossible_values(rec(5, 3, [{"amount": 1.0}])) == [
        "measurements.epochs_done=5 is beyond the run's goal.max_epochs=3"]
    assert impossible_values(rec(3, 3, [{"amount": -1}, {"x": 1}, "a"])) == [
        "config.platform.price amount -1 is not a price (a finite number >= 0)",
        "config.platform.price amount 'a' is not a price (a finite number >= 0)"]
    assert impossible_values(rec(float("inf"), 3, {"amount": True})) == [
        "measurements.epochs_done=inf is not a finite number",
        "config.platform.price amount True is not a price (a finite number >= 0)"]
    assert impossible_values(rec(True, 0, None)) == [] and impossible_values(rec(4, None, 2.5)) == []


def test_record_problems_check_the_shape_then_the_contents():
    from xbench.records.record import SCHEMA_VERSION, STATUSES

    bad = RunRecord(run_id="", status="weird", measurements=[], warnings={})
    bad.schema_version = True
    assert bad.problems() == [
        "run_id is empty or not text",
        f"schema_version True is not one this xbench reads (1..{SCHEMA_VERSION}; "
        "a newer xbench wrote it?)",
        "status 'weird' is not one of " + ", ".join(STATUSES), "status 'weird' needs a reason",
        "measurements must be a mapping", "warnings must be a list"]
    assert RunRecord(run_id="r", status="ok", config={"model": 3, "data": None}).problems() == [
        "config.model must be a mapping"]
    rec = RunRecord(run_id="r", status="ok",
                    measurements={"x": -1.0, "throughput_samples_per_s_windows": [1]})
    rec.series = {"a": [1, 2], "b": [1], "c": "x"}
    assert rec.problems() == ["an ok throughput run has no throughput_samples_per_s",
                              "series have unequal lengths: {'a': 2, 'b': 1}"]
    rec.config = {"bench": {"mode": "find_max_batch"}}
    rec.series = {}
    assert rec.problems() == []
