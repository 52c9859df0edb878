"""Real text data sets: IMDb reviews (aclImdb folders), tweets (the Sentiment140 CSV and the GPU-cloud
study's "Twitter Sentiment Analysis Dataset" CSV), a plain text file (as characters, or as UTF-8 bytes for
the decoder's language modelling: `text_bytes`; or as a byte-level BPE trained here on the training split:
`text_bpe`).

Tokenisation is deterministic (lower-case, a fixed regular expression); the vocabulary is the
`vocab_size - 2` most frequent tokens of the training split, ties broken alphabetically, with id 0 for
padding and 1 for unknown words. With `data.ngrams: 2` word bigrams compete for the same vocabulary
(fastText's n-gram features) and are appended after the words. Sequences keep their first `seq_len`
tokens and are padded on the left (as Keras did in the studies). The encoded splits and the vocabulary
are cached beside the data (`.xbench_cache/`, or ~/.cache/xbench when that folder is read-only),
keyed by the input files' sizes and mtimes and the tokenisation settings.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from xbench.data.loaders import Splits, malformed

PAD, UNK = 0, 1
CACHE_VERSION = 2  # bump when tokenisation changes
SPLIT_SEED = 0  # the tweets' 90/10 split is the same on every machine
CHAR_STRIDE = 3  # character windows start every 3 characters, as the Keras Nietzsche example
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?|[^\w\s]|_")  # words (with an apostrophe part), or one symbol


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.replace("<br />", " ").lower())


def with_ngrams(words: list[str], n: int) -> list[str]:
    grams = list(words)
    for k in range(2, n + 1):
        grams += [" ".join(words[i:i + k]) for i in range(len(words) - k + 1)]
    return grams


def build_vocab(docs: list[list[str]], size: int) -> list[str]:
    counts = Counter(t for d in docs for t in d)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(0, size - 2)]
    return ["<pad>", "<unk>", *(t for t, _ in ranked)]


def encode(docs: list[list[str]], vocab: list[str], seq_len: int) -> torch.Tensor:
    """(N, seq_len) int64: first seq_len in-vocabulary ids, left-padded with 0. Unknown words -> 1;
    unknown n-grams (tokens with a space) are dropped, as fastText does."""
    index = {t: i for i, t in enumerate(vocab)}
    out = torch.zeros(len(docs), seq_len, dtype=torch.long)
    for row, doc in enumerate(docs):
        ids = [index.get(t, UNK) for t in doc if t in index or " " not in t][:seq_len]
        if ids:
            out[row, seq_len - len(ids):] = torch.tensor(ids)
    return out


def _cache_file(data, inputs: list[Path], extra: dict) -> Path:
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in inputs]
    key = json.dumps({"v": CACHE_VERSION, "source": data.source, "seq_len": data.seq_len,
                      "vocab_size": data.vocab_size, "ngrams": getattr(data, "ngrams", 1), "files": stats,
                      **extra}, sort_keys=True)
    name = f"{data.source}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.pt"
    root = Path(data.path)
    beside = (root if root.is_dir() else root.parent) / ".xbench_cache"
    try:
        beside.mkdir(exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside / name
    except OSError:
        pass
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xbench"
    home.mkdir(parents=True, exist_ok=True)
    return home / name


def _cached(path: Path, make) -> dict:
    """Load the cached encoding, or make it and write it atomically (tmp file + rename)."""
    if path.is_file():
        return torch.load(path, weights_only=True)
    value = make()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(value["vocab"], ensure_ascii=False))  # human-readable copy of the vocabulary
    os.replace(tmp, path.with_suffix(".vocab.json"))
    torch.save(value, tmp)  # ranks building at once each write their own tmp file; the rename is atomic
    os.replace(tmp, path)
    return value


def _classification(data, train_docs, train_y, eval_docs, eval_y, inputs: list[Path], extra=None) -> Splits:
    n = getattr(data, "ngrams", 1)

    def make():
        tr = [with_ngrams(d, n) for d in train_docs()]
        ev = [with_ngrams(d, n) for d in eval_docs()]
        vocab = build_vocab(tr, data.vocab_size)
        return {"vocab": vocab, "train_x": encode(tr, vocab, data.seq_len), "train_y": train_y(),
                "eval_x": encode(ev, vocab, data.seq_len), "eval_y": eval_y()}

    cache = _cache_file(data, inputs, extra or {})
    c = _cached(cache, make)
    for y in (c["train_y"], c["eval_y"]):
        if len(y) and y.max() >= data.num_classes:
            raise malformed(data, f"labels reach {int(y.max())} but data.num_classes={data.num_classes}")
    return Splits(TensorDataset(c["train_x"], c["train_y"]), TensorDataset(c["eval_x"], c["eval_y"]),
                  info={"train": len(c["train_y"]), "eval": len(c["eval_y"]), "vocab": len(c["vocab"]),
                        "cache": str(cache)})


def imdb(data, task: str) -> Splits:
    """aclImdb: pos -> 1, neg -> 0; the published 25k/25k train/test split."""
    root = Path(data.path)
    files = {split: sorted((root / split / "neg").glob("*.txt")) + sorted((root / split / "pos").glob("*.txt"))
             for split in ("train", "test")}
    labels = {split: torch.tensor([int(p.parent.name == "pos") for p in fs], dtype=torch.long)
              for split, fs in files.items()}

    def docs(split):
        out = []
        for p in files[split]:
            try:
                out.append(tokenize(p.read_text(encoding="utf-8")))
            except UnicodeDecodeError as e:
                raise malformed(data, f"{p} is not UTF-8 text ({e})") from e
        return out

    return _classification(data, lambda: docs("train"), lambda: labels["train"], lambda: docs("test"),
                           lambda: labels["test"], files["train"] + files["test"])


SENTIMENT140_LABELS = {"0": 0, "4": 1}  # negative, positive; "2" (neutral, test file only) is skipped


def sentiment140(data, task: str) -> Splits:
    """Sentiment140 CSV: polarity 0 -> 0, 4 -> 1; a fixed shuffle, then data.eval_fraction held out."""
    path = Path(data.path)
    texts, labels = [], []
    with open(path, encoding="latin-1", newline="") as f:
        for line, row in enumerate(csv.reader(f), 1):
            if len(row) != 6:
                raise malformed(data, f"{path} line {line} has {len(row)} columns, expected 6")
            if row[0] == "2":
                continue
            if row[0] not in SENTIMENT140_LABELS:
                raise malformed(data, f"{path} line {line} has polarity {row[0]!r}, expected 0 or 4")
            labels.append(SENTIMENT140_LABELS[row[0]])
            texts.append(row[5])
    return _tweets(data, path, texts, labels)


def _tweets(data, path: Path, texts: list[str], labels: list[int]) -> Splits:
    """Tweets and labels read from one file: a fixed shuffle, then data.eval_fraction held out."""
    if not labels:
        raise malformed(data, f"{path} holds no labelled tweets")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    n_eval = round(len(order) * data.eval_fraction)
    eval_ids, train_ids = order[:n_eval], order[n_eval:]
    y = torch.tensor(labels, dtype=torch.long)
    return _classification(data, lambda: [tokenize(texts[i]) for i in train_ids], lambda: y[train_ids],
                           lambda: [tokenize(texts[i]) for i in eval_ids], lambda: y[eval_ids], [path],
                           {"eval_fraction": data.eval_fraction})


TWITTER_HEADER = ["ItemID", "Sentiment", "SentimentSource", "SentimentText"]
TWITTER_LABELS = {"0": 0, "1": 1}  # negative, positive


def twitter_sentiment(data, task: str) -> Splits:
    """The "Twitter Sentiment Analysis Dataset" CSV: a header, then `ItemID,Sentiment,SentimentSource,
    SentimentText` with Sentiment 1 (positive) / 0 (negative). The text is everything after the third
    comma: quoted ("...", doubled quotes inside) or not, commas included (the published file leaves many
    tweets unquoted). Undecodable bytes are replaced; a fixed shuffle, then data.eval_fraction held out."""
    path = Path(data.path)
    texts, labels = [], []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        header = f.readline().lstrip("\ufeff").rstrip("\r\n")
        if header.split(",") != TWITTER_HEADER:
            hint = (" (it looks like the Sentiment140 CSV: 6 columns, no header, labels 0/4; use data=sentiment140)"
                    if len(next(csv.reader([header]), [])) == 6 else "")
            raise malformed(data, f"{path} line 1 is {header[:80]!r}, expected the header "
                                  f"{','.join(TWITTER_HEADER)}{hint}")
        for line, raw in enumerate(f, 2):
            row = raw.rstrip("\r\n").split(",", 3)
            if row == [""]:
                continue  # a blank line (e.g. at the end)
            if len(row) != 4:
                raise malformed(data, f"{path} line {line} has {len(row)} columns, expected 4 "
                                      f"({','.join(TWITTER_HEADER)})")
            if row[1] not in TWITTER_LABELS:
                raise malformed(data, f"{path} line {line} has Sentiment {row[1]!r}, expected 0 or 1")
            text = row[3]
            if len(text) > 1 and text[0] == text[-1] == '"':
                text = next(csv.reader([text]))[0]  # a quoted field: unquote, "" -> "
            labels.append(TWITTER_LABELS[row[1]])
            texts.append(text)
    return _tweets(data, path, texts, labels)


class CharWindows(Dataset):
    """Windows of seq_len + 1 characters: inputs are the first seq_len, targets the next character at
    every position (task lm)."""

    def __init__(self, ids: torch.Tensor, seq_len: int, stride: int):
        self.ids, self.seq_len, self.stride = ids, seq_len, stride

    def __len__(self) -> int:
        return max(0, (len(self.ids) - self.seq_len - 1) // self.stride + 1)

    def __getitem__(self, i):
        w = self.ids[i * self.stride: i * self.stride + self.seq_len + 1]
        return w[:-1], w[1:]


def text_chars(data, task: str) -> Splits:
    """A plain text file as characters; vocabulary = its distinct characters, sorted (cached beside)."""
    path = Path(data.path)

    def make():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise malformed(data, f"{path} is not UTF-8 text ({e})") from e
        vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(vocab)}
        return {"vocab": vocab, "ids": torch.tensor([index[c] for c in text], dtype=torch.long)}

    c = _cached(_cache_file(data, [path], {"kind": "chars"}), make)
    if len(c["vocab"]) > data.vocab_size:
        raise malformed(data, f"{path} has {len(c['vocab'])} distinct characters but data.vocab_size="
                              f"{data.vocab_size}; set data.vocab_size >= {len(c['vocab'])}")
    ids = c["ids"]
    cut = round(len(ids) * (1 - data.eval_fraction))
    train, ev = CharWindows(ids[:cut], data.seq_len, CHAR_STRIDE), CharWindows(ids[cut:], data.seq_len, data.seq_len)
    if len(train) == 0:
        raise malformed(data, f"{path} is too short for one training window of {data.seq_len + 1} characters")
    return Splits(train, ev, info={"train": len(train), "eval": len(ev), "vocab": len(c["vocab"])})


def text_bytes(data, task: str) -> Splits:
    """A plain text file the user names, tokenised offline as its UTF-8 bytes (vocabulary 256: nothing to
    train, download or cache). Windows of seq_len + 1 bytes, side by side (each byte is predicted once per
    epoch): the first `1 - eval_fraction` of the file trains, the rest is held out."""
    path = Path(data.path)
    if data.vocab_size < 256:
        raise malformed(data, f"data.source=text_bytes reads bytes (256 symbols), but data.vocab_size="
                              f"{data.vocab_size}; set data.vocab_size=256")
    raw = path.read_bytes()
    ids = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long() if raw else torch.zeros(0, dtype=torch.long)
    cut = round(len(ids) * (1 - data.eval_fraction))
    train, ev = _windows(data, path, ids[:cut], ids[cut:], "bytes")
    return Splits(train, ev, info={"train": len(train), "eval": len(ev), "vocab": 256})


def _windows(data, path: Path, train_ids: torch.Tensor, eval_ids: torch.Tensor, unit: str) -> tuple:
    train = CharWindows(train_ids, data.seq_len, data.seq_len)
    ev = CharWindows(eval_ids, data.seq_len, data.seq_len)
    if len(train) == 0 or len(ev) == 0:
        raise malformed(data, f"{path} has {len(train_ids) + len(eval_ids)} {unit}: too short for one training and "
                              f"one held-out window of {data.seq_len + 1} {unit} (data.seq_len={data.seq_len}, "
                              f"data.eval_fraction={data.eval_fraction}); give a longer file or a shorter seq_len")
    return train, ev


BPE_MIN_VOCAB = 256 + 1  # the byte-level alphabet, and at least one merge


def _train_bpe(text: str, vocab_size: int):
    """A byte-level BPE (GPT-2's scheme, Hugging Face `tokenizers`) trained on `text` alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(text.splitlines(keepends=True) or [text], trainer=trainer)
    return tok


def _ids_bytes(ids: list[int]) -> bytes:
    return torch.tensor(ids, dtype=torch.int32).numpy().astype("<i4").tobytes()


def _read_ids(path: Path) -> torch.Tensor:
    raw = bytearray(path.read_bytes())
    return torch.frombuffer(raw, dtype=torch.int32).long() if raw else torch.zeros(0, dtype=torch.long)


def text_bpe(data, task: str) -> Splits:
    """A plain UTF-8 text file the user names, tokenised offline with a byte-level BPE trained here with the
    `tokenizers` library on the training split only (the first `1 - eval_fraction` of the characters; the
    held-out tail is encoded with it, never seen in training), up to `data.vocab_size` tokens. Windows of
    seq_len + 1 tokens side by side, as text_bytes. The tokenizer (its own JSON) and the two token streams
    (little-endian int32) are cached beside the file, keyed by its size, mtime and the settings: read back
    as data, nothing unpickled; the JSON, written last, marks a complete cache."""
    path = Path(data.path)
    if data.vocab_size < BPE_MIN_VOCAB or data.num_classes != data.vocab_size:
        raise malformed(data, f"data.source=text_bpe needs data.vocab_size >= {BPE_MIN_VOCAB} (the 256 byte "
                              f"symbols and at least one merge) and data.num_classes equal to it; got "
                              f"vocab_size={data.vocab_size}, num_classes={data.num_classes}")
    cache = _cache_file(data, [path], {"kind": "bpe", "eval_fraction": data.eval_fraction})
    meta_file, train_file, eval_file = (cache.with_suffix(s) for s in (".bpe.json", ".train.i32", ".eval.i32"))
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else None
    if meta is None or train_file.stat().st_size != 4 * meta["train_tokens"] or \
            eval_file.stat().st_size != 4 * meta["eval_tokens"]:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise malformed(data, f"{path} is not UTF-8 text ({e})") from e
        cut = round(len(text) * (1 - data.eval_fraction))
        tok = _train_bpe(text[:cut], data.vocab_size)
        streams = {f: tok.encode(part).ids for f, part in ((train_file, text[:cut]), (eval_file, text[cut:]))}
        for f, ids in streams.items():  # ranks building at once each write their own tmp file; renames are atomic
            tmp = f.with_suffix(f"{f.suffix}.tmp{os.getpid()}")
            tmp.write_bytes(_ids_bytes(ids))
            os.replace(tmp, f)
        meta = {"tokenizer": json.loads(tok.to_str()), "vocab": tok.get_vocab_size(), "train_chars": cut,
                "train_tokens": len(streams[train_file]), "eval_tokens": len(streams[eval_file])}
        tmp = meta_file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(meta, ensure_ascii=False))
        os.replace(tmp, meta_file)
    train, ev = _windows(data, path, _read_ids(train_file), _read_ids(eval_file), "tokens")
    return Splits(train, ev, info={"train": len(train), "eval": len(ev), "vocab": meta["vocab"],
                                   "tokens_train": meta["train_tokens"], "tokens_eval": meta["eval_tokens"],
                                   "cache": str(meta_file)})


