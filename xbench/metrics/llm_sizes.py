"""The Llama 3 decoder's shapes, its parameter count from a shape (closed form, no torch), and what a
device keeps of its training state: what parallel/fit.py refuses a run with, and what the report's
fit table says fits under DDP and under the sharded strategies.

models/decoder.py builds from SIZES; tests/test_llm.py checks `llama_params` against a meta-device build.
"""

from __future__ import annotations

# Published shapes (Meta's Llama 3.1 model card / params.json); `tiny` and `small` are for tests and CPUs.
SIZES: dict[str, dict] = {
    "tiny": dict(dim=64, layers=2, heads=4, kv_heads=2, ffn_dim=192),
    "small": dict(dim=256, layers=4, heads=8, kv_heads=4, ffn_dim=768),
    "1b": dict(dim=2048, layers=16, heads=32, kv_heads=8, ffn_dim=8192, tie_embeddings=True),
    "8b": dict(dim=4096, layers=32, heads=32, kv_heads=8, ffn_dim=14336),
    "70b": dict(dim=8192, layers=80, heads=64, kv_heads=8, ffn_dim=28672),
}
LLAMA3_VOCAB = 128256
PUBLISHED = ("1b", "8b", "70b")  # Meta's sizes (the fit table's rows)

# Bytes a device keeps per parameter before sharding: fp32 master + fp32 gradient + the optimizer's state.
STATE_BYTES = {"adamw": 16, "lamb": 16, "sgd": 12, "lars": 12}
GIB = 2**30


def llama_params(vocab: int, dim: int, layers: int, heads: int, kv_heads: int, ffn_dim: int,
                 tie_embeddings: bool = False) -> int:
    """Every parameter of the decoder once: embedding (and an untied output head), per block the q/k/v/o
    projections (K and V over kv_heads), SwiGLU's three matrices and two RMSNorm weights, a final norm."""
    kv = kv_heads * (dim // heads)
    block = 2 * dim * dim + 2 * dim * kv + 3 * dim * ffn_dim + 2 * dim
    return vocab * dim * (1 if tie_embeddings else 2) + layers * block + dim


def size_params(size: str, vocab: int = LLAMA3_VOCAB) -> int:
    return llama_params(vocab, **SIZES[size])


def state_gib_per_device(n_params: int, optimizer: str, shards: int) -> float:
    """Parameters + gradients + optimizer state one device keeps, fp32 master weights, over `shards` ranks."""
    return n_params * STATE_BYTES.get(optimizer, 16) / shards / GIB


def shards_needed(n_params: int, optimizer: str, memory_gib: float) -> int:
    """The fewest shards over which the states fit `memory_gib` per device (before activations)."""
    return -(-n_params * STATE_BYTES.get(optimizer, 16) // int(memory_gib * GIB))
