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
keyed by the input files' sizes and mtimes and the tokenisation settings. The cache is not trusted: it is
written and read without following links (a symlinked cache folder or file is refused by name), and each
cache file is checked against a SHA-256 written beside it (the BPE streams: in their JSON, with the source
text's), so a damaged or planted cache is rebuilt with a warning that names it, never trained on.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import re
import stat
import sys
import warnings
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
    _real_folder(data, beside)
    try:
        beside.mkdir(exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside / name
    except OSError:
        pass
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xbench"
    home.mkdir(parents=True, exist_ok=True)
    _real_folder(data, home)
    return home / name


def _real_folder(data, folder: Path) -> None:
    """Refuse a cache folder that is a link: its writes would land wherever the link points."""
    if folder.is_symlink():
        raise malformed(
            data,
            f"the data cache folder {folder} is a symbolic link (to {os.readlink(folder)}); "
            f"xbench writes its cache only into a real folder: remove the link (rm {folder})",
        )


def _refuse_link(data, path: Path, e: OSError):
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
        raise malformed(data, f"the data cache file {path} is a symbolic link; xbench reads and writes its "
                              f"cache only as real files: remove it (rm {path}) and run again") from None
    raise e


def _read_cache(data, path: Path) -> bytes | None:
    """A cache file's bytes, never through a link (refused by name); None when it is absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        _refuse_link(data, path, e)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise malformed(
                data, f"the data cache file {path} is not a regular file; remove it and run again"
            )
        return f.read()


def _write_cache(data, path: Path, payload: bytes) -> str:
    """Write `payload` to `path` atomically (a tmp file of this process, then a rename: ranks building at once
    each write their own), never through a link; its SHA-256."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a crashed run's leftover (a link is removed, not followed)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        _refuse_link(data, tmp, e)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    os.replace(tmp, path)  # replaces a planted link itself, never what it points to
    return hashlib.sha256(payload).hexdigest()


def _digest_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _cached(path: Path, make, data=None) -> dict:
    """Load the cached encoding if its SHA-256 (written beside it, last) matches; else make it and write it
    (vocabulary copy, data, then the digest that marks it complete). A damaged or planted cache is rebuilt,
    with a warning that names it."""
    raw = _read_cache(data, path)
    if raw is not None:
        want = (_read_cache(data, _digest_file(path)) or b"").decode(errors="replace").strip()
        if want == hashlib.sha256(raw).hexdigest():
            try:
                return torch.load(io.BytesIO(raw), weights_only=True)
            except Exception as e:  # checksummed yet unreadable (a torch format change): rebuilt
                why = f"unreadable ({type(e).__name__})"
        else:
            why = "its checksum is missing" if not want else "it does not match its checksum"
        warnings.warn(f"xbench: the data cache {path} was not used ({why}: damaged, or written by hand); "
                      "rebuilding it from the data", stacklevel=2)
    value = make()
    # human-readable copy of the vocabulary
    _write_cache(
        data, path.with_suffix(".vocab.json"), json.dumps(value["vocab"], ensure_ascii=False).encode()
    )
    buf = io.BytesIO()
    torch.save(value, buf)
    digest = _write_cache(data, path, buf.getvalue())
    _write_cache(data, _digest_file(path), digest.encode())
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
    c = _cached(cache, make, data)
    for y in (c["train_y"], c["eval_y"]):
        if len(y) and y.max() >= data.num_classes:
            raise malformed(data, f"labels reach {int(y.max())} but data.num_classes={data.num_classes}")
    return Splits(TensorDataset(c["train_x"], c["train_y"]), TensorDataset(c["eval_x"], c["eval_y"]),
                  info={"train": len(c["train_y"]), "eval": len(c["eval_y"]), "vocab": len(c["vocab"]),
                        "cache": str(cache)})


def imdb(data, task: str) -> Splits:
    """aclImdb: pos -> 1, neg -> 0; the published 25k/25k train/test split."""
    root = Path(data.path)
    files = {
        split: sorted((root / split / "neg").glob("*.txt")) + sorted((root / split / "pos").glob("*.txt"))
        for split in ("train", "test")
    }
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
            hint = (
                " (it looks like the Sentiment140 CSV: 6 columns, no header, labels 0/4; "
                "use data=sentiment140)"
                if len(next(csv.reader([header]), [])) == 6
                else ""
            )
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
        w = self.ids[i * self.stride: i * self.stride + self.seq_len + 1].long()  # ids may be stored narrower
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

    c = _cached(_cache_file(data, [path], {"kind": "chars"}), make, data)
    if len(c["vocab"]) > data.vocab_size:
        raise malformed(data, f"{path} has {len(c['vocab'])} distinct characters but data.vocab_size="
                              f"{data.vocab_size}; set data.vocab_size >= {len(c['vocab'])}")
    ids = c["ids"]
    cut = round(len(ids) * (1 - data.eval_fraction))
    train, ev = (
        CharWindows(ids[:cut], data.seq_len, CHAR_STRIDE),
        CharWindows(ids[cut:], data.seq_len, data.seq_len),
    )
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
    buf = bytearray(path.stat().st_size)  # the bytes once, as uint8 (int64 was 8x the file); windows widen
    with open(path, "rb") as f:
        del buf[f.readinto(buf):]  # in place (a file that shrank meanwhile): never a second copy
    ids = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.zeros(0, dtype=torch.uint8)
    cut = round(len(ids) * (1 - data.eval_fraction))
    train, ev = _windows(data, path, ids[:cut], ids[cut:], "bytes")
    return Splits(train, ev, info={"train": len(train), "eval": len(ev), "vocab": 256})


def _windows(data, path: Path, train_ids: torch.Tensor, eval_ids: torch.Tensor, unit: str) -> tuple:
    train = CharWindows(train_ids, data.seq_len, data.seq_len)
    ev = CharWindows(eval_ids, data.seq_len, data.seq_len)
    if len(train) == 0 or len(ev) == 0:
        raise malformed(
            data,
            f"{path} has {len(train_ids) + len(eval_ids)} {unit}: too short for one training and "
            f"one held-out window of {data.seq_len + 1} {unit} (data.seq_len={data.seq_len}, "
            f"data.eval_fraction={data.eval_fraction}); give a longer file or a shorter seq_len",
        )
    return train, ev


BPE_MIN_VOCAB = 256 + 1  # the byte-level alphabet, and at least one merge
# A pre-token (GPT-2's regex: a word, a number, a run of symbols) longer than this many bytes is cut into
# pieces this long. BPE training works per pre-token and costs the square of its length: a run without
# whitespace of 50k/100k/200k characters (minified JSON, base64, a DNA string) took 3.4/12.6/52.6 s; words
# stay whole.
BPE_MAX_PRETOKEN_BYTES = 128
BPE_BYTES_PER_S = 100_000  # the console's estimate: 3 MB took 10 s of CPU here, 30 s on a shared core


def _train_bpe(text: str, vocab_size: int):
    """A byte-level BPE (GPT-2's scheme, Hugging Face `tokenizers`) trained on `text` alone, its pre-tokens at
    most BPE_MAX_PRETOKEN_BYTES long (the same cut when it encodes: it is part of the tokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([  # after the byte-level mapping, one character is one byte
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        pre_tokenizers.Split(Regex(f".{{1,{BPE_MAX_PRETOKEN_BYTES}}}"), behavior="isolated")])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(text.splitlines(keepends=True) or [text], trainer=trainer)
    return tok


def _ids_bytes(ids: list[int]) -> bytes:
    return torch.tensor(ids, dtype=torch.int32).numpy().astype("<i4").tobytes()


def _ids(raw: bytes) -> torch.Tensor:
    return (
        torch.frombuffer(bytearray(raw), dtype=torch.int32).long()
        if raw
        else torch.zeros(0, dtype=torch.long)
    )


def _bpe_cache(data, meta_file: Path, train_file: Path, eval_file: Path, settings: dict):
    """(meta, {stream file: bytes}) of a complete, intact BPE cache made from this very text with these
    settings, or (None, None): nothing cached yet, or a cache that fails its checks (said, by name, then
    rebuilt). Nothing is read through a link."""
    raw = _read_cache(data, meta_file)
    if raw is None:
        return None, None
    try:
        meta = json.loads(raw)
        why = next((f"its {k} differs" for k, v in settings.items() if meta.get(k) != v), None)
        streams = {} if why else {f: _read_cache(data, f) for f in (train_file, eval_file)}
        for f, key in ((train_file, "train_sha256"), (eval_file, "eval_sha256")):
            if why is None and (streams[f] is None or hashlib.sha256(streams[f]).hexdigest() != meta[key]):
                why = f"{f.name} is missing or does not match its checksum"
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        why = f"its JSON is not the cache's ({type(e).__name__})"
    if why is None:
        return meta, streams
    warnings.warn(
        f"xbench: the tokenizer cache {meta_file} was not used ({why}: damaged, written by hand, or "
        "from another text); rebuilding it from the data",
        stacklevel=3,
    )
    return None, None


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
    cache = _cache_file(data, [path], {"kind": "bpe", "eval_fraction": data.eval_fraction,
                                       "max_pretoken_bytes": BPE_MAX_PRETOKEN_BYTES})
    meta_file, train_file, eval_file = (
        cache.with_suffix(s) for s in (".bpe.json", ".train.i32", ".eval.i32")
    )
    source = path.read_bytes()
    settings = {"v": CACHE_VERSION, "vocab_size": data.vocab_size, "eval_fraction": data.eval_fraction,
                "source_sha256": hashlib.sha256(source).hexdigest()}
    meta, streams_raw = _bpe_cache(data, meta_file, train_file, eval_file, settings)
    if meta is None:
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError as e:
            raise malformed(data, f"{path} is not UTF-8 text ({e})") from e
        cut = round(len(text) * (1 - data.eval_fraction))
        size = len(source)
        print(
            f"xbench: data=text_bpe: training a byte-level BPE (vocabulary {data.vocab_size:,}) on {path} "
            f"({size / 1e6:.3g} MB, the first {1 - data.eval_fraction:.0%} trains it), then encoding it: "
            f"about {max(1, round(size / BPE_BYTES_PER_S))} s, once (cached beside the file)",
            file=sys.stderr,
            flush=True,
        )
        tok = _train_bpe(text[:cut], data.vocab_size)
        streams = {f: tok.encode(part).ids for f, part in ((train_file, text[:cut]), (eval_file, text[cut:]))}
        streams_raw = {f: _ids_bytes(ids) for f, ids in streams.items()}
        digests = {f: _write_cache(data, f, raw) for f, raw in streams_raw.items()}
        meta = {"tokenizer": json.loads(tok.to_str()), "vocab": tok.get_vocab_size(), "train_chars": cut,
                "train_tokens": len(streams[train_file]), "eval_tokens": len(streams[eval_file]),
                "train_sha256": digests[train_file], "eval_sha256": digests[eval_file], **settings}
        # last: marks it complete
        _write_cache(data, meta_file, json.dumps(meta, ensure_ascii=False).encode())
    train, ev = _windows(data, path, _ids(streams_raw[train_file]), _ids(streams_raw[eval_file]), "tokens")
    return Splits(train, ev, info={"train": len(train), "eval": len(ev), "vocab": meta["vocab"],
                                   "tokens_train": meta["train_tokens"], "tokens_eval": meta["eval_tokens"],
                                   "cache": str(meta_file)})


MASK = 2  # the [MASK] token's id in a text_mlm vocabulary (after <pad> and <unk>)
# masks are drawn once per split (static, like MLPerf's prepared BERT data)
MLM_SEED = {"train": 1, "eval": 2}


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
    c = _cached(cache, make, data)
    return Splits(TensorDataset(c["train_x"], c["train_y"]), TensorDataset(c["eval_x"], c["eval_y"]),
                  info={"train": len(c["train_y"]), "eval": len(c["eval_y"]), "vocab": len(c["vocab"]),
                        "cache": str(cache)})
