"""The Llama 3 decoder family: RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied or tied
embeddings; random initialisation, nothing downloaded.

One builder (`llama`) from a tiny test size to the published 8B configuration (`SIZES`,
conf/model/llama*.yaml). The transformer blocks are `Decoder.layers` (an nn.ModuleList): what FSDP2 shards one
by one (xbench/parallel/fsdp.py) and what activation checkpointing recomputes.

FLOPs per token (`flops_per_token`): the standard 6N + 12·L·d·T of the scaling-law papers (Kaplan et al.
2020, PaLM's MFU appendix): N the parameters that multiply (every Linear, the output head included, the
input embedding's gather left out), and 12·L·d·T the attention scores and weighted sums over a context of
T tokens, forward and backward, with no causal discount (torch's FLOP counter does not discount either).
tests/test_llm.py checks it against torch.utils.flop_counter.FlopCounterMode within 3%.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xbench.data.spec import InputSpec

# the shapes (torch-free, for the report too)
from xbench.metrics.llm_sizes import LLAMA3_VOCAB, SIZES  # noqa: F401
from xbench.models import register

PUBLISHED_PARAMS = {"8b": 8.03e9}  # Meta's model card: "8B" is 8.03 billion with the 128,256-token vocabulary


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # In fp32 whatever the parameter dtype (as Meta's reference): bf16 squares lose the small ones.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(seq_len: int, head_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, head_dim/2) of the rotary angles, in fp32; computed per forward (no buffer to be cast
    to bf16 with the parameters, or sharded by FSDP)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    """x (B, H, T, D): rotate each (even, odd) pair of channels by its position's angle."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.kv_heads != self.heads:  # grouped-query: each K/V head serves heads/kv_heads query heads
            rep = self.heads // self.kv_heads
            k = (
                k[:, :, None]
                .expand(b, self.kv_heads, rep, t, self.head_dim)
                .reshape(b, self.heads, t, self.head_dim)
            )
            v = (
                v[:, :, None]
                .expand(b, self.kv_heads, rep, t, self.head_dim)
                .reshape(b, self.heads, t, self.head_dim)
            )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn_dim, eps):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps)
        self.attention = Attention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim, eps)
        self.feed_forward = FeedForward(dim, ffn_dim)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


def _normal_002(t: torch.Tensor) -> torch.Tensor:
    return nn.init.normal_(t, std=0.02)


class Decoder(nn.Module):
    """ids (B, T) -> next-token logits (B, T, vocab). `checkpoint_blocks`: recompute each block's
    activations in backward (torch.utils.checkpoint) instead of keeping them."""

    def __init__(self, vocab, dim, layers, heads, kv_heads, ffn_dim, eps, rope_theta, tie_embeddings,
                 checkpoint_blocks=False):
        super().__init__()
        self.rope_theta, self.head_dim, self.checkpoint_blocks = rope_theta, dim // heads, checkpoint_blocks
        # Construction's own draws (nn.Linear's default init) are undone: the weights are init_parameters'
        # draws from the RNG state the decoder was built in, whether built here or on the meta device.
        with torch.random.fork_rng(devices=[]):
            self.tok_embeddings = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(Block(dim, heads, kv_heads, ffn_dim, eps) for _ in range(layers))
            self.norm = RMSNorm(dim, eps)
            self.output = nn.Linear(dim, vocab, bias=False)
        if tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.init_parameters()

    def init_parameters(self, write=None) -> None:
        """Every parameter's initial value, in one fixed order from the global CPU RNG: N(0, 0.02) for the
        embedding and every Linear, ones for the norms (a tied head is the embedding, drawn once).
        `write(param, fill)`: how `fill` (an in-place init of a full-size fp32 CPU tensor) reaches the
        parameter; default: in place. FSDP builds the decoder on the meta device, shards it, allocates each
        rank's shards and then calls this with a `write` that keeps the rank's part of each full value
        (parallel/fsdp.py): seeded alike, the shards together equal this build's weights."""
        write = write or (lambda p, fill: fill(p.data))
        seen = set()
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    fill = _normal_002
                elif isinstance(m, RMSNorm):
                    fill = nn.init.ones_
                else:
                    continue
                if id(m.weight) not in seen:
                    seen.add(id(m.weight))
                    write(m.weight, fill)

    def forward(self, ids):
        cos, sin = rotary(ids.shape[1], self.head_dim, self.rope_theta, ids.device)
        x = self.tok_embeddings(ids)
        for block in self.layers:
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x = block(x, cos, sin)
        return self.output(self.norm(x))


