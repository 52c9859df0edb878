"""No hang (R4 5/7 item 1): every rank evaluates the same number of batches whatever the eval set's size (an eval
set that split unevenly over 2 FSDP ranks left one waiting 120 s in an all-gather, then failed), text_bpe's
tokenizer trains in bounded time on text without whitespace, a billion-point sweep is counted (and refused)
without listing its points, and Hydra's basic sweeper composes one point at a time."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO, cli_env, drill_test, records
from xbench.bench.epochs import IGNORE_LABEL, IGNORE_TOKEN, EvalShard
from xbench.data.text import CharWindows

# serial: alone, never beside another test (watchdogs and bounds in seconds)
pytestmark = pytest.mark.serial

CFG = SimpleNamespace(num_workers=0, pin_memory=False)


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_scores_the_same_number_of_batches_and_every_sample_once(world):
    """Every eval-set size from 1 to 40 at batch 8 (one size in 16 split unevenly over 2 ranks, batch for batch):
    each rank yields the same number of batches, of one shape, and the real samples are the set, once each."""
    for n in range(1, 41):
        y = torch.arange(n)
        data = torch.utils.data.TensorDataset(torch.arange(n).float()[:, None].repeat(1, 3), y)
        shards = [EvalShard(data, r, world, 8, CFG) for r in range(world)]
        counts = [len(list(s)) for s in shards]
        assert counts == [math.ceil(math.ceil(n / world) / 8)] * world, (n, counts)  # was: 2 and 1 at n=17
        assert all(s.batches_per_eval == counts[0] for s in shards)
        seen = sorted(int(v) for s in shards for _, yb in s for v in yb if v != IGNORE_LABEL)
        assert seen == list(range(n)), n
        assert {tuple(xb.shape) for s in shards for xb, _ in s} == {(8, 3)}


def test_a_rank_without_samples_and_a_dataset_of_windows_pad_with_whole_batches():
    """Token windows through a DataLoader (not a TensorDataset): 9 windows on 2 ranks at batch 4 (5 and 4 samples:
    2 batches each, the second of rank 1 all padding, targets -100); 1 window on 3 ranks: ranks 1 and 2 hold none
    and still take their one batch, of the right shape."""
    windows = CharWindows(torch.arange(9 * 8 + 1), 8, 8)
    assert len(windows) == 9
    shards = [list(EvalShard(windows, r, 2, 4, CFG)) for r in range(2)]
    assert [len(s) for s in shards] == [2, 2]  # was: 2 and 1
    assert (shards[1][1][1] == IGNORE_TOKEN).all() and shards[1][1][0].shape == (4, 8)
    real = sorted(int(t) for s in shards for _, yb in s for t in yb[:, 0] if t != IGNORE_TOKEN)
    assert real == [i * 8 + 1 for i in range(9)]  # each window's first target, once
    one = CharWindows(torch.arange(10), 8, 8)
    alone = [list(EvalShard(one, r, 3, 4, CFG)) for r in range(3)]
    assert [len(s) for s in alone] == [1, 1, 1]
    assert all(xb.shape == (4, 8) for s in alone for xb, _ in s)
    assert all((yb == IGNORE_TOKEN).all() for s in alone[1:] for _, yb in s)


# ---- real 2-rank gloo runs: FSDP2 (the tiny decoder, sharded per block) and DDP (the digits MLP) -------------

TEXT_BYTES = 3000  # 90% trains (84 windows of 33 bytes), the last 300 bytes are 9 held-out windows: 5 + 4 on 2 ranks
DIGITS_EVAL_FRACTION = 0.0095  # round(1797 x 0.0095) = 17 held out: 9 + 8 on 2 ranks, batches of 8: 2 and 1
COMMON = ("bench.mode=train_to_target", "bench.threads=1", "parallel.world_size=2", "goal.target=null",
          "goal.targets=[]", "goal.max_epochs=1", "goal.checkpoint_every_evals=1", "logger=none",
          "logger.progress=false", "platform=cpu", "precision=fp32")
RUNS = {
    "fsdp": ("+workload=llama_tiny_tokens", "data=text_bytes", "data.seq_len=32", "data.batch_size=4",
             "goal.eval_batch_size=4", "goal.metric=log_perplexity", "parallel=fsdp"),
    "ddp": ("+experiment=digits_to_target", "data.batch_size=8", f"data.eval_fraction={DIGITS_EVAL_FRACTION}",
            "parallel=ddp"),
}


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    root = tmp_path_factory.mktemp("uneven_eval")
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "from", "home"]
    corpus = root / "corpus.txt"
    corpus.write_text(" ".join(words[(i * 7) % len(words)] for i in range(2000))[:TEXT_BYTES])
    procs = {}
    for name, args in RUNS.items():
        extra = (f"data.path={corpus}",) if name == "fsdp" else ()
        log = open(root / f"{name}.log", "w")  # noqa: SIM115 (closed below)
        procs[name] = (subprocess.Popen([sys.executable, "-m", "xbench", f"store.root={root / name}", *COMMON, *args,
                                         *extra], cwd=REPO, env=cli_env(), stdout=log, stderr=subprocess.STDOUT),
                       log)
    out = {}
    for name, (p, log) in procs.items():
        p.wait(timeout=900)
        log.close()
        [rec] = records(root / name) or [None]
        out[name] = SimpleNamespace(rec=rec, code=p.returncode, log=(root / f"{name}.log").read_text(),
                                    folder=root / name, corpus=corpus)
    return out


def _checkpoint_model(run):
    """The model the run's last evaluation scored, rebuilt from its record and checkpoint in this process."""
    from xbench import models
    from xbench.data.spec import InputSpec

    cfg = run.rec["config"]
    model = models.build(cfg["model"]["name"], InputSpec.from_data(SimpleNamespace(**cfg["data"])),
                         dict(cfg["model"].get("options") or {}))
    state = torch.load(run.folder / run.rec["run_id"] / "checkpoint.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    return model.eval()


@pytest.mark.slow
@pytest.mark.side_by_side  # scores, not timings
def test_fsdp_evaluates_an_eval_set_that_splits_unevenly_and_scores_all_of_it(uneven):
    """9 held-out windows on 2 FSDP ranks at eval batch 4 (was: rank 0's second batch waited in FSDP's all-gather
    for rank 1, which had finished: `Timed out waiting 120000ms`, the run failed at its first evaluation). The
    log-perplexity is the whole eval set's, once: recomputed here from the checkpoint on one process."""
    run = uneven["fsdp"]
    assert run.rec and run.rec["status"] == "ok", (run.rec or {}).get("reason") or run.log[-3000:]
    m = run.rec["measurements"]
    assert m["world_size"] == 2 and m["eval_samples"] == 9 and m["evals"] == 1
    ids = torch.tensor(list(run.corpus.read_bytes()))
    held = ids[round(len(ids) * 0.9):]
    windows = torch.stack([held[i * 32:i * 32 + 33] for i in range(9)])
    assert (len(held) - 33) // 32 + 1 == 9
    with torch.no_grad():
        logits = _checkpoint_model(run)(windows[:, :-1])
        nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten(), reduction="sum")
    assert m["metric_final"] == pytest.approx(float(nll) / (9 * 32), rel=1e-4)


