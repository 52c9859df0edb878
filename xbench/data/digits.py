"""scikit-learn's digits set (1,797 8x8 greyscale images of 0-9, shipped inside scikit-learn: no download).

The smallest real data set there is: an MLP reaches 95%+ eval accuracy in a few epochs on a CPU in well
under a second, which makes it the train-to-target test bed. The split is deterministic (a fixed seeded
permutation), so every run, platform and resume sees the same train and eval samples.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from xbench.data.loaders import Splits

NUM_CLASSES = 10
SIDE = 8
SAMPLES = 1797


def load_digits_split(modality: str = "features", eval_fraction: float = 0.1,
                      seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """(train, eval) TensorDatasets of (inputs float32 in [0, 1], targets int64).

    modality `features`: inputs are 64 values; `image`: 1x8x8. The split does not depend on the
    training seed, only on `seed` here (the data seed), so changing the model seed keeps the split.
    """
    from sklearn.datasets import load_digits  # imported here: scikit-learn is only needed for this set

    if modality not in ("features", "image"):
        raise ValueError(
            f"digits comes as modality 'features' (64 values) or 'image' (1x8x8), not {modality!r}"
        )
    bunch = load_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32) / 16.0  # pixel values are 0..16
    y = torch.tensor(bunch.target, dtype=torch.int64)
    if modality == "image":
        x = x.reshape(-1, 1, SIDE, SIDE)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_eval = max(1, round(len(y) * eval_fraction))
    ev, tr = order[:n_eval], order[n_eval:]
    return TensorDataset(x[tr], y[tr]), TensorDataset(x[ev], y[ev])


def build(data, task: str):
    """The loader registry's entry (xbench.data.loaders): the same split as load_digits_split."""
    train, held_out = load_digits_split(data.modality, data.eval_fraction)
    return Splits(train, held_out, info={"train": len(train), "eval": len(held_out)})