def shape(size: str | None = None, **overrides) -> dict:
    """A size's shape (SIZES) with the options given on top: {dim, layers, heads, kv_heads, ffn_dim,
    tie_embeddings}."""
    if size is not None and size not in SIZES:
        raise ValueError(
            f"llama: size={size!r} is unknown; allowed: {', '.join(SIZES)} (or give dim, layers, "
            "heads, kv_heads, ffn_dim)"
        )
    out = {"tie_embeddings": False, **(SIZES[size] if size else SIZES["tiny"])}
    out.update({k: v for k, v in overrides.items() if v is not None})
    return out


def check_shape(s: dict) -> None:
    for k in ("dim", "layers", "heads", "kv_heads", "ffn_dim"):
        if not isinstance(s[k], int) or s[k] < 1:
            raise ValueError(f"llama: {k} must be a positive integer, got {s[k]!r}")
    if s["dim"] % s["heads"] or (s["dim"] // s["heads"]) % 2:
        raise ValueError(f"llama: dim={s['dim']} must split into heads={s['heads']} heads of an even size "
                         "(rotary positions rotate channel pairs)")
    if s["heads"] % s["kv_heads"]:
        raise ValueError(f"llama: heads={s['heads']} must be a multiple of kv_heads={s['kv_heads']} "
                         "(grouped-query attention shares each K/V head among whole groups)")


@register("llama", task="lm", modalities=("tokens",))
def llama(spec: InputSpec, size: str | None = None, dim: int | None = None, layers: int | None = None,
          heads: int | None = None, kv_heads: int | None = None, ffn_dim: int | None = None,
          tie_embeddings: bool | None = None, norm_eps: float = 1e-5, rope_theta: float = 500000.0,
          checkpoint_blocks: bool = False) -> nn.Module:
    """A Llama 3 decoder over `data.vocab_size` tokens: `size` one of SIZES (tiny, small, 1b, 8b, 70b),
    any shape option overriding it. `checkpoint_blocks`: activation checkpointing per block."""
    s = shape(size, dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, ffn_dim=ffn_dim,
              tie_embeddings=tie_embeddings)
    check_shape(s)
    return Decoder(spec.vocab_size, s["dim"], s["layers"], s["heads"], s["kv_heads"], s["ffn_dim"], norm_eps,
                   rope_theta, s["tie_embeddings"], checkpoint_blocks)


def count_params(model: nn.Module) -> dict[str, int]:
    """{"total", "matmul", "embedding"}: every parameter once (tied weights once), those that multiply
    (Linear weights: what 6N counts) and the input embedding's."""
    seen, total, matmul = set(), 0, 0
    for m in model.modules():
        for p in m.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            matmul += m.weight.numel()
    emb = model.tok_embeddings.weight.numel() if isinstance(model, Decoder) else 0
    return {"total": total, "matmul": matmul, "embedding": emb}


def meta_params(vocab: int, **options) -> dict[str, int]:
    """count_params of the decoder these options describe, built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = llama(InputSpec(modality="tokens", num_classes=vocab, vocab_size=vocab), **options)
    return count_params(model)


def flops_per_token(matmul_params: int, layers: int, dim: int, seq_len: int) -> dict[str, float]:
    """{"forward", "train"} FLOPs per token: 2N + 4·L·d·T forward, 6N + 12·L·d·T for a training step."""
    return {"forward": 2 * matmul_params + 4 * layers * dim * seq_len,
            "train": 6 * matmul_params + 12 * layers * dim * seq_len}
