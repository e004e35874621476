"""The reference solutions of the walk's exercises (docs/annotated.md), one per exercise, under the stub's name and
signature (tests/test_notebook.py compares them).

They live here, importable and not printed, for two readers. The learner's notebook calls
`exercises.yours_or_reference(name, yours)` after each exercise: where the learner's answer fails its check, the walk
goes on with the reference, so that the model it builds and trains is the learner's wherever the learner's code is
right. The solutions notebook (notebooks/annotated_transformer_solutions.ipynb) shows each one in place of its stub,
and the page shows them after each exercise's solution break.

The two classes build on the walk's own modules (`LayerNorm`, `MultiHeadAttention`, `PositionwiseFeedForward`), which
the notebook defines before them: their `__init__` is the stub's, given to the learner, and the exercise is their
`forward`. So the reference of a class is the learner's class with this `forward` (`yours_or_reference`).
"""

import math

import torch
from torch import nn

# The walk's own modules, which the notebooks define before the classes below: the classes' __init__ runs there (the
# solutions notebook shows their source; `yours_or_reference` keeps the learner's __init__), never in this module.
LayerNorm = MultiHeadAttention = PositionwiseFeedForward = None


def relative_position_rotation(d_model: int, k: int) -> torch.Tensor:
    """M_k, (d_model, d_model), with PE(pos + k) = M_k PE(pos) for every pos."""
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k * 10000 ** (-2 * i / d_model)  # k w_i
        sin_row, cos_row = 2 * i, 2 * i + 1  # PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i)
        rotation[sin_row, sin_row], rotation[sin_row, cos_row] = math.cos(angle), math.sin(angle)
        rotation[cos_row, sin_row], rotation[cos_row, cos_row] = -math.sin(angle), math.cos(angle)
    return rotation


def causal_mask(size: int) -> torch.Tensor:
    """(size, size): True where query position i may attend to key position j, that is j <= i (§3.1)."""
    return torch.ones(size, size, dtype=torch.bool).tril()


def attention(query, key, value, mask=None):
    """query (B, h, T, d_k); key, value (B, h, S, d_k); mask broadcast to (B, h, T, S), True = may attend.
    Returns (output (B, h, T, d_k), weights (B, h, T, S))."""
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # masked keys: the smallest float
    weights = scores.softmax(dim=-1)  # (B, h, T, S); each row sums to 1
    return weights @ value, weights  # (B, h, T, d_k), (B, h, T, S)


def split_heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k), d_k = d_model / h."""
    batch, length, d_model = x.shape
    return x.view(batch, length, h, d_model // h).transpose(1, 2)  # head i: features i d_k ... (i + 1) d_k - 1


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h * d_k)."""
    batch, h, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, h * d_k)  # Concat(head_1, ..., head_h) at each position


class SublayerConnection(nn.Module):
    """A residual connection, dropout on the sub-layer's output, and a LayerNorm: after the sum (post-norm, the
    paper's) or on the sub-layer's input (pre-norm, `norm_first=True`)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm, self.dropout, self.norm_first = LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))  # pre-norm
        return self.norm(x + self.dropout(sublayer(x)))  # post-norm: LayerNorm(x + Dropout(Sublayer(x)))


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention, then the feed-forward network."""

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float, norm_first: bool):
        super().__init__()
        self.self_attn, self.src_attn = MultiHeadAttention(d_model, h), MultiHeadAttention(d_model, h)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    def forward(self, x, memory, source_mask, target_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, target_mask))  # each position: itself and before
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, source_mask))  # queries x, keys memory
        return self.sublayer[2](x, self.feed_forward)


def noam_rate(step: int, d_model: int, warmup_steps: int) -> float:
    """§5.3's learning rate at update `step` (1, 2, ...)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)  # the two terms cross at warmup_steps


def smoothed_target(gold_ids: list[int], vocab_size: int, epsilon: float, pad_token_id: int = 0) -> torch.Tensor:
    """(len(gold_ids), vocab_size): the smoothed target q of each gold token."""
    target = torch.full((len(gold_ids), vocab_size), epsilon / (vocab_size - 2))  # epsilon shared by V - 2 tokens
    target[:, pad_token_id] = 0.0  # <pad> is never a target
    target[range(len(gold_ids)), gold_ids] = 1 - epsilon
    return target


def greedy_step(model, memory, src_mask, tokens: torch.Tensor) -> torch.Tensor:
    """(B,): the most probable next token of each sentence, after the decoder has read `tokens` (B, t)."""
    hidden = model.decode(memory, src_mask, tokens, causal_mask(tokens.size(1)))  # (B, t, d_model)
    return model.generator(hidden[:, -1]).argmax(dim=-1)  # the last position predicts the next token: (B, V) -> (B,)


__all__ = ["DecoderLayer", "SublayerConnection", "attention", "causal_mask", "greedy_step", "merge_heads",
           "noam_rate", "relative_position_rotation", "smoothed_target", "split_heads"]
