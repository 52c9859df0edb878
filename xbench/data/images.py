"""Real image data sets in their published formats: ImageNet folders, CIFAR-10 python batches, MNIST idx.

Each builder returns float tensors normalised per channel, (C, H, W), and int64 labels. Decoding and
augmentation run in DataLoader workers (data.num_workers), outside the training step.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from xbench.data.loaders import Splits, malformed

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


def _expect_shape(data, source: str, size: int, channels: int) -> None:
    if (data.image_size, data.channels) != (size, channels):
        raise malformed(data, f"{source} images are {size}x{size}x{channels}, but the data config says "
                              f"image_size={data.image_size}, channels={data.channels}")


class TensorImages(Dataset):
    """uint8 images (N, C, H, W) held in memory; normalised (and optionally augmented) per sample."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean, std, augment: bool = False):
        self.images, self.labels, self.augment = images, labels, augment
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].float().div_(255)
        if self.augment:  # the CIFAR recipe: random 4-pixel-padded crop and horizontal flip
            h, w = x.shape[1:]
            x = torch.nn.functional.pad(x, (4, 4, 4, 4))
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            x = x[:, dy:dy + h, dx:dx + w]
            if torch.rand(()) < 0.5:
                x = x.flip(2)
        return (x - self.mean) / self.std, self.labels[i]


def cifar10(data, task: str) -> Splits:
    _expect_shape(data, "cifar10", 32, 3)
    root = Path(data.path)

    def load(names):
        xs, ys = [], []
        for name in names:
            try:
                with open(root / name, "rb") as f:
                    d = pickle.load(f, encoding="bytes")
                x, y = np.asarray(d[b"data"], dtype=np.uint8), np.asarray(d[b"labels"], dtype=np.int64)
            except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as e:
                raise malformed(
                    data, f"{root / name} is not a CIFAR-10 python batch ({type(e).__name__}: {e})"
                ) from e
            if x.ndim != 2 or x.shape[1] != 3072 or len(x) != len(y):
                raise malformed(data, f"{root / name} holds data of shape {x.shape} with {len(y)} labels, "
                                      "expected (N, 3072) and N labels")
            xs.append(x)
            ys.append(y)
        x, y = np.concatenate(xs), np.concatenate(ys)
        if y.min() < 0 or y.max() >= data.num_classes:
            raise malformed(
                data, f"labels in {names} span {y.min()}..{y.max()}, outside 0..{data.num_classes - 1}"
            )
        return torch.from_numpy(x.reshape(-1, 3, 32, 32)), torch.from_numpy(y)

    tx, ty = load([f"data_batch_{i}" for i in range(1, 6)])
    ex, ey = load(["test_batch"])
    return Splits(TensorImages(tx, ty, CIFAR_MEAN, CIFAR_STD, data.augment),
                  TensorImages(ex, ey, CIFAR_MEAN, CIFAR_STD), info={"train": len(ty), "eval": len(ey)})


def _idx_file(data, stem: str) -> Path:
    root = Path(data.path)
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return root / name
    raise malformed(data, f"{root / stem}[.gz] is missing")


def _read_idx(data, path: Path, magic: int, ndim: int) -> np.ndarray:
    """An idx file: big-endian magic (0x0000 08 <ndim>), ndim int32 sizes, then uint8 values."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise malformed(data, f"{path} cannot be read ({e})") from e
    head = 4 + 4 * ndim
    if len(raw) < head or int.from_bytes(raw[:4], "big") != magic:
        got = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
        raise malformed(data, f"{path} is not an idx file with magic {magic} (found {got})")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(raw, dtype=np.uint8, offset=head)
    if body.size != int(np.prod(dims)):
        raise malformed(data, f"{path} declares shape {dims} but holds {body.size} values")
    return body.reshape(dims)


def mnist(data, task: str) -> Splits:
    _expect_shape(data, "mnist", 28, 1)

    def load(prefix):
        x = _read_idx(data, _idx_file(data, f"{prefix}-images-idx3-ubyte"), 2051, 3)
        y = _read_idx(data, _idx_file(data, f"{prefix}-labels-idx1-ubyte"), 2049, 1)
        if len(x) != len(y):
            raise malformed(data, f"{prefix} has {len(x)} images but {len(y)} labels")
        return torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64))

    tx, ty = load("train")
    ex, ey = load("t10k")
    return Splits(TensorImages(tx, ty, MNIST_MEAN, MNIST_STD), TensorImages(ex, ey, MNIST_MEAN, MNIST_STD),
                  info={"train": len(ty), "eval": len(ey)})


def imagenet_transforms(size: int, augment: bool):
    """The standard ResNet recipe: random-resized crop + flip when augmenting, else resize + centre crop."""
    from torchvision import transforms as T

    if augment:
        geometry = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
    else:
        geometry = [T.Resize(round(size * 256 / 224)), T.CenterCrop(size)]
    return T.Compose([*geometry, T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def imagenet(data, task: str) -> Splits:
    from torchvision.datasets import ImageFolder

    if data.channels != 3:
        raise malformed(data, f"ImageNet images are RGB, but the data config says channels={data.channels}")
    root = Path(data.path)
    try:
        train = ImageFolder(str(root / "train"), imagenet_transforms(data.image_size, data.augment))
        val = ImageFolder(str(root / "val"), imagenet_transforms(data.image_size, False))
    except (FileNotFoundError, RuntimeError) as e:
        raise malformed(data, f"no image folder there ({e})") from e
    if train.classes != val.classes:
        raise malformed(data, f"train has {len(train.classes)} class folders and val {len(val.classes)}, "
                              "not the same ones")
    if len(train.classes) > data.num_classes:
        raise malformed(data, f"{len(train.classes)} class folders but data.num_classes={data.num_classes}")
    return Splits(train, val, info={"train": len(train), "eval": len(val), "classes": len(train.classes)})
