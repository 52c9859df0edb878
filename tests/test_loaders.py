"""Real-data loaders read small files written here in each data set's published format."""

from __future__ import annotations

import csv
import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from xbench.config import DataConfig
from xbench.data import loaders
from xbench.data.loaders import DataFormatError


def _data(source, path, **kw) -> DataConfig:
    return DataConfig(name=source, source=source, path=str(path), **kw)


def _write_idx(path: Path, array: np.ndarray, magic: int, gz: bool) -> None:
    raw = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()
    (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb").write(raw)


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_files(tmp_path, gz):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 7), ("t10k", 3)):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 2051, gz)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8), 2049, gz)
    s = loaders.build(_data("mnist", tmp_path, image_size=28, channels=1), "classify")
    assert (len(s.train), len(s.eval)) == (7, 3)
    x, y = s.train[5]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and int(y) == 5
    assert [int(s.eval[i][1]) for i in range(3)] == [0, 1, 2]


def test_mnist_wrong_magic_names_the_file(tmp_path):
    for prefix in ("train", "t10k"):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", np.zeros((2, 28, 28), np.uint8), 1234, False)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", np.zeros(2, np.uint8), 2049, False)
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte is not an idx file.*expects MNIST idx"):
        loaders.build(_data("mnist", tmp_path, image_size=28, channels=1), "classify")


def _write_cifar(root: Path, per_batch=2, test=3):
    root.mkdir()
    rng = np.random.default_rng(0)
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        n = test if name == "test_batch" else per_batch
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": [(i + j) % 10 for j in range(n)]}
        (root / name).write_bytes(pickle.dumps(d))


@pytest.mark.parametrize("augment", [False, True])
def test_cifar10_python_batches(tmp_path, augment):
    root = tmp_path / "cifar-10-batches-py"
    _write_cifar(root)
    s = loaders.build(_data("cifar10", root, augment=augment), "classify")
    assert (len(s.train), len(s.eval)) == (10, 3)
    x, y = s.train[2]  # first sample of data_batch_2
    assert x.shape == (3, 32, 32) and int(y) == 1
    assert int(s.eval[1][1]) == 6
    if not augment:  # normalisation is exact when nothing moves the pixels
        raw = pickle.loads((root / "data_batch_1").read_bytes())[b"data"][0].reshape(3, 32, 32)
        assert x.shape == raw.shape
        x0 = s.train[0][0]
        assert float(x0[0, 0, 0]) * 0.2470 + 0.4914 == pytest.approx(raw[0, 0, 0] / 255, abs=1e-5)


def test_cifar10_garbage_batch_is_a_clear_error(tmp_path):
    root = tmp_path / "cifar"
    _write_cifar(root)
    (root / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataFormatError, match=r"data_batch_3 is not a CIFAR-10 python batch"):
        loaders.build(_data("cifar10", root), "classify")


@pytest.mark.parametrize("augment", [False, True])
def test_imagenet_image_folder(tmp_path, augment):
    from PIL import Image

    for split, n in (("train", 3), ("val", 1)):
        for c, cls in enumerate(("n01440764", "n01443537")):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40 + 7 * i, 30), (80 * c, 20 * i, 200)).save(tmp_path / split / cls / f"{i}.JPEG")
    s = loaders.build(_data("imagenet", tmp_path, image_size=24, num_classes=1000, augment=augment), "classify")
    assert (len(s.train), len(s.eval), s.info["classes"]) == (6, 2, 2)
    x, y = s.train[4]
    assert x.shape == (3, 24, 24) and y == 1
    assert [s.eval[i][1] for i in range(2)] == [0, 1]


