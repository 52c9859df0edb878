"""data.source=text_bpe (xbench/data/text.py): a byte-level BPE trained here with `tokenizers` on the training
split of a text file the test writes, its held-out tail, the cache beside the file (read as data), the errors;
and the tiny decoder training on it through the real CLI."""

from __future__ import annotations

import json

import pytest

from tests.conftest import records, run_cli
from tests.test_llm import _corpus

TAIL_WORD = "zqxjvw"  # only in the held-out tail: a BPE trained on the training split must not know it


def _text(path):
    """The corpus, then a tail that repeats a word found nowhere before it (the last ~10% of the file)."""
    _corpus(path)
    body = path.read_text()
    tail = " ".join([TAIL_WORD] * (len(body) // 9 // (len(TAIL_WORD) + 1)))
    path.write_text(body + " " + tail)
    return path


def _data(path, vocab: int = 400, **kw):
    from xbench.config import DataConfig

    return DataConfig(name="text_bpe", source="text_bpe", modality="tokens", seq_len=32, vocab_size=vocab,
                      num_classes=kw.pop("num_classes", vocab), path=str(path), eval_fraction=0.1, **kw)


def test_bpe_is_trained_on_the_training_split_only_and_cached_as_data(tmp_path):
    from tokenizers import Tokenizer

    from xbench.data import loaders
    from xbench.data.text import _train_bpe

    path = _text(tmp_path / "corpus.txt")
    text = path.read_text()
    cut = round(len(text) * 0.9)
    assert TAIL_WORD not in text[:cut] and TAIL_WORD in text[cut:]
    splits = loaders.build(_data(path), "lm")
    meta_file = tmp_path / ".xbench_cache" / next(p.name for p in (tmp_path / ".xbench_cache").glob("*.bpe.json"))
    meta = json.loads(meta_file.read_text())  # JSON and raw int32 streams: nothing here is a pickle
    assert sorted(p.suffix for p in meta_file.parent.iterdir()) == [".i32", ".i32", ".json"]
    tok = Tokenizer.from_str(json.dumps(meta["tokenizer"]))
    assert 256 < splits.info["vocab"] == tok.get_vocab_size() <= 400
    vocab = tok.get_vocab()
    assert not any("zqx" in t for t in vocab)  # the held-out word was never merged ...
    assert any("zqx" in t for t in _train_bpe(text, 400).get_vocab())  # ... as it is when the tail is trained on
    # Windows of seq_len + 1 tokens side by side; the streams decode back to the two splits.
    train_ids = [int(i) for i in splits.train.ids]
    assert tok.decode(train_ids) == text[:cut] and tok.decode([int(i) for i in splits.eval.ids]) == text[cut:]
    x, y = splits.train[1]
    assert x.tolist() == train_ids[32:64] and y.tolist() == train_ids[33:65]
    assert max(train_ids) < 400 and splits.info["train"] == (len(train_ids) - 33) // 32 + 1
    assert splits.info["tokens_train"] < cut / 2  # merges: far fewer tokens than bytes
    # A second build reads the cache (the same streams, no retraining: the marker is untouched).
    stamp = meta_file.stat().st_mtime_ns
    again = loaders.build(_data(path), "lm")
    assert meta_file.stat().st_mtime_ns == stamp and again.train.ids.tolist() == train_ids


def test_bpe_bad_inputs_say_what_is_allowed(tmp_path):
    from xbench.data import loaders
    from xbench.data.loaders import DataFormatError

    path = _text(tmp_path / "corpus.txt")
    with pytest.raises(DataFormatError, match=r"vocab_size >= 257.*got vocab_size=256"):
        loaders.build(_data(path, vocab=256), "lm")
    with pytest.raises(DataFormatError, match="num_classes equal to it"):
        loaders.build(_data(path, num_classes=256), "lm")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 ".encode("latin-1") * 200)
    with pytest.raises(DataFormatError, match="is not UTF-8 text"):
        loaders.build(_data(bad), "lm")
    short = tmp_path / "short.txt"
    short.write_text("too short")
    with pytest.raises(DataFormatError, match="tokens: too short for one training and one held-out window"):
        loaders.build(_data(short), "lm")


@pytest.mark.slow
def test_tiny_decoder_trains_to_a_target_log_perplexity_on_bpe_tokens_through_the_cli(tmp_path):
    """The real CLI: BPE (512 tokens) trained on the file's first 90%, the tiny decoder trained until the held-out
    log-perplexity is at most 2.5 nats (uniform over 512 tokens would be 6.24); the curve falls epoch by epoch."""
    path = _corpus(tmp_path / "corpus.txt")
    store = tmp_path / "results"
    p = run_cli("+workload=llama_tiny_tokens", "data=text_bpe", f"data.path={path}", "data.vocab_size=512",
                "data.num_classes=512", "data.seq_len=64", "data.batch_size=8", "optim.lr=0.003", "platform=cpu",
                "bench.threads=1", "bench.mode=train_to_target", "goal.metric=log_perplexity", "goal.target=2.5",
                "goal.max_epochs=10", "logger=none", "logger.progress=false", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    [r] = records(store)
    m = r["measurements"]
    assert r["status"] == "ok" and r["config"]["data"]["source"] == "text_bpe"
    assert m["goal_metric"] == "log_perplexity" and m["target_reached"] is True and m["metric_final"] <= 2.5
    curve = r["series"]["log_perplexity"]
    assert curve[0] > curve[-1] and all(0 < v < 6.3 for v in curve)

def test_log_perplexity_is_a_goal_metric_lower_is_better():
    """goal.metric=log_perplexity: the mean held-out cross-entropy (nats), ln of perplexity; reached at or below
    the target; accepted for a language model with any positive target (not a fraction), refused for a
    classifier, and several targets must decrease."""
    import math

    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench.epochs import metric_value
    from xbench.bench.training import better
    from xbench.modes.target import goal_rules

    assert metric_value("log_perplexity", 0, 10, 33.0) == pytest.approx(3.3)
    assert metric_value("log_perplexity", 0, 10, 33.0) == pytest.approx(math.log(metric_value("perplexity", 0, 10, 33.0)))
    assert better("log_perplexity", 3.29, 3.3) and not better("log_perplexity", 3.31, 3.3)

    def rules(*o):
        return goal_rules(OmegaConf.to_object(compose(["+workload=llama_tiny_tokens", "logger=none", *o])))

    assert rules("goal.metric=log_perplexity", "goal.target=3.3") == []
    assert any("must decrease" in r for r in rules("goal.metric=log_perplexity", "goal.targets=[2.0,3.0]"))
    [r] = [r for r in goal_rules(OmegaConf.to_object(compose(["model=mlp", "goal.metric=log_perplexity",
                                                                "goal.target=3.3", "logger=none"])))]
    assert "needs a lm/mlm model" in r
