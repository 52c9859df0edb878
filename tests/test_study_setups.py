"""The studies' full-scale commands compose to the articles' own setups (each fact checked against the article's
text): study 4 trains MLPerf v0.7's BERT, which is BERT-large; study 3's low-end Paperspace machine is the P6000;
study 2's biLSTM runs Keras' unrolled implementation; the reports normalise where the articles did."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import CONF
from xbench import studies
from xbench.data.spec import InputSpec
from xbench.models import build
from xbench.studies.sweep import compose_point, expand

pytestmark = pytest.mark.usefixtures("cached_compose")


def _configs(command: str) -> list:
    cmd = studies.parse(command)
    jobs = expand(CONF, cmd.overrides) if cmd.multirun else [cmd.overrides]
    return [compose_point(CONF, job) for job in jobs]


def bert_params(vocab: int, hidden: int, layers: int, intermediate: int, positions: int, types: int = 2) -> int:
    """BERT with the tied masked-LM head and no pooler, counted from its shapes: embeddings (word, position, type,
    LayerNorm); per layer Q/K/V/output projections with biases, the two FFN matrices with biases, two LayerNorms;
    the head's dense + LayerNorm and the decoder's own bias."""
    h, i = hidden, intermediate
    embeddings = (vocab + positions + types) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    head = h * h + h + 2 * h + vocab
    return embeddings + layers * layer + head


def test_the_closed_form_counts_bert_base_as_built():
    assert bert_params(30522, 768, 12, 3072, 512) == 109_514_298  # tests/test_models.py's count of the built model


def test_study_4_trains_bert_large_in_every_bert_command():
    """MLPerf Training v0.7's BERT (the article's 23.1 -> 168 sequences/s, 3 million sequences on a v3-32) is
    BERT-large: 24 layers, 1024 hidden, 16 heads."""
    s = studies.get("xla_speedup")
    bert = [c for c in s["full_scale"] if "bert" in c["command"]]
    assert {c["id"] for c in bert} >= {"bert_8_v100", "bert_max_batch", "bert_v3_32", "bert_mlperf_8_v100",
                                      "bert_mlperf_v3_32"}
    for c in bert:
        for cfg in _configs(c["command"]):
            o = cfg.model.options
            assert (cfg.model.name, o.layers, o.hidden, o.heads, o.intermediate, cfg.data.seq_len) == (
                "bert", 24, 1024, 16, 4096, 512), c["id"]


def test_study_4_xla_side_on_gpus_is_torchax_and_on_tpus_torch_xla():
    s = studies.get("xla_speedup")
    by = {c["id"]: _configs(c["command"]) for c in s["full_scale"]}
    assert {(c.runtime.name, c.parallel.name) for c in by["bert_8_v100"]} == {("torchax", "jax_dp"), ("eager", "ddp")}
    assert {c.runtime.name for c in by["bert_max_batch"]} == {"torchax", "eager"}
    assert {(c.runtime.name, c.parallel.name) for c in by["bert_v3_32"]} == {("xla", "xla_spmd")}
    assert all(c.parallel.world_size == 8 for c in by["bert_8_v100"])


def test_bert_large_builds_through_the_same_code_at_a_cpu_size_with_335m_parameters():
    """The workload composed as the full-scale command composes it, at 16 tokens (a CPU test's size), built by
    xbench's model registry on the meta device: 24 x 1024 x 16 heads and 335.2M parameters by the closed form."""
    cfg = compose_point(CONF, ["+experiment=xla_speedup", "workload=bert_large_wikipedia_synthetic", "parallel=single",
                               "data.seq_len=16", "data.batch_size=1"])
    spec = InputSpec.from_data(cfg.data)
    options = OmegaConf.to_container(cfg.model.options)
    with torch.device("meta"):
        model = build(cfg.model.name, spec, options)
    layers = model.encoder.layers
    assert len(layers) == 24 and layers[0].self_attn.embed_dim == 1024 and layers[0].self_attn.num_heads == 16
    params = sum(p.numel() for p in model.parameters())
    want = bert_params(spec.vocab_size, 1024, 24, 4096, options["max_position"])
    print(f"BERT-large parameters: {params:,} (closed form {want:,})")
    assert params == want == 335_174_458 and 335e6 <= params <= 340e6
