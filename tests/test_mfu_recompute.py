"""MFU counts the model's FLOPs, never activation checkpointing's recomputed forward (PaLM's and torchtitan's
definition); HFU counts what the devices did, the recomputed forward in (xbench/bench/flops.py,
xbench/metrics/derived.py). Checked against closed forms from the shapes (metrics/llm_sizes.py, no torch),
against torch's FLOP counter over the checkpointed model itself, and on real runs."""

from __future__ import annotations

import math

import pytest
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import FAST, records, run_cli
from xbench.bench.flops import CORRECTED, flops_per_sample
from xbench.data.spec import InputSpec
from xbench.metrics.llm_sizes import SIZES, llama_params
from xbench.models import build
from xbench.models.zoo import abstract_batch, abstract_run
from xbench.training.step import loss_for_task


def _spec(vocab: int, seq: int) -> InputSpec:
    return InputSpec(modality="tokens", num_classes=vocab, vocab_size=vocab, seq_len=seq)


def _model_flops_per_token(size: str, vocab: int, seq: int) -> int:
    """PaLM's model FLOPs per token, 6N + 12·L·d·T: N every parameter that multiplies (all but the input
    embedding's gather and the norms' weights), attention without a causal discount."""
    s = SIZES[size]
    n = llama_params(vocab, **s) - vocab * s["dim"] - (2 * s["layers"] + 1) * s["dim"]
    return 6 * n + 12 * s["layers"] * s["dim"] * seq


def _recomputed_flops_per_token(size: str, seq: int) -> int:
    """The forward the checkpointed blocks redo in backward: every block matmul but SwiGLU's last (w2: torch's
    non-reentrant checkpoint stops once the tensors backward saved are back, and w2's output is not one of
    them), and attention's two (4·L·d·T); the output head is outside the blocks."""
    s = SIZES[size]
    d, f, layers = s["dim"], s["ffn_dim"], s["layers"]
    kv = s["kv_heads"] * d // s["heads"]
    block_matmuls = 2 * d * d + 2 * d * kv + 3 * d * f
    return 2 * layers * (block_matmuls - d * f) + 4 * layers * d * seq


def _counted_as_run(spec: InputSpec, options: dict, batch: int = 2) -> float:
    """fwd+bwd FLOPs per sample of the model exactly as built (checkpointing and all), counted here."""
    def count(device):
        model = build("llama", spec, options).train()
        inputs, targets = abstract_batch(spec, batch, "lm", device)
        with FlopCounterMode(display=False, custom_mapping=CORRECTED) as counter:
            loss_for_task("lm", model(inputs), targets).backward()
        return counter.get_total_flops()

    return abstract_run(count) / batch


@pytest.mark.parametrize("size,vocab,seq", [("tiny", 256, 64), ("small", 512, 128)])
def test_model_flops_leave_recomputation_out_and_hardware_flops_count_it(size, vocab, seq):
    spec = _spec(vocab, seq)
    plain = flops_per_sample("llama", spec, {"size": size})
    ckpt = flops_per_sample("llama", spec, {"size": size, "checkpoint_blocks": True})
    # model FLOPs: the same with and without checkpointing, and PaLM's closed form exactly
    assert ckpt["train"] == plain["train"] == _model_flops_per_token(size, vocab, seq) * seq
    assert ckpt["forward"] == plain["forward"]
    assert "train_hardware" not in plain  # nothing recomputed: no second figure
    # hardware FLOPs: what torch's counter sees on the checkpointed model, = model + the recomputed forward
    assert ckpt["train_hardware"] == _counted_as_run(spec, {"size": size, "checkpoint_blocks": True})
    assert ckpt["train_hardware"] - ckpt["train"] == _recomputed_flops_per_token(size, seq) * seq
    # the recomputed part is most of a forward (not the output head, not w2): a bit under 1/3 of fwd+bwd
    assert 0.6 * ckpt["forward"] < ckpt["train_hardware"] - ckpt["train"] < ckpt["forward"]


def test_fsdp_activation_checkpointing_gives_the_same_hardware_count_as_the_decoders_own():
    """FSDP's checkpoint wrapper (parallel.activation_checkpointing) recomputes the same blocks: the
    strategy hands its wrapping to the FLOP counter, which counts the hardware FLOPs with it."""
    from omegaconf import OmegaConf

    from xbench import parallel
    from xbench.api import compose
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["+workload=llama_tiny_tokens", "platform=cpu", "precision=amp_bf16",
                                       "parallel=fsdp", "parallel.world_size=2", "logger=none",
                                       "parallel.activation_checkpointing=true"]))
    strategy = parallel.create(cfg.parallel, RankContext(world_size=2))
    assert strategy.recompute_blocks is not None
    assert parallel.create(cfg.parallel.__class__(name="single"), RankContext()).recompute_blocks is None
    spec = _spec(256, 128)
    under_fsdp = flops_per_sample("llama", spec, {"size": "tiny"}, recompute_blocks=strategy.recompute_blocks)
    own = flops_per_sample("llama", spec, {"size": "tiny", "checkpoint_blocks": True})
    assert under_fsdp == own
    assert under_fsdp["train"] == _model_flops_per_token("tiny", 256, 128) * 128


