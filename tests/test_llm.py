"""The Llama 3 decoder family (xbench/models/decoder.py): published parameter counts, FLOPs per token
against torch's FLOP counter, the architecture's invariants, and its shape errors."""

from __future__ import annotations

import pytest
import torch

from xbench.bench.flops import flops_per_sample
from xbench.data.spec import InputSpec
from xbench.models import decoder


def _spec(vocab: int, seq: int) -> InputSpec:
    return InputSpec(modality="tokens", num_classes=vocab, vocab_size=vocab, seq_len=seq)


def test_llama31_8b_parameter_count_is_the_published_one():
    """Built on the meta device (nothing allocated): 8.03B with the 128,256-token vocabulary, untied."""
    c = decoder.meta_params(decoder.LLAMA3_VOCAB, size="8b")
    assert c["total"] == pytest.approx(decoder.PUBLISHED_PARAMS["8b"], rel=5e-3)
    assert c["embedding"] == 128256 * 4096
    assert c["matmul"] == c["total"] - c["embedding"] - (2 * 32 + 1) * 4096  # all but the gather and the norms


def test_tied_embeddings_count_once():
    untied = decoder.meta_params(256, size="tiny")
    tied = decoder.meta_params(256, size="tiny", tie_embeddings=True)
    assert untied["total"] - tied["total"] == 256 * 64


@pytest.mark.parametrize("size,vocab,seq", [("tiny", 256, 64), ("small", 512, 128), ("8b", 128256, 1024)])
def test_flops_per_token_formula_matches_the_flop_counter(size, vocab, seq):
    """6N + 12·L·d·T against FlopCounterMode on the meta device, within 3% (it is exact: the counter sees
    the same matmuls, attention's without a causal discount)."""
    counted = flops_per_sample("llama", _spec(vocab, seq), {"size": size})
    s = decoder.SIZES[size]
    formula = decoder.flops_per_token(decoder.meta_params(vocab, size=size)["matmul"], s["layers"], s["dim"], seq)
    assert counted["train"] / seq == pytest.approx(formula["train"], rel=0.03)
    assert counted["forward"] / seq == pytest.approx(formula["forward"], rel=0.03)


def test_decoder_is_causal_and_grouped_query():
    """A token changes no earlier position's logits (causal attention), and K/V have kv_heads heads."""
    torch.manual_seed(0)
    model = decoder.llama(_spec(256, 16), size="tiny").eval()
    assert model.layers[0].attention.wk.out_features == 2 * 16  # 2 K/V heads of 64 / 4
    ids = torch.randint(0, 256, (1, 16))
    changed = ids.clone()
    changed[0, 10] = (ids[0, 10] + 1) % 256
    a, b = model(ids), model(changed)
    assert torch.allclose(a[0, :10], b[0, :10], atol=1e-6)
    assert not torch.allclose(a[0, 10:], b[0, 10:], atol=1e-6)


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = decoder.llama(_spec(256, 16), size="tiny")
    ckpt = decoder.llama(_spec(256, 16), size="tiny", checkpoint_blocks=True)
    ckpt.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 256, (2, 16))
    for m in (plain, ckpt):
        m(ids).float().logsumexp(-1).mean().backward()
    for p, q in zip(plain.parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)