@pytest.mark.slow
@pytest.mark.side_by_side  # scores, not timings
def test_ddp_evaluates_an_eval_set_that_splits_unevenly_and_scores_all_of_it(uneven):
    """17 held-out digits on 2 DDP ranks at batch 8 (9 and 8 samples): the top-1 is k/17, the checkpoint's model
    scoring the 17 here on one process."""
    from xbench.data.digits import load_digits_split

    run = uneven["ddp"]
    assert run.rec and run.rec["status"] == "ok", (run.rec or {}).get("reason") or run.log[-3000:]
    m = run.rec["measurements"]
    assert m["world_size"] == 2 and m["eval_samples"] == 17
    _, held = load_digits_split("features", DIGITS_EVAL_FRACTION)
    x, y = held.tensors
    with torch.no_grad():
        hits = int((_checkpoint_model(run)(x).argmax(-1) == y).sum())
    assert m["metric_final"] == pytest.approx(hits / 17, abs=1e-9)


# ---- text_bpe on text without whitespace ----------------------------------------------------------------------

def test_bpe_on_a_long_run_without_whitespace_is_bounded_and_says_what_it_costs(tmp_path, capfd):
    """200,000 characters without whitespace (was: 52.6 s, the square of the run's length; 3 MB: tens of minutes):
    pre-tokens are cut to BPE_MAX_PRETOKEN_BYTES, so it trains and encodes in seconds; the console says the size
    and an estimate first; the tokens decode back to the text."""
    from tokenizers import Tokenizer

    from xbench.config import DataConfig
    from xbench.data import loaders, text

    g = torch.Generator().manual_seed(0)
    run = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (200_000,), generator=g))
    (tmp_path / "run.txt").write_text(run)
    data = DataConfig(name="text_bpe", source="text_bpe", modality="tokens", seq_len=32, vocab_size=512,
                      num_classes=512, path=str(tmp_path / "run.txt"), eval_fraction=0.1)
    t = time.perf_counter()
    splits = loaders.build(data, "lm")
    took = time.perf_counter() - t
    assert took < 20, f"{took:.1f} s"  # ~1.5 s quiet, ~4 s at load 8 here
    err = capfd.readouterr().err
    assert "data=text_bpe: training a byte-level BPE (vocabulary 512)" in err and "0.2 MB" in err and "about" in err
    meta = json.loads(next((tmp_path / ".xbench_cache").glob("*.bpe.json")).read_text())
    tok = Tokenizer.from_str(json.dumps(meta["tokenizer"]))
    cut = round(len(run) * 0.9)
    assert tok.decode(splits.train.ids.tolist()) == run[:cut]
    longest = max(len(tok.id_to_token(i)) for i in range(tok.get_vocab_size()))
    assert longest <= text.BPE_MAX_PRETOKEN_BYTES


