"""Solutions of the walk's exercises: each function replaces the stub of the same name in the solutions notebook
(`notebook.build_notebook(..., solutions=True)`), so its signature must be the stub's (a test compares them)."""

import math

import torch


def causal_mask(size: int) -> torch.Tensor:
    """(size, size) booleans: True where query position i may attend to key position j, i.e. j <= i."""
    return torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1).logical_not()


def relative_position_rotation(d_model: int, k: int) -> torch.Tensor:
    """M_k, (d_model, d_model), with PE(pos + k) = M_k PE(pos) for every pos."""
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k * 10000 ** (-2 * i / d_model)
        sin_row, cos_row = 2 * i, 2 * i + 1  # PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i)
        rotation[sin_row, sin_row], rotation[sin_row, cos_row] = math.cos(angle), math.sin(angle)
        rotation[cos_row, sin_row], rotation[cos_row, cos_row] = -math.sin(angle), math.cos(angle)
    return rotation


def smoothed_target(gold_ids: list[int], vocab_size: int, epsilon: float, pad_token_id: int = 0) -> torch.Tensor:
    """(len(gold_ids), vocab_size): 1 - epsilon on each gold token, epsilon / (V - 2) on every other token but
    padding, 0 on padding."""
    target = torch.full((len(gold_ids), vocab_size), epsilon / (vocab_size - 2))
    target[:, pad_token_id] = 0.0
    target[range(len(gold_ids)), gold_ids] = 1 - epsilon
    return target


def noam_rate(step: int, d_model: int, warmup_steps: int) -> float:
    """§5.3's learning rate at update `step` (factor 1)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def greedy_step(model, encoder_outputs, attention_mask: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(batch,): the most probable next token of each sentence, after the decoder has read `tokens`."""
    logits = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=tokens).logits
    return logits[:, -1].argmax(dim=-1)  # (batch, length, vocab) -> the last position's best token