@pytest.mark.parametrize("options,words", [
    ({"size": "9b"}, "size='9b' is unknown"),
    ({"dim": 64, "heads": 5}, "must split into heads=5"),
    ({"heads": 4, "kv_heads": 3}, "multiple of kv_heads=3"),
])
def test_bad_shapes_say_what_is_allowed(options, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        decoder.llama(_spec(256, 16), **options)


def test_tokens_per_s_and_mfu_per_token_are_derived_for_token_runs():
    from xbench.metrics.derived import derive

    m = {"throughput_samples_per_s": 10.0, "devices": 2, "global_batch_size": 8, "flops_per_sample_train": 1e12,
         "compute_dtype": "bf16"}
    cfg = {"data": {"modality": "tokens", "seq_len": 128}, "platform": {"peak_tflops": {"bf16": 100.0}}}
    d = derive(m, cfg)
    assert d["tokens_per_s"] == 1280 and d["tokens_per_s_per_device"] == 640 and d["global_batch_tokens"] == 1024
    assert d["flops_per_token_train"] == pytest.approx(1e12 / 128)
    assert d["mfu_per_token"] == pytest.approx(1280 * 1e12 / 128 / (100e12 * 2)) == pytest.approx(d["mfu"])
    assert "tokens_per_s" not in derive(m, {"data": {"modality": "image"}})


def _corpus(path, sentences: int = 400, seed: int = 0):
    """A text the test writes: seeded sentences over a small vocabulary (~15 KB of UTF-8)."""
    import random

    r = random.Random(seed)
    parts = (["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird", "the farmer"],
             ["sees", "likes", "follows", "paints", "finds", "calls", "watches"],
             ["the river", "a red house", "the green field", "an apple", "the long road", "a quiet town"],
             ["today.", "in the morning.", "again.", "every day.", "at night.", "with care."])
    path.write_text(" ".join(" ".join(r.choice(p) for p in parts).capitalize() for _ in range(sentences)))
    return path


def test_text_bytes_reads_a_named_file_as_bytes_with_a_held_out_tail(tmp_path):
    from xbench.config import DataConfig
    from xbench.data import loaders
    from xbench.data.loaders import DataFormatError

    path = _corpus(tmp_path / "corpus.txt")
    data = DataConfig(name="text_bytes", source="text_bytes", modality="tokens", seq_len=32, vocab_size=256,
                      num_classes=256, path=str(path), eval_fraction=0.1)
    splits = loaders.build(data, "lm")
    raw = path.read_bytes()
    cut = round(len(raw) * 0.9)
    assert splits.info == {"train": (cut - 33) // 32 + 1, "eval": (len(raw) - cut - 33) // 32 + 1, "vocab": 256}
    x, y = splits.train[1]
    assert bytes(x.tolist()) == raw[32:64] and bytes(y.tolist()) == raw[33:65]  # next byte at every position
    assert bytes(splits.eval[0][0].tolist()) == raw[cut:cut + 32]  # held out: the file's tail
    data.vocab_size = 100
    with pytest.raises(DataFormatError, match="reads bytes"):
        loaders.build(data, "lm")
    (tmp_path / "short.txt").write_text("too short")
    data.vocab_size, data.path = 256, str(tmp_path / "short.txt")
    with pytest.raises(DataFormatError, match="too short for one training and one held-out window"):
        loaders.build(data, "lm")


TEXT_RUN = ("+workload=llama_tiny_tokens", "data=text_bytes", "data.batch_size=8", "optim.lr=0.003", "platform=cpu",
            "parallel=fsdp", "precision=amp_bf16", "bench.mode=train_to_target", "bench.threads=1",
            "goal.metric=perplexity", "goal.target=8", "goal.max_epochs=10", "logger=none", "logger.progress=false")


@pytest.fixture(scope="module")
def text_runs(tmp_path_factory):
    """The tiny decoder under FSDP2 on 2 gloo ranks, trained on a text file the test writes: once through, and
    once cut by a SIGTERM at step 30 (a sharded checkpoint) and resumed. The cut run is the real CLI (the signal
    stops its launching process); the other two go through the Python API in this process (the CLI's runner;
    the ranks are fresh processes either way), the full one while the cut one runs."""
    import subprocess
    import sys

    import xbench
    from tests.conftest import REPO, cli_env, records

    root = tmp_path_factory.mktemp("text")
    path = _corpus(root / "corpus.txt")
    log = root / "cut.log"  # a file, not a pipe: nobody reads while the full run trains here
    with open(log, "w") as f:
        cut = subprocess.Popen([sys.executable, "-m", "xbench", f"store.root={root / 'cut'}", *TEXT_RUN,
                                f"data.path={path}", "fault.kind=sigterm", "fault.at_step=30"], cwd=REPO,
                               env=cli_env(), stdout=f, stderr=subprocess.STDOUT)
    full = xbench.run([f"store.root={root / 'full'}", *TEXT_RUN, f"data.path={path}"])
    out = {"cut": (cut.wait(timeout=600), log.read_text())}
    [interrupted] = records(root / "cut")
    resumed = xbench.run([f"store.root={root / 'cut'}", "logger=none", "logger.progress=false",
                          f"resume={interrupted['run_id']}"])
    return {"out": out, "status": {"full": (full.status, full.reason), "resumed": (resumed.status, resumed.reason)},
            "interrupted": interrupted, "full": records(root / "full")[0], "resumed": records(root / "cut")[0]}


@pytest.mark.slow
def test_tiny_decoder_trains_to_a_target_perplexity_on_text_under_fsdp(text_runs):
    """A held-out perplexity of 8 (log-perplexity 2.08; uniform bytes would be 256) is reached."""
    assert text_runs["status"]["full"][0] == "ok", text_runs["status"]["full"]
    r = text_runs["full"]
    m = r["measurements"]
    assert r["status"] == "ok" and m["target_reached"] is True and m["world_size"] == 2
    assert all(x["fsdp_params_dtensor"] for x in r["ranks"])


@pytest.mark.slow
def test_fsdp_checkpoint_gathers_the_shards_and_resumes_to_the_same_curve(text_runs):
    """SIGTERM at step 30: rank 0 writes the full state gathered from both ranks' shards; the resume shards
    it again and ends where the uninterrupted run ends (same epochs to target, same final perplexity)."""
    assert text_runs["interrupted"]["status"] == "interrupted"
    assert text_runs["status"]["resumed"][0] == "ok", text_runs["status"]["resumed"]
    full, resumed = text_runs["full"]["measurements"], text_runs["resumed"]["measurements"]
    assert resumed["resumes"] == 1 and resumed["target_reached"] is True
    assert resumed["epochs_to_target"] == full["epochs_to_target"]
    assert resumed["metric_final"] == pytest.approx(full["metric_final"], rel=1e-4)
