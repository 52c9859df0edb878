"""data: what a batch is (conf/data/*.yaml); `batch_size` is per device."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from xbench.config.knobs import BIG, knob

MODALITIES = ("image", "tokens", "features")


@dataclass
class DataConfig:
    name: str = MISSING  # what it imitates or reads, e.g. synthetic_cifar10, digits, cifar10
    source: str = "synthetic"  # synthetic | a loader name in xbench.data.loaders
    modality: str = knob("image", choices=MODALITIES)
    batch_size: int = knob(64, ge=1, le=BIG)  # per device
    # image modality
    image_size: int = knob(32, ge=1, le=65536)
    channels: int = knob(3, ge=1, le=4096)
    # token modality
    seq_len: int = knob(128, ge=1, le=BIG)
    # real text: caps the vocabulary built from the training split (words + n-grams)
    vocab_size: int = knob(30522, ge=2, le=BIG)
    # real text: add word n-grams up to this length as tokens (1: words only; fastText uses 2)
    ngrams: int = knob(1, ge=1, le=16)
    # features modality (e.g. digits: 64 pixels as a flat vector)
    num_features: int = knob(64, ge=1, le=BIG)
    num_classes: int = knob(10, ge=2, le=BIG)
    # synthetic: how many distinct batches live on the device (cycled through)
    synthetic_batches: int = knob(4, ge=1, le=100000)
    # real data
    # real data: the folder or file the loader reads (layouts: xbench/data/loaders.py)
    path: str | None = None
    num_workers: int = knob(0, ge=0, le=1024)
    # real data: pin host batches; None: on for CUDA devices (xbench/data/feed.py)
    pin_memory: bool | None = None
    augment: bool = False
    # share of the data held out for evaluation when the set has no split
    eval_fraction: float = knob(0.1, gt=0, lt=1)
    # samples per epoch, for projections (None = unknown)
    dataset_size: int | None = knob(None, ge=1, le=2**62)