# ---- sweeps ---------------------------------------------------------------------------------------------------

def test_a_billion_point_range_is_counted_from_its_bounds():
    """Counted in well under a second (was: the billion values listed one by one before the limit could refuse
    them: minutes); small ranges, floats, shuffles and lists counted as Hydra's own iterator lists them."""
    code = ("import time; from xbench.hydra_guard import sweep_size; t = time.perf_counter(); "
            "n = sweep_size({'bench.seed': 'range(0,1000000000)'}, ['data.batch_size=1,2']); "
            "print(n, time.perf_counter() - t)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    n, took = p.stdout.split()
    assert int(n) == 2_000_000_000 and float(took) < 1.0, p.stdout + p.stderr
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from xbench.hydra_guard import sweep_size

    for arg in ("a=range(0,10,3)", "a=range(10,0,-3)", "a=range(0,1,0.1)", "a=range(0,0.3,0.1)", "a=range(1.5,-1,-0.5)",
                "a=range(5,1)", "a=shuffle(range(0,7))", "a=sort(range(0,9),reverse=true)", "a=1,2,3", "a=choice(1,2)"):
        [o] = OverridesParser.create().parse_overrides([arg])
        assert sweep_size({}, [arg]) == sum(1 for _ in o.sweep_string_iterator()), arg


def test_hydras_basic_sweeper_on_the_local_launcher_composes_one_point_per_batch():
    """hydra/sweeper=basic composed the whole sweep before its first point; the guard makes each point its own
    batch on the local launcher, and leaves an explicit max_batch_size, and xbench's own sweeper, alone."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from tests.conftest import CONF
    from xbench.config import register_configs
    from xbench.hydra_guard import bound_basic_sweeper

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        basic = compose("config", ["hydra/sweeper=basic"], return_hydra_config=True)
        assert basic.hydra.sweeper.max_batch_size is None
        assert bound_basic_sweeper(basic) and basic.hydra.sweeper.max_batch_size == 1
        chosen = compose("config", ["hydra/sweeper=basic", "hydra.sweeper.max_batch_size=5"], return_hydra_config=True)
        assert not bound_basic_sweeper(chosen) and chosen.hydra.sweeper.max_batch_size == 5
        ours = compose("config", [], return_hydra_config=True)
        assert not bound_basic_sweeper(ours) and ours.hydra.sweeper.max_batch_size is None
    GlobalHydra.instance().clear()


# ---- the fault drill's round-4 cases (scripts/fault_drill.py), read through the session's drill ----------------

@drill_test()
@pytest.mark.parametrize("case, rows", [("uneven_eval", 1), ("sizes_r4", 3), ("stored_data", 2)])
def test_drill_case_round_4(drill, case, rows):
    got = drill.rows_of(case)
    bad = [r for r in got if not r["ok"]]
    assert not bad, f"{bad}\n{drill.console[-4000:]}"
    assert len(got) == rows and not any(r["hang"] or r["leaks"] or r["lost"] for r in got), got
