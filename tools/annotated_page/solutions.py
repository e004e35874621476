"""Solutions of the walk's exercises: each function or class replaces the stub of the same name in the solutions
notebook (`notebook.build_notebook(..., solutions=True)`), so its signature must be the stub's (a test compares them).
The classes build on the walk's own (`LayerNorm`, `MultiHeadAttention`, `PositionwiseFeedForward`), which the
solutions notebook defines before them.

`GIVEAWAYS` holds, for each exercise, what its answer looks like in code: the page must not show it between the
exercise and its `<!-- solution: NAME -->` break (tests/test_annotated.py reads the page for it), and each pattern
must find the answer here (so that it can find it there).
"""

import math
import re

import torch
from torch import nn


def relative_position_rotation(d_model: int, k: int) -> torch.Tensor:
    """M_k, (d_model, d_model), with PE(pos + k) = M_k PE(pos) for every pos."""
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k * 10000 ** (-2 * i / d_model)
        sin_row, cos_row = 2 * i, 2 * i + 1  # PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i)
        rotation[sin_row, sin_row], rotation[sin_row, cos_row] = math.cos(angle), math.sin(angle)
        rotation[cos_row, sin_row], rotation[cos_row, cos_row] = -math.sin(angle), math.cos(angle)
    return rotation


def causal_mask(size: int) -> torch.Tensor:
    """(size, size) booleans: True where query position i may attend to key position j, i.e. j <= i."""
    return torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1).logical_not()


def attention(query, key, value, mask=None):
    """softmax(Q Kᵀ / √d_k) V over the last two axes; mask broadcast to the scores, True where a query may attend."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # no weight at all on a masked key
    weights = scores.softmax(dim=-1)  # each query's weights over the keys sum to 1
    return weights @ value, weights


def split_heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k): head i takes features i·d_k ... (i+1)·d_k - 1 of every position."""
    batch, length, d_model = x.shape
    return x.view(batch, length, h, d_model // h).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h·d_k): Concat(head_1, ..., head_h) at every position."""
    batch, h, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, h * d_k)


class SublayerConnection(nn.Module):
    """x + Dropout(Sublayer(.)) with a LayerNorm: after the sum (post-norm, the paper's §3.1) or on the sub-layer's
    input (pre-norm, The Annotated Transformer's)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm, self.dropout, self.norm_first = LayerNorm(d_model), nn.Dropout(dropout), norm_first  # noqa: F821

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))  # pre-norm
        return self.norm(x + self.dropout(sublayer(x)))  # post-norm: LayerNorm(x + Dropout(Sublayer(x)))


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention, the feed-forward network, each in a sub-layer
    connection."""

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float, norm_first: bool):
        super().__init__()
        self.self_attn, self.src_attn = MultiHeadAttention(d_model, h), MultiHeadAttention(d_model, h)  # noqa: F821
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff)  # noqa: F821
        self.sublayer = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first) for _ in range(3))

    def forward(self, x, memory, source_mask, target_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, target_mask))  # each position: itself and before
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, source_mask))  # queries x, keys memory
        return self.sublayer[2](x, self.feed_forward)


def noam_rate(step: int, d_model: int, warmup_steps: int) -> float:
    """§5.3's learning rate at update `step` (factor 1)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def smoothed_target(gold_ids: list[int], vocab_size: int, epsilon: float, pad_token_id: int = 0) -> torch.Tensor:
    """(len(gold_ids), vocab_size): 1 - epsilon on each gold token, epsilon / (V - 2) on every other token but
    padding, 0 on padding."""
    target = torch.full((len(gold_ids), vocab_size), epsilon / (vocab_size - 2))
    target[:, pad_token_id] = 0.0
    target[range(len(gold_ids)), gold_ids] = 1 - epsilon
    return target


def greedy_step(model, encoder_outputs, attention_mask: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(batch,): the most probable next token of each sentence, after the decoder has read `tokens`."""
    logits = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=tokens).logits
    return logits[:, -1].argmax(dim=-1)  # (batch, length, vocab) -> the last position's best token


GIVEAWAYS = {  # exercise -> a regular expression that finds its answer in code
    "relative_position_rotation": r"rotation\[[^\]]*\]\s*=",
    "causal_mask": r"\b(?:triu|tril)\b",
    "attention": r"key\.transpose\(\s*(?:-2\s*,\s*-1|2\s*,\s*3)\s*\)",
    "split_heads": r"\.view\([^)]*\)\.transpose\(\s*1\s*,\s*2\s*\)",
    "merge_heads": r"\.transpose\(\s*1\s*,\s*2\s*\)\.(?:reshape|contiguous)\(",
    "SublayerConnection": r"\+\s*self\.dropout\(\s*sublayer\(",
    "DecoderLayer": r"self\.(?:src_attn|encoder_attn)\(\s*x\s*,",
    "noam_rate": r"step\s*\*\s*warmup_steps\s*\*\*\s*-\s*1\.5",
    "smoothed_target": r"\[\s*:\s*,\s*pad_token_id\s*\]\s*=\s*0",
    "greedy_step": r"\[\s*:\s*,\s*-1\s*\]\.argmax\(",
}


def given_away(text: str) -> list[str]:
    """Each exercise of the page `text` whose answer (`GIVEAWAYS`) shows after it and before its
    `<!-- solution: NAME -->` break (anywhere after it, without a break), as 'line N: ...'; [] when none does."""
    from .page import parse  # the page's parser, which imports the package: only when a page is read

    page, found = parse(text), []
    for name, _, end in page.exercises:
        stop = page.solutions.get(name, len(text))
        if stop < end:
            found.append(f"exercise {name}: its <!-- solution: {name} --> break comes before it")
            continue
        if name in GIVEAWAYS and (match := re.search(GIVEAWAYS[name], text[end:stop])):
            line = text.count("\n", 0, end + match.start()) + 1
            found.append(f"line {line}: {match.group(0)!r} gives away the answer of exercise {name} before its "
                         f"<!-- solution: {name} --> break: show the package's version there, or move the break")
    return found
