"""parallel=xla_fsdp is FSDP, read from the program XLA runs: the tiny Llama decoder's training step on 2 XLA:CPU
devices (SPMD), its HLO as XLA's SPMD partitioner left it (XLA_FLAGS=--xla_dump_hlo_pass_re=spmd-partitioning
beside bench.profile=xla's dump), and its losses against one XLA device at the same global batch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import records
from tests.xla_runs import xla_fsdp_runs  # noqa: F401 - the session's run, read here and by test_fsdp.py

pytestmark = pytest.mark.xla  # torch-xla's own paths: run in .venv-xla (make test-xla)

HLO = "test_xla_fsdp_partitioned_step_gathers_weights_never_activations"
LOSSES = "test_xla_fsdp_trains_like_one_device_on_the_same_global_batch"
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "reduce-scatter", "collective-permute")
# `%name = type opcode(operands), attributes`; a tuple type is parenthesised.
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\((.*?)\)(?:,|$)")


@pytest.fixture
def runs(xla_fsdp_runs):  # noqa: F811  (the fixture)
    """The session's xla_fsdp run and its one-device reference (tests/xla_runs.py: test_fsdp.py reads the first)."""
    return xla_fsdp_runs


def _record(runs, key: str) -> tuple[dict, Path]:
    p = runs[key]
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    [rec] = records(runs.root / key)
    assert rec["status"] == "ok", rec["reason"]
    [run_dir] = [p.parent for p in (runs.root / key).glob("*/record.json")]
    return rec, run_dir


def _dims(hlo_type: str) -> list[tuple[int, ...]]:
    """The dimensions of each array in an HLO type (`f32[64,32]{1,0}`, or a tuple of them)."""
    return [tuple(int(d) for d in dims.split(",") if d) for dims in re.findall(r"[a-z]\w*\[([\d,]*)\]", hlo_type)]


def _instructions(text: str) -> dict[str, tuple[str, str, str]]:
    """name -> (type, opcode, operands) of every instruction of an HLO module's text."""
    return {m[1]: (m[2], m[3], m[4]) for m in map(INSTRUCTION.match, text.splitlines()) if m}


def _param_shapes() -> set[tuple[int, ...]]:
    """The tiny decoder's parameter shapes (dims sorted: a gradient may be laid out transposed)."""
    import torch

    from xbench.data.spec import InputSpec
    from xbench.models.decoder import llama

    with torch.device("meta"):
        model = llama(InputSpec(modality="tokens", num_classes=256, vocab_size=256), size="tiny")
    return {tuple(sorted(p.shape)) for p in model.parameters()}


@pytest.mark.slow
def test_xla_fsdp_partitioned_step_gathers_weights_never_activations(runs):
    """Every collective of the partitioned step is on a parameter-shaped tensor or a scalar (the loss): weights
    all-gathered before use, each gradient all-reduced and only ever sliced to this device's shard (the
    all-reduce + dynamic-slice that XLA's GPU compiler rewrites into a reduce-scatter, its ReduceScatterCreator
    pass; XLA:CPU's pipeline has none, so 0 reduce-scatters here): one per parameter, 21. No all-to-all, no
    collective-permute, nothing of the activations' shapes. Before (parameters and batch annotated, block
    outputs not): each block's output projection ran tensor-parallel, the activations of the whole global
    batch all-gathered to the sharded weight (f32[512,64] -> f32[1024,64]), and an all-to-all per block."""
    rec, run_dir = _record(runs, "fsdp")
    params = _param_shapes()
    files = sorted(run_dir.glob("profile/xla/dump/*after_spmd-partitioning*.txt"))
    assert files, f"no partitioned HLO under {run_dir}/profile/xla/dump"
    gradient_reductions = []
    for f in files:
        ins = _instructions(f.read_text())
        collectives = {n: (t, op) for n, (t, op, _) in ins.items() if op.removesuffix("-start") in COLLECTIVES}
        odd = {n: f"{t} {op}" for n, (t, op) in collectives.items()
               if op.removesuffix("-start") in ("all-to-all", "collective-permute")
               or any(d and tuple(sorted(d)) not in params for d in _dims(t))}
        assert not odd, f"{f.name}: collectives on activations: {odd}"
        reductions = [n for n, (t, op) in collectives.items() if op.startswith("all-reduce") and _dims(t) != [()]]
        for n in reductions:
            users = {op for _, op, operands in ins.values() if re.search(rf"%{re.escape(n)}(?:[,)\s]|$)", operands)}
            assert users == {"dynamic-slice"}, f"{f.name}: gradient {n} is used whole by {users}"
        gradient_reductions.append(len(reductions))
    assert max(gradient_reductions) == 21, gradient_reductions
    m = rec["measurements"]  # the record says so too: 21 parameters sharded, 2 blocks' and the model's output
    assert m["xla_fsdp_sharded_params"] == m["xla_fsdp_params"] == 21 and m["xla_fsdp_batch_sharded_outputs"] == 3


@pytest.mark.slow
def test_xla_fsdp_trains_like_one_device_on_the_same_global_batch(runs):
    """Same weights, same 8 sequences a step: the sharded program's losses are one device's (to 1e-5: the
    sharded reductions round differently in the last bits; measured ~2e-7)."""
    fsdp, _ = _record(runs, "fsdp")
    one, _ = _record(runs, "one")
    assert fsdp["measurements"]["global_batch_size"] == 8 == one["measurements"]["global_batch_size"]
    assert fsdp["measurements"]["devices"] == 2 and fsdp["measurements"]["compiles_timed"] == 0
    a, b = fsdp["series"]["loss"], one["series"]["loss"]
    n = min(len(a), len(b))
    assert n >= 6 and a[-1] < a[0]
    assert a[:n] == pytest.approx(b[:n], rel=1e-5)
