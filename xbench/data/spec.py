"""What a model needs to know about its inputs, derived from the data config (no torch import)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputSpec:
    modality: str  # image | tokens | features
    num_classes: int
    image_size: int = 32
    channels: int = 3
    seq_len: int = 128
    vocab_size: int = 30522
    num_features: int = 64

    @classmethod
    def from_data(cls, data) -> InputSpec:
        return cls(
            modality=data.modality,
            num_classes=data.num_classes,
            image_size=data.image_size,
            channels=data.channels,
            seq_len=data.seq_len,
            vocab_size=data.vocab_size,
            num_features=data.num_features,
        )