def test_mfu_from_model_flops_hfu_from_hardware_flops():
    from xbench.metrics.derived import derive

    m = {"throughput_samples_per_s": 10.0, "devices": 2, "compute_dtype": "bf16", "flops_per_sample_train": 3e12,
         "flops_per_sample_train_hardware": 4e12}
    cfg = {"data": {"modality": "tokens", "seq_len": 100}, "platform": {"peak_tflops": {"bf16": 100.0}}}
    d = derive(m, cfg)
    assert d["mfu"] == pytest.approx(10 * 3e12 / 200e12) == pytest.approx(d["mfu_per_token"])
    assert d["hfu"] == pytest.approx(10 * 4e12 / 200e12)
    assert d["achieved_tflops"] == pytest.approx(30.0) and d["achieved_hardware_tflops"] == pytest.approx(40.0)
    del m["flops_per_sample_train_hardware"]
    assert "hfu" not in derive(m, cfg) and "achieved_hardware_tflops" not in derive(m, cfg)


def test_the_efficiency_table_shows_hfu_beside_mfu_where_blocks_were_recomputed(tmp_path):
    from xbench.analysis.frame import load
    from xbench.records.store import write_record
    from xbench.report.fake import fake_record
    from xbench.report.rows import Context
    from xbench.report.tables import build_tables

    plain = fake_record("plain", throughput=1000.0, peak_tflops_fp32=1.0, batch_size=16, experiment="fx_hfu")
    ckpt = fake_record("ckpt", throughput=800.0, peak_tflops_fp32=1.0, batch_size=32, experiment="fx_hfu",
                       measurements={"flops_per_sample_train_hardware": 4e6})  # model FLOPs: fake's 3e6
    for r in (plain, ckpt):
        write_record(tmp_path, r)
    made, _ = build_tables(load([tmp_path], progress=False).frame, Context())
    rows = {r["global batch"]: r for r in next(t for t in made if t.name == "efficiency").frame.to_dict("records")}
    assert rows[32]["MFU [%]"] == pytest.approx(800 * 3e6 / 1e12 * 100)
    assert rows[32]["HFU [%]"] == pytest.approx(800 * 4e6 / 1e12 * 100)
    assert rows[16]["MFU [%]"] == pytest.approx(1000 * 3e6 / 1e12 * 100) and math.isnan(rows[16]["HFU [%]"])


@pytest.mark.slow
def test_a_checkpointed_run_records_mfu_from_model_flops_and_hfu_from_hardware_flops(store):
    """The tiny decoder, eager on the CPU, with and without checkpoint_blocks (the real CLI, one sweep)."""
    p = run_cli("-m", *FAST, "+workload=llama_tiny_tokens", "platform=cpu", "+platform.peak_tflops.fp32=1.0",
                "bench.threads=1", "+model.options.checkpoint_blocks=false,true", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["config"]["model"]["options"].get("checkpoint_blocks"): r for r in records(store)}
    assert set(recs) == {False, True} and all(r["status"] == "ok" for r in recs.values())
    plain, ckpt = recs[False], recs[True]
    m, d = ckpt["measurements"], ckpt["derived"]
    seq = ckpt["config"]["data"]["seq_len"]
    assert m["flops_per_sample_train"] == plain["measurements"]["flops_per_sample_train"] \
        == _model_flops_per_token("tiny", ckpt["config"]["data"]["vocab_size"], seq) * seq
    assert m["flops_per_sample_train_hardware"] > m["flops_per_sample_train"]
    peak = 1e12 * m["devices"]
    assert d["mfu"] == pytest.approx(m["throughput_samples_per_s"] * m["flops_per_sample_train"] / peak)
    assert d["hfu"] == pytest.approx(m["throughput_samples_per_s"] * m["flops_per_sample_train_hardware"] / peak)
    assert d["hfu"] > d["mfu"] > 0
    assert "hfu" not in plain["derived"] and "flops_per_sample_train_hardware" not in plain["measurements"]
    assert plain["derived"]["mfu"] > 0
    assert p.stdout.count("HFU (with recomputation)") == 1  # the console summary: the checkpointed run only
