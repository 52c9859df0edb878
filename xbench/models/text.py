"""Token-sequence models: fastText, a bidirectional LSTM classifier, a character LSTM LM, BERT.

Inputs are (batch, seq_len) token ids with 0 as padding (text loaders pad on the left, as Keras did
in the studies, so the last time step of a forward LSTM sees real tokens).

FLOPs (xbench.bench.flops counts on the meta device): nn.LSTM on meta runs PyTorch's composite
decomposition (one addmm per gate projection per step), so the counter sees exactly the matmul work
of the fused cuDNN/oneDNN kernel, and the unrolled loop below does the same matmuls: both count the
same. EmbeddingBag and Embedding lookups are gathers plus (for EmbeddingBag) adds; like every other
element-wise op they count as 0 under torch's convention (matmuls and convolutions only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xbench.data.spec import InputSpec
from xbench.models import register

LSTM_IMPLS = ("fused", "unrolled")


class LSTM(nn.Module):
    """nn.LSTM with a choice of execution: `fused` calls the library kernel (cuDNN on GPU, oneDNN on
    CPU); `unrolled` loops over time steps in Python with the same parameters (same names, same
    layout, same initialisation), so the two give the same outputs and either can load the other's
    weights. The studies found the two behave very differently on CPU and GPU; this is that switch.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bidirectional: bool = False,
                 impl: str = "fused"):
        super().__init__()
        if impl not in LSTM_IMPLS:
            raise ValueError(f"lstm_impl={impl!r} is unknown; allowed: {', '.join(LSTM_IMPLS)}")
        self.impl = impl
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers, batch_first=True, bidirectional=bidirectional
        )

    def forward(self, x):
        """x (B, T, input_size) -> (output (B, T, dirs*H), h_n (layers*dirs, B, H)) as nn.LSTM."""
        if self.impl == "fused":
            out, (h_n, _) = self.lstm(x)
            return out, h_n
        return self._unrolled(x)

    def _unrolled(self, x):
        m = self.lstm
        dirs = 2 if m.bidirectional else 1
        finals = []
        layer_in = x
        for layer in range(m.num_layers):
            outs = []
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                w_ih, w_hh = getattr(m, "weight_ih" + sfx), getattr(m, "weight_hh" + sfx)
                b_ih, b_hh = getattr(m, "bias_ih" + sfx), getattr(m, "bias_hh" + sfx)
                b, t = layer_in.shape[0], layer_in.shape[1]
                h = layer_in.new_zeros(b, m.hidden_size)
                c = layer_in.new_zeros(b, m.hidden_size)
                steps = range(t - 1, -1, -1) if d else range(t)
                seq = [None] * t
                for i in steps:
                    gates = F.linear(layer_in[:, i], w_ih, b_ih) + F.linear(h, w_hh, b_hh)
                    ig, fg, gg, og = gates.chunk(4, dim=1)  # PyTorch's gate order: i, f, g, o
                    c = torch.sigmoid(fg) * c + torch.sigmoid(ig) * torch.tanh(gg)
                    h = torch.sigmoid(og) * torch.tanh(c)
                    seq[i] = h
                outs.append(torch.stack(seq, dim=1))
                finals.append(h)
            layer_in = torch.cat(outs, dim=2) if dirs == 2 else outs[0]
        return layer_in, torch.stack(finals, dim=0)


@register("fasttext", modalities=("tokens",))
def fasttext(spec: InputSpec, embed_dim: int = 50) -> nn.Module:
    """fastText: the mean of word (and word n-gram) embeddings, then one linear layer (IMDb model of
    the CPU-vs-GPU study; the n-gram ids come from the data: `data.ngrams`)."""
    return _FastText(spec.vocab_size, embed_dim, spec.num_classes)


class _FastText(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean", padding_idx=0)  # padding left out of the mean
        self.fc = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.fc(self.bag(ids))


@register("bilstm", modalities=("tokens",))
def bilstm(spec: InputSpec, embed_dim: int = 128, hidden: int = 64, layers: int = 1, dropout: float = 0.5,
           lstm_impl: str = "fused") -> nn.Module:
    """Bidirectional LSTM sentiment classifier (IMDb in the CPU-vs-GPU study, tweets in the GPU-cloud
    study): embedding -> biLSTM -> both directions' final states -> dropout -> linear."""
    return _BiLSTM(spec.vocab_size, embed_dim, hidden, layers, dropout, lstm_impl, spec.num_classes)


class _BiLSTM(nn.Module):
    def __init__(self, vocab, embed_dim, hidden, layers, dropout, impl, classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim, padding_idx=0)
        self.lstm = LSTM(embed_dim, hidden, layers, bidirectional=True, impl=impl)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, ids):
        _, h_n = self.lstm(self.embed(ids))
        return self.fc(self.drop(torch.cat([h_n[-2], h_n[-1]], dim=1)))  # last layer, fwd + bwd


@register("char_lstm", task="lm", modalities=("tokens",))
def char_lstm(spec: InputSpec, embed_dim: int = 64, hidden: int = 128, layers: int = 1,
              lstm_impl: str = "fused") -> nn.Module:
    """Character-level LSTM language model (the Nietzsche text generator of the CPU-vs-GPU study):
    predicts the next character at every position."""
    return _CharLSTM(spec.vocab_size, embed_dim, hidden, layers, lstm_impl)


class _CharLSTM(nn.Module):
    def __init__(self, vocab, embed_dim, hidden, layers, impl):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.lstm = LSTM(embed_dim, hidden, layers, impl=impl)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.fc(out)  # (B, T, vocab)


@register("bert", task="mlm", modalities=("tokens",))
def bert(spec: InputSpec, hidden: int = 768, layers: int = 12, heads: int = 12, intermediate: int = 3072,
         max_position: int = 512, type_vocab: int = 2, dropout: float = 0.1) -> nn.Module:
    """BERT encoder with the masked-LM head (decoder tied to the word embeddings), BERT-base by default
    (110M parameters with a 30522-token vocabulary). Built from torch.nn.TransformerEncoder
    (post-LayerNorm, GELU, as the original); no pooler, since MLM does not use it. The MLM head scores
    every position (as Hugging Face's BertForMaskedLM); MLPerf's reference gathers only the masked ones,
    so its head costs less: at 512 tokens the full head is ~24 of the ~121 forward GFLOP per sample."""
    if spec.seq_len > max_position:
        raise ValueError(f"bert: data.seq_len={spec.seq_len} exceeds max_position={max_position}")
    return _Bert(spec.vocab_size, hidden, layers, heads, intermediate, max_position, type_vocab, dropout)


class _Bert(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, intermediate, max_position, type_vocab, dropout):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position = nn.Embedding(max_position, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.embed_drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(hidden, heads, intermediate, dropout, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # MLM head: transform (dense, GELU, LayerNorm), then the tied decoder with its own bias.
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=1e-12))
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        self.apply(self._init)

    @staticmethod
    def _init(m):
        # BERT's initialisation: N(0, 0.02) weights, zero biases.
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.word(ids) + self.position(positions)[None] + self.token_type.weight[0]
        x = self.embed_drop(self.embed_norm(x))
        # Every position attends to every other; padding carries no loss target (-100), and a
        # key-padding mask would make shapes data-dependent on XLA.
        x = self.encoder(x)
        return F.linear(self.transform(x), self.word.weight, self.decoder_bias)  # (B, T, vocab)
