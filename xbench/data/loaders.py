"""Registry of real data sets: `data.source` name -> builder, and the on-disk layout each expects.

A builder is `build(data: DataConfig, task: str) -> Splits` (train and eval torch Datasets, plus a
collate function or None for torch's default). It lives in its own module and is imported only when
used, so this registry (and the compat check that reads it) costs no torch import.

Add a data set: write its builder, then one line in SOURCES (see "digits" below) and a
conf/data/<name>.yaml with `source: <name>`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xbench import extras


class DataFormatError(ValueError):
    """A data set is missing or its content is not in the expected format; the message names the path
    and the layout expected."""


@dataclass(frozen=True)
class Source:
    target: str  # "module:function" of the builder
    layout: str  # what data.path must hold, in words (shown in every error)
    modality: str  # image | tokens | features; several allowed as "features|image"
    task: str = "classify"  # the targets it yields: classify (labels) | lm (next tokens) | mlm
    required: tuple[str, ...] = ()  # glob patterns below data.path that must each match (dir sources)
    path_kind: str = "dir"  # dir | file
    needs_path: bool = True
    packages: tuple[str, ...] = ()  # optional packages it imports (xbench/extras.py says how to get them)


@dataclass
class Splits:
    train: Any  # torch Dataset of (inputs, target) pairs
    eval: Any
    collate: Any = None  # DataLoader collate_fn; None = torch's default (all samples have one shape)
    info: dict | None = None  # what was found: sample counts, vocabulary size, cache file


SOURCES: dict[str, Source] = {
    "imagenet": Source(
        "xbench.data.images:imagenet",
        "an image folder: <path>/train/<class>/*.JPEG and <path>/val/<class>/*.JPEG (one folder per class, "
        "the same class folders in both)",
        "image",
        required=("train/*/*", "val/*/*"),
    ),
    "cifar10": Source(
        "xbench.data.images:cifar10",
        "the CIFAR-10 python version, extracted: <path> is cifar-10-batches-py/ holding data_batch_1 .. "
        "data_batch_5 and test_batch (pickled dicts with b'data' (N, 3072) uint8 and b'labels')",
        "image",
        required=(
            "data_batch_1",
            "data_batch_2",
            "data_batch_3",
            "data_batch_4",
            "data_batch_5",
            "test_batch",
        ),
    ),
    "mnist": Source(
        "xbench.data.images:mnist",
        "MNIST idx files, gzipped or not: <path>/train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
        "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]",
        "image",
        required=(
            "train-images-idx3-ubyte*",
            "train-labels-idx1-ubyte*",
            "t10k-images-idx3-ubyte*",
            "t10k-labels-idx1-ubyte*",
        ),
    ),
    "imdb": Source(
        "xbench.data.text:imdb",
        "the IMDb reviews folder aclImdb/: <path>/{train,test}/{pos,neg}/*.txt, one review per file",
        "tokens",
        required=("train/pos/*.txt", "train/neg/*.txt", "test/pos/*.txt", "test/neg/*.txt"),
    ),
    "sentiment140": Source(
        "xbench.data.text:sentiment140",
        "the Sentiment140 CSV file (latin-1, no header, 6 columns: polarity 0/4, id, date, query, user, "
        "text); 90% train / 10% eval as the study",
        "tokens",
        path_kind="file",
    ),
    "twitter_sentiment": Source(
        "xbench.data.text:twitter_sentiment",
        "the Twitter Sentiment Analysis Dataset CSV file (UTF-8, a header ItemID,Sentiment,SentimentSource,"
        "SentimentText, then one tweet a line: Sentiment 1 positive / 0 negative, the text after the third "
        "comma, quoted or not; 1,578,627 tweets); 90% train / 10% eval as the GPU-cloud study",
        "tokens",
        path_kind="file",
    ),
    "text_mlm": Source(
        "xbench.data.text:text_mlm",
        "a folder of plain UTF-8 text files <path>/*.txt (e.g. Wikipedia articles extracted one per line, as "
        "MLPerf's BERT data starts from); word tokens, masked once per split as BERT (15%: 80/10/10)",
        "tokens",
        task="mlm",
        required=("*.txt",),
    ),
    "digits": Source(
        "xbench.data.digits:build",
        "nothing: scikit-learn ships it",
        "features|image",
        needs_path=False,
        packages=("sklearn",),
    ),
    "text_chars": Source(
        "xbench.data.text:text_chars",
        "one plain UTF-8 text file (e.g. nietzsche.txt); first 90% of the characters train, last 10% eval",
        "tokens",
        task="lm",
        path_kind="file",
    ),
    "text_bytes": Source(
        "xbench.data.text:text_bytes",
        "one plain text file (any text you name); its UTF-8 bytes are the tokens (vocabulary 256); the first "
        "1 - data.eval_fraction of it trains, the rest is held out",
        "tokens",
        task="lm",
        path_kind="file",
    ),
    "text_bpe": Source(
        "xbench.data.text:text_bpe",
        "one plain UTF-8 text file (any text you name); a byte-level BPE of up to data.vocab_size tokens is "
        "trained on its first 1 - data.eval_fraction (the training split) and encodes both splits",
        "tokens",
        task="lm",
        path_kind="file",
        packages=("tokenizers",),
    ),
}


def names() -> list[str]:
    return ["synthetic", *SOURCES]


def missing_reasons(source: str, path: str | None) -> list[str]:
    """Why data.path cannot hold `source` (empty: it looks right). Cheap: stats and a few globs only."""
    src = SOURCES[source]
    absent = extras.missing(f"data.source={source}", *src.packages)
    if absent:
        return [absent]
    if not src.needs_path:
        return []
    where = f"data.source={source} expects {src.layout}"
    if not path:
        return [f"data.path is not set; {where}"]
    p = Path(path).expanduser()
    if not p.exists():
        return [f"data.path={path} does not exist; {where}"]
    if src.path_kind == "file" and not p.is_file():
        return [f"data.path={path} is not a file; {where}"]
    if src.path_kind == "dir" and not p.is_dir():
        return [f"data.path={path} is not a folder; {where}"]
    lacking = [pat for pat in src.required if next(iter(p.glob(pat)), None) is None]
    if lacking:
        return [f"data.path={path} has nothing matching {', '.join(lacking)}; {where}"]
    return []


def build(data, task: str) -> Splits:
    """Build the train/eval datasets of `data.source` (raises DataFormatError naming path and layout)."""
    if data.source not in SOURCES:
        raise DataFormatError(f"data.source={data.source!r} is unknown; allowed: {', '.join(names())}")
    reasons = missing_reasons(data.source, data.path)
    if reasons:
        raise DataFormatError(reasons[0])
    module, fn = SOURCES[data.source].target.split(":")
    return getattr(importlib.import_module(module), fn)(data, task)


def malformed(data, what: str) -> DataFormatError:
    """The error for content that is there but wrong: names the file, the problem and the layout."""
    return DataFormatError(f"{what} (data.path={data.path}); data.source={data.source} expects "
                           f"{SOURCES[data.source].layout}")