def _write_imdb(root: Path):
    reviews = {("train", "pos"): ["A great, great film.", "Loved it<br />great"],
               ("train", "neg"): ["Awful film.", "Boring and awful", "awful awful"],
               ("test", "pos"): ["great acting"], ("test", "neg"): ["unseen words here"]}
    for (split, label), texts in reviews.items():
        (root / split / label).mkdir(parents=True)
        for i, t in enumerate(texts):
            (root / split / label / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(t)


def test_imdb_folders_tokenise_deterministically_and_cache(tmp_path):
    root = tmp_path / "aclImdb"
    _write_imdb(root)
    data = _data("imdb", root, seq_len=6, vocab_size=8, num_classes=2)
    s = loaders.build(data, "classify")
    assert (len(s.train), len(s.eval)) == (5, 2)
    labels = [int(s.train[i][1]) for i in range(5)]
    assert labels == [0, 0, 0, 1, 1]  # neg files first, then pos
    x = torch.stack([s.train[i][0] for i in range(5)])
    assert x.shape == (5, 6) and x.dtype == torch.long and int(x.max()) < 8
    cache = Path(s.info["cache"])
    assert cache.parent == root / ".xbench_cache" and cache.is_file()
    vocab = __import__("json").loads(cache.with_suffix(".vocab.json").read_text())
    assert vocab[:4] == ["<pad>", "<unk>", "awful", "great"]  # by frequency, ties alphabetical
    assert s.train[2][0].tolist() == [0, 0, 0, 0, 2, 2]  # "awful awful", left-padded
    assert s.eval[0][0].tolist() == [0, 0, 0, 1, 1, 1]  # "unseen words here" -> <unk> x 3
    again = loaders.build(data, "classify")  # from the cache: identical
    assert torch.equal(torch.stack([again.train[i][0] for i in range(5)]), x)


def test_imdb_bigrams_for_fasttext(tmp_path):
    root = tmp_path / "aclImdb"
    _write_imdb(root)
    s = loaders.build(_data("imdb", root, seq_len=10, vocab_size=50, ngrams=2), "classify")
    vocab = __import__("json").loads(Path(s.info["cache"]).with_suffix(".vocab.json").read_text())
    assert "awful awful" in vocab and "great film" in vocab
    row = s.train[2][0].tolist()  # "awful awful" -> awful, awful, "awful awful"
    assert row[-3:] == [vocab.index("awful")] * 2 + [vocab.index("awful awful")]


def _write_tweets(path: Path, n=40):
    with open(path, "w", encoding="latin-1", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for i in range(n):
            pol = "4" if i % 2 else "0"
            w.writerow([pol, str(1467810369 + i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{i}",
                        ("happy day caf\xe9 :)" if pol == "4" else "sad rainy day") + f" #{i}"])
        w.writerow(["2", "1", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", "neutral", "just a tweet"])


def test_sentiment140_csv_labels_and_90_10_split(tmp_path):
    path = tmp_path / "training.1600000.processed.noemoticon.csv"
    _write_tweets(path)
    s = loaders.build(_data("sentiment140", path, seq_len=8, vocab_size=100, num_classes=2), "classify")
    assert (len(s.train), len(s.eval)) == (36, 4)  # the neutral tweet is skipped; 10% held out
    ys = torch.stack([s.train[i][1] for i in range(36)] + [s.eval[i][1] for i in range(4)])
    assert sorted(ys.tolist()) == [0] * 20 + [1] * 20
    vocab = __import__("json").loads(Path(s.info["cache"]).with_suffix(".vocab.json").read_text())
    assert "café" in vocab and "happy" in vocab  # latin-1 decoded
    x, y = s.train[0]
    happy = vocab.index("happy") in x.tolist()
    assert happy == (int(y) == 1)  # the text and its label stay together through the shuffle


def test_sentiment140_bad_row_names_the_line(tmp_path):
    path = tmp_path / "tweets.csv"
    _write_tweets(path, n=3)
    with open(path, "a", encoding="latin-1") as f:
        f.write('"7","1","d","q","u","text"\n')
    with pytest.raises(DataFormatError, match=r"tweets.csv line 5 has polarity '7', expected 0 or 4"):
        loaders.build(_data("sentiment140", path), "classify")


def _write_twitter(path: Path, n=40):
    """The GPU-cloud study's CSV as published: a header; texts quoted (commas, doubled quotes inside) or not
    (commas and all)."""
    lines = ["ItemID,Sentiment,SentimentSource,SentimentText"]
    for i in range(n):
        if i % 2:
            lines.append(f'{i + 1},1,Sentiment140,"happy, sunny day ""yay"" #{i}"')
        else:
            lines.append(f"{i + 1},0,Kaggle,sad, rainy day #{i}")
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")


def test_twitter_sentiment_csv_header_labels_commas_and_90_10_split(tmp_path):
    path = tmp_path / "Sentiment Analysis Dataset.csv"
    _write_twitter(path)
    s = loaders.build(_data("twitter_sentiment", path, seq_len=8, vocab_size=100, num_classes=2), "classify")
    assert (len(s.train), len(s.eval)) == (36, 4)
    ys = torch.stack([s.train[i][1] for i in range(36)] + [s.eval[i][1] for i in range(4)])
    assert sorted(ys.tolist()) == [0] * 20 + [1] * 20
    vocab = __import__("json").loads(Path(s.info["cache"]).with_suffix(".vocab.json").read_text())
    assert {"happy", "sunny", "yay", "sad", "rainy"} <= set(vocab)  # text after the third comma, unquoted
    assert "," in vocab and "kaggle" not in vocab and "sentiment140" not in vocab
    for i in range(36):
        x, y = s.train[i]
        assert (vocab.index("happy") in x.tolist()) == (int(y) == 1)  # text and label stay together


@pytest.mark.parametrize("content,match", [
    ("ItemID,Sentiment,Text\n1,0,x\n", r"line 1 is 'ItemID,Sentiment,Text', expected the header"),
    ('"0","1467810369","Mon Apr 06 22:19:45 PDT 2009","NO_QUERY","user","sad"\n',
     r"looks like the Sentiment140 CSV: 6 columns, no header, labels 0/4; use data=sentiment140"),
    ("ItemID,Sentiment,SentimentSource,SentimentText\n1,0,S,ok\n2,4,S,four\n", r"line 3 has Sentiment '4', expected 0 or 1"),
    ("ItemID,Sentiment,SentimentSource,SentimentText\n1,0\n", r"line 2 has 2 columns, expected 4"),
    ("ItemID,Sentiment,SentimentSource,SentimentText\n", r"holds no labelled tweets"),
])
def test_twitter_sentiment_malformed_file_names_file_line_and_layout(tmp_path, content, match):
    path = tmp_path / "tweets.csv"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=match) as e:
        loaders.build(_data("twitter_sentiment", path), "classify")
    assert "tweets.csv" in str(e.value) and "ItemID,Sentiment,SentimentSource,SentimentText" in str(e.value)


def test_text_file_as_character_windows(tmp_path):
    path = tmp_path / "nietzsche.txt"
    text = "Supposing that Truth is a woman--what then? " * 10
    path.write_text(text)
    s = loaders.build(_data("text_chars", path, seq_len=8, vocab_size=64, eval_fraction=0.1), "lm")
    vocab = sorted(set(text))
    x, y = s.train[1]
    assert x.shape == y.shape == (8,)
    assert "".join(vocab[i] for i in x.tolist()) == text[3:11]  # windows start every 3 characters
    assert torch.equal(y[:-1], x[1:])  # targets are the next characters
    cut = round(len(text) * 0.9)
    assert len(s.train) == (cut - 9) // 3 + 1 and len(s.eval) == (len(text) - cut - 9) // 8 + 1
    with pytest.raises(DataFormatError, match="distinct characters but data.vocab_size=4"):
        loaders.build(_data("text_chars", path, seq_len=8, vocab_size=4), "lm")


@pytest.mark.parametrize("source", sorted(k for k, v in loaders.SOURCES.items() if v.needs_path))
def test_missing_path_names_it_and_the_layout(tmp_path, source):
    missing = tmp_path / "nowhere"
    [reason] = loaders.missing_reasons(source, str(missing))
    assert str(missing) in reason and loaders.SOURCES[source].layout in reason
    with pytest.raises(DataFormatError) as e:
        loaders.build(_data(source, missing), "classify")
    assert str(missing) in str(e.value) and "expects" in str(e.value)


def test_folder_without_the_expected_files_names_what_is_lacking(tmp_path):
    (tmp_path / "train" / "pos").mkdir(parents=True)
    [reason] = loaders.missing_reasons("imdb", str(tmp_path))
    assert "train/pos/*.txt" in reason and "aclImdb" in reason


def test_ranks_read_disjoint_shards_and_epochs_cycle():
    from torch.utils.data import TensorDataset

    from xbench.data.feed import device_feed, make_loader

    ds = TensorDataset(torch.arange(20).float().unsqueeze(1), torch.arange(20))
    cfg = DataConfig(name="t", source="mnist", batch_size=5)
    seen = []
    for rank in (0, 1):
        nb = device_feed(make_loader(ds, cfg, rank, 2, seed=0), torch.device("cpu"))
        epoch0 = torch.cat([nb()[1] for _ in range(2)])  # 10 samples per rank = 2 batches
        epoch1 = torch.cat([nb()[1] for _ in range(2)])  # cycles into a new epoch, reshuffled
        assert sorted(epoch0.tolist()) != epoch0.tolist() and sorted(epoch1.tolist()) != epoch1.tolist()  # shuffled
        assert not torch.equal(epoch0, epoch1)
        seen.append(set(epoch0.tolist()))
    assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] == set(range(20))
    with pytest.raises(ValueError, match="fewer than one batch"):
        make_loader(ds, DataConfig(name="t", source="mnist", batch_size=16), 0, 2, seed=0)


def test_digits_comes_from_the_registry_without_a_path():
    assert loaders.missing_reasons("digits", None) == []
    splits = loaders.build(_data("digits", None, modality="image"), "classify")
    x, y = splits.train[0]
    assert x.shape == (1, 8, 8) and 0 <= int(y) < 10
    assert len(splits.train) + len(splits.eval) == 1797 and len(splits.eval) == 180
