"""What a model needs to know about its inputs, derived from the data config (no torch import)."""

from __future__ import annotations

from dataclasses import dataclass

from xbench.config.section import SectionView


@dataclass(frozen=True)
class InputSpec(SectionView):
    modality: str  # image | tokens | features
    num_classes: int
    image_size: int = 32
    channels: int = 3
    seq_len: int = 128
    vocab_size: int = 30522
    num_features: int = 64

    @classmethod
    def from_data(cls, data) -> InputSpec:
        """Every field from the data section's key of the same name."""
        return cls.of(data)
