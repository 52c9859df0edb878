"""The data folder's cache is not trusted (R4 item 2): a planted `.xbench_cache` link is refused by name and
nothing is written through it; planted or damaged cache files are caught by their SHA-256 and rebuilt with a
warning that names them; text_bytes holds the file as uint8 (R4 item 5). Real loaders on real files."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from xbench.config import DataConfig
from xbench.data import loaders
from xbench.data.loaders import DataFormatError

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "a", "merry", "band", "of", "otters", "plays", "nearby"]


def _text(path, n=600):
    path.write_text(" ".join(WORDS[i % len(WORDS)] + ("\n" if i % 13 == 12 else "") for i in range(n)))
    return path


def _bpe(path, vocab=300):
    return DataConfig(name="text_bpe", source="text_bpe", modality="tokens", seq_len=16, vocab_size=vocab,
                      num_classes=vocab, path=str(path), eval_fraction=0.1)


def _chars(path):
    return DataConfig(name="text_chars", source="text_chars", modality="tokens", seq_len=16, vocab_size=64,
                      num_classes=64, path=str(path), eval_fraction=0.1)


def test_a_symlinked_cache_folder_is_refused_and_nothing_is_written_through_it(tmp_path):
    corpus = _text(tmp_path / "corpus.txt")
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (tmp_path / ".xbench_cache").symlink_to(victim)
    for data in (_bpe(corpus), _chars(corpus)):
        with pytest.raises(DataFormatError, match=r"data cache folder .*\.xbench_cache is a symbolic link .* "
                                                  r"remove the link"):
            loaders.build(data, "lm")
    assert list(victim.iterdir()) == []  # was: the tokenizer's JSON and streams written into the link's target


def test_a_planted_token_stream_is_caught_by_its_checksum_and_rebuilt(tmp_path):
    corpus = _text(tmp_path / "corpus.txt")
    honest = loaders.build(_bpe(corpus), "lm")
    train_ids = honest.train.ids.clone()
    [stream] = (tmp_path / ".xbench_cache").glob("*.train.i32")
    planted = torch.full((len(train_ids),), 7, dtype=torch.int32).numpy().tobytes()
    assert len(planted) == stream.stat().st_size  # the same size: the old size check passed it
    stream.write_bytes(planted)
    with pytest.warns(UserWarning, match=r"tokenizer cache .*\.bpe\.json was not used .*does not match its checksum"):
        again = loaders.build(_bpe(corpus), "lm")
    assert torch.equal(again.train.ids, train_ids)  # was: trained on a stream of 7s, silently
    assert stream.read_bytes() != planted
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # now intact: read back without a word
        assert torch.equal(loaders.build(_bpe(corpus), "lm").train.ids, train_ids)


def test_a_changed_text_of_the_same_size_and_mtime_is_not_served_the_old_cache(tmp_path):
    corpus = _text(tmp_path / "corpus.txt")
    first = loaders.build(_bpe(corpus), "lm")
    st = corpus.stat()
    corpus.write_text(corpus.read_text().replace("fox", "cat"))  # same length
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.warns(UserWarning, match="its source_sha256 differs"):
        second = loaders.build(_bpe(corpus), "lm")
    assert not torch.equal(first.train.ids, second.train.ids)


def test_a_symlinked_cache_file_is_refused_by_name(tmp_path):
    corpus = _text(tmp_path / "corpus.txt")
    loaders.build(_bpe(corpus), "lm")
    [meta] = (tmp_path / ".xbench_cache").glob("*.bpe.json")
    other = tmp_path / "other.json"
    other.write_text(meta.read_text())
    meta.unlink()
    meta.symlink_to(other)
    with pytest.raises(DataFormatError, match=r"data cache file .*\.bpe\.json is a symbolic link.*remove it"):
        loaders.build(_bpe(corpus), "lm")


def test_a_damaged_pt_cache_is_rebuilt_by_name(tmp_path):
    corpus = _text(tmp_path / "corpus.txt")
    first = loaders.build(_chars(corpus), "lm")
    [cache] = (tmp_path / ".xbench_cache").glob("*.pt")
    assert cache.with_name(cache.name + ".sha256").read_text() and cache.stat().st_size > 100
    cache.write_bytes(cache.read_bytes()[:100])  # cut short (a full disk, a killed copy)
    with pytest.warns(UserWarning, match=rf"data cache {cache} was not used \(it does not match its checksum"):
        again = loaders.build(_chars(corpus), "lm")  # was: torch's zip error, naming no file
    assert torch.equal(again.train.ids, first.train.ids)


def test_text_bytes_holds_the_file_once_as_uint8(tmp_path):
    corpus = _text(tmp_path / "corpus.txt", n=3000)
    data = DataConfig(name="text_bytes", source="text_bytes", modality="tokens", seq_len=32, vocab_size=256,
                      num_classes=256, path=str(corpus), eval_fraction=0.1)
    s = loaders.build(data, "lm")
    size = corpus.stat().st_size
    held = s.train.ids.nbytes + s.eval.ids.nbytes
    assert s.train.ids.dtype == torch.uint8 and held == size  # was: int64, 8x the file
    x, y = s.train[1]
    raw = corpus.read_bytes()
    assert x.dtype == torch.long and x.tolist() == list(raw[32:64]) and y.tolist() == list(raw[33:65])
    assert json.dumps(s.info)  # info stays plain