MASK = 2  # the [MASK] token's id in a text_mlm vocabulary (after <pad> and <unk>)
MLM_SEED = {"train": 1, "eval": 2}  # masks are drawn once per split (static, like MLPerf's prepared BERT data)


def mask_static(ids: torch.Tensor, vocab_size: int, seed: int, fraction: float = 0.15):
    """BERT's masking, drawn once: `fraction` of the real tokens carry a target; of those 80% become [MASK],
    10% a random token, 10% stay. Returns (inputs, targets) with targets -100 where no loss is taken."""
    g = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(ids.shape, generator=g) < fraction) & (ids != PAD)
    targets = torch.where(chosen, ids, torch.full_like(ids, -100))
    roll = torch.rand(ids.shape, generator=g)
    inputs = torch.where(chosen & (roll < 0.8), torch.full_like(ids, MASK), ids)
    random_ids = torch.randint(MASK + 1, max(MASK + 2, vocab_size), ids.shape, generator=g)
    inputs = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, inputs)
    return inputs, targets


def text_mlm(data, task: str) -> Splits:
    """Plain UTF-8 text files (`<path>/*.txt`, e.g. Wikipedia articles extracted one per line) for masked-LM
    training: words tokenised as the other text sets, a vocabulary of the `vocab_size - 3` most frequent
    training words after <pad>, <unk> and [MASK], the stream cut into windows of `seq_len` tokens; the last
    `eval_fraction` of the windows (in file order) held out; masks drawn once per split (cached beside)."""
    root = Path(data.path)
    files = sorted(root.glob("*.txt"))

    def make():
        words = []
        for p in files:
            try:
                words += tokenize(p.read_text(encoding="utf-8"))
            except UnicodeDecodeError as e:
                raise malformed(data, f"{p} is not UTF-8 text ({e})") from e
        n = len(words) // data.seq_len
        if n < 2:
            raise malformed(data, f"{len(words)} words make fewer than two windows of {data.seq_len} tokens")
        cut = min(n - 1, max(1, round(n * (1 - data.eval_fraction))))
        train_words = words[: cut * data.seq_len]
        ranked = build_vocab([train_words], data.vocab_size - 1)[2:]
        vocab = ["<pad>", "<unk>", "[MASK]", *ranked]
        index = {t: i for i, t in enumerate(vocab)}
        ids = torch.tensor([index.get(t, UNK) for t in words[: n * data.seq_len]], dtype=torch.long)
        windows = ids.view(n, data.seq_len)
        tr_x, tr_y = mask_static(windows[:cut], len(vocab), MLM_SEED["train"])
        ev_x, ev_y = mask_static(windows[cut:], len(vocab), MLM_SEED["eval"])
        return {"vocab": vocab, "train_x": tr_x, "train_y": tr_y, "eval_x": ev_x, "eval_y": ev_y}

    cache = _cache_file(data, files, {"kind": "mlm", "eval_fraction": data.eval_fraction})
    c = _cached(cache, make)
    return Splits(TensorDataset(c["train_x"], c["train_y"]), TensorDataset(c["eval_x"], c["eval_y"]),
                  info={"train": len(c["train_y"]), "eval": len(c["eval_y"]), "vocab": len(c["vocab"]),
                        "cache": str(cache)})
