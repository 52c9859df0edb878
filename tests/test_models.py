"""The model zoo: every model trains on synthetic data, FLOPs and parameter counts match published
figures, and the fused and unrolled LSTMs compute the same function."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from xbench.bench.flops import flops_per_sample
from xbench.data.spec import InputSpec
from xbench.data.synthetic import MASK_TOKEN_ID, make_batch
from xbench.models import build, get, names
from xbench.models.text import LSTM
from xbench.precision import resolve
from xbench.training.step import make_train_step

CONF = Path(__file__).resolve().parents[1] / "conf"

IMAGE = InputSpec("image", num_classes=10, image_size=16, channels=3)
TOKENS = InputSpec("tokens", num_classes=2, seq_len=12, vocab_size=50)
# Tiny versions of every conf/model option: (config file, input spec, option overrides).
TINY = {
    "mlp": (IMAGE, {"hidden": 32}),
    "cnn_small": (IMAGE, {"width": 8}),
    "vgg_cifar": (IMAGE, {"width": 8, "dropout": 0.0}),
    "resnet18": (IMAGE, {}),
    "resnet50": None,  # the same torchvision code as resnet18; checked for FLOPs and parameters below
    "fasttext": (TOKENS, {"embed_dim": 16}),
    "bilstm": (TOKENS, {"embed_dim": 16, "hidden": 16, "dropout": 0.0}),
    "char_lstm": (TOKENS, {"embed_dim": 16, "hidden": 32}),
    "bert_tiny": (dataclasses.replace(TOKENS, seq_len=16), {"hidden": 32, "heads": 2, "intermediate": 64,
                                                             "dropout": 0.0}),
    "bert_base": None,  # 110M parameters: checked for its parameter count below, too big to train here
    "bert_large": None,  # 335M parameters: counted by a closed form in tests/test_study_setups.py
    "llama_tiny": (dataclasses.replace(TOKENS, seq_len=16), {}),
    "llama_small": None,  # the same decoder as llama_tiny, wider (tests/test_llm.py counts its FLOPs)
    "llama3_8b": None,  # 8.03B parameters: counted on the meta device in tests/test_llm.py
}


def _conf(name):
    return yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())


def test_every_conf_model_is_covered():
    assert set(TINY) == {p.stem for p in (CONF / "model").glob("*.yaml")}
    assert {_conf(n)["name"] for n in TINY} == set(names())


def _train(model_name, spec, options, steps=30, lr=1e-2, batch=8):
    torch.manual_seed(0)
    entry = get(model_name)
    model = build(model_name, spec, options).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    step = make_train_step(model, opt, entry.task, resolve("fp32", "cpu"))
    inputs, targets = make_batch(spec, batch, entry.task, torch.device("cpu"), torch.Generator().manual_seed(0))
    return [float(step(inputs, targets)) for _ in range(steps)]


@pytest.mark.parametrize("conf_name", [n for n, v in TINY.items() if v])
def test_model_trains_on_a_fixed_synthetic_batch(conf_name):
    spec, tiny = TINY[conf_name]
    cfg = _conf(conf_name)
    # ResNet-18 is the heaviest (11M parameters): fewer steps on a smaller batch are enough for it.
    steps, batch = (12, 4) if conf_name == "resnet18" else (30, 8)
    losses = _train(cfg["name"], spec, {**cfg.get("options", {}), **tiny}, steps=steps, batch=batch)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert min(losses[-5:]) < 0.7 * losses[0], f"loss did not fall: {losses[0]:.3f} -> {losses[-5:]}"


def test_unrolled_lstm_trains_too():
    short = dataclasses.replace(TOKENS, seq_len=6)  # a Python loop per time step: keep it short
    losses = _train("bilstm", short, {"embed_dim": 16, "hidden": 16, "dropout": 0.0, "lstm_impl": "unrolled"},
                    steps=20)
    assert min(losses[-5:]) < 0.7 * losses[0]


@pytest.mark.parametrize("layers,bidirectional", [(1, True), (2, True), (2, False)])
def test_fused_and_unrolled_lstm_agree_on_the_same_weights(layers, bidirectional):
    torch.manual_seed(0)
    fused = LSTM(6, 5, layers, bidirectional, impl="fused")
    unrolled = LSTM(6, 5, layers, bidirectional, impl="unrolled")
    unrolled.load_state_dict(fused.state_dict())  # same parameter names and layout
    x = torch.randn(3, 7, 6, requires_grad=True)
    (out_f, h_f), (out_u, h_u) = fused(x), unrolled(x)
    torch.testing.assert_close(out_u, out_f, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_u, h_f, rtol=1e-5, atol=1e-6)
    g_f = torch.autograd.grad(out_f.square().sum(), [x, *fused.parameters()])
    g_u = torch.autograd.grad(out_u.square().sum(), [x, *unrolled.parameters()])
    for a, b in zip(g_u, g_f):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_bilstm_logits_match_across_lstm_impls():
    torch.manual_seed(0)
    opts = {"embed_dim": 8, "hidden": 8}
    fused = build("bilstm", TOKENS, {**opts, "lstm_impl": "fused"}).eval()
    unrolled = build("bilstm", TOKENS, {**opts, "lstm_impl": "unrolled"}).eval()
    unrolled.load_state_dict(fused.state_dict())
    ids = torch.randint(0, TOKENS.vocab_size, (4, TOKENS.seq_len))
    torch.testing.assert_close(unrolled(ids), fused(ids), rtol=1e-5, atol=1e-6)


def test_lstm_flops_are_counted_exactly_for_both_impls():
    # Forward matmuls of a 1-layer biLSTM classifier: per direction and step, 4H x (E + H) MACs, + the head.
    e, h, t, c = 16, 8, TOKENS.seq_len, TOKENS.num_classes
    expected = 2 * t * 2 * 4 * h * (e + h) + 2 * 2 * h * c
    for impl in ("fused", "unrolled"):
        f = flops_per_sample("bilstm", TOKENS, {"embed_dim": e, "hidden": h, "lstm_impl": impl})
        assert f["forward"] == expected, impl
        assert 2 * expected < f["train"] <= 3 * expected, impl


def test_resnet50_training_flops_and_parameters_match_published():
    spec = InputSpec("image", num_classes=1000, image_size=224, channels=3)
    f = flops_per_sample("resnet50", spec, {})
    # Published forward cost ~4.1 GMAC = 8.2 GFLOP; a training sample is ~3x that, ~24.6 GFLOP.
    assert f["train"] == pytest.approx(24.6e9, rel=0.02)
    with torch.device("meta"):
        params = sum(p.numel() for p in build("resnet50", spec, {}).parameters())
    assert params == 25_557_032


def test_bert_base_has_110m_parameters():
    spec = InputSpec("tokens", num_classes=2, seq_len=128, vocab_size=30522)
    with torch.device("meta"):
        params = sum(p.numel() for p in build("bert", spec, _conf("bert_base")["options"]).parameters())
    print(f"bert_base parameters: {params}")
    # Published: "110M"; Hugging Face's BertForMaskedLM (tied decoder, no pooler) has 109,514,298.
    assert params == pytest.approx(110e6, rel=0.01)
    assert params == 109_514_298


@pytest.mark.parametrize("conf_name", sorted(TINY))
def test_flops_are_measured_for_every_model(conf_name):
    cfg = _conf(conf_name)
    spec = (TINY[conf_name] or (IMAGE if get(cfg["name"]).modalities[0] == "image" else TOKENS, {}))[0]
    f = flops_per_sample(cfg["name"], spec, cfg.get("options", {}) | ((TINY[conf_name] or (None, {}))[1]))
    assert f["train"] > f["forward"] > 0


def test_synthetic_mlm_batches_mask_15_percent():
    spec = InputSpec("tokens", num_classes=2, seq_len=128, vocab_size=30522)
    inputs, targets = make_batch(spec, 64, "mlm", torch.device("cpu"), torch.Generator().manual_seed(0))
    masked = targets != -100
    assert masked.float().mean().item() == pytest.approx(0.15, abs=0.01)
    assert (inputs[masked] == MASK_TOKEN_ID).float().mean().item() == pytest.approx(0.8, abs=0.03)
    assert (inputs[~masked] == MASK_TOKEN_ID).float().mean().item() < 0.001  # only by chance elsewhere
