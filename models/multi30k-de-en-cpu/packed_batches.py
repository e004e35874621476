"""Packed batches: several whole pairs end to end in each row (`modeling.data.packing` builds them), and attention
that never crosses from one pair to another.

A packed batch gives each token its pair (`pair_ids`, `decoder_pair_ids`: the pair's index in the batch, -1 on
padding) and its position within its pair (`position_ids`, `decoder_position_ids`, from 0 for every pair). Source row
r and target row r hold the same pairs, so the three attentions of §3.2.3 keep to a pair by comparing pair ids:

- encoder self-attention: a source token attends to the tokens of its own pair's source;
- decoder self-attention: a target token attends to its own pair's target up to itself (causal within the pair);
- encoder-decoder attention: a target token attends to its own pair's source only.

The masks come from transformers' mask interface for the configured attention (`ALL_MASK_ATTENTION_FUNCTIONS`): a
dense boolean mask for "sdpa", an additive one for "eager" (both run on every device; the tests use them), and a
`BlockMask` for "flex_attention", whose kernels skip the blocks no pair reaches (CUDA; on a CPU FlexAttention has no
backward, so it can only evaluate there). A padding query attends to its row's first key only: its output is never
read (its labels are -100, and no real query attends to it), and one key keeps its softmax finite.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

from collections.abc import Callable

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

# The attention implementations whose masks keep pairs apart (flash attention's would need varlen arguments instead)
PACKED_ATTENTION = ("eager", "sdpa", "flex_attention")


def same_pair(query_pair_ids: torch.Tensor, key_pair_ids: torch.Tensor, causal: bool) -> Callable:
    """The mask function (transformers' `(batch_idx, head_idx, q_idx, kv_idx) -> allowed`) of attention within each
    pair, causal or not; a padding query (pair -1) sees the row's first key."""

    def mask_function(batch_idx, head_idx, q_idx, kv_idx):
        query_pair = query_pair_ids[batch_idx, q_idx]
        padding = query_pair < 0
        allowed = (query_pair == key_pair_ids[batch_idx, kv_idx]) & ~padding
        if causal:
            allowed = allowed & (kv_idx <= q_idx)
        return allowed | (padding & (kv_idx == 0))

    return mask_function


def packed_attention_mask(config, hidden_states: torch.Tensor, query_pair_ids: torch.Tensor,
                          key_pair_ids: torch.Tensor, causal: bool = False):
    """The mask of attention within each pair, from queries with `query_pair_ids` (batch, query length) to keys with
    `key_pair_ids` (batch, key length), in the form `config._attn_implementation` takes."""
    implementation = config._attn_implementation
    if implementation not in PACKED_ATTENTION:
        raise ValueError(f"Packed batches need one of the attention implementations {list(PACKED_ATTENTION)}, "
                         f"whose masks keep pairs apart; the model uses {implementation!r}.")
    return ALL_MASK_ATTENTION_FUNCTIONS[implementation](
        batch_size=query_pair_ids.shape[0],
        q_length=query_pair_ids.shape[1],
        kv_length=key_pair_ids.shape[1],
        mask_function=same_pair(query_pair_ids, key_pair_ids, causal),
        attention_mask=None,
        allow_is_causal_skip=False,  # never SDPA's plain causal mask in place of the pairs'
        allow_is_bidirectional_skip=False,
        dtype=hidden_states.dtype,
        device=hidden_states.device,
        config=config,
    )


def check_packed_inputs(tokens, pair_ids, position_ids, attention_mask, name: str = "") -> None:
    """A packed batch's pair ids and positions cover its tokens (ids or embeddings: batch, length) and replace the
    attention mask; positions alone (without pair ids) cover their tokens too. `name`: "decoder_" for the targets'."""
    if tokens is None:  # the embeddings say what is missing
        return
    tokens_shape = tuple(tokens.shape[:2])
    for what, tensor in (("pair_ids", pair_ids), ("position_ids", position_ids)):
        if tensor is not None and tuple(tensor.shape) != tokens_shape:
            raise ValueError(f"`{name}{what}` has shape {tuple(tensor.shape)}, but its tokens are (batch, length) = "
                             f"{tokens_shape}")
    if pair_ids is not None and attention_mask is not None:
        raise ValueError(f"Give `{name}pair_ids` (a packed batch) or `{name}attention_mask`, not both: in a packed "
                         "batch the pair ids say which tokens attend to which, padding included (-1).")
    if pair_ids is not None and position_ids is None:
        raise ValueError(f"A packed batch (`{name}pair_ids`) needs `{name}position_ids`: each token's position "
                         "within its pair, from 0.")


def check_packed_source(source_shape, encoder_pair_ids, encoder_attention_mask, pair_ids, cache) -> None:
    """The decoder's side of a packed batch: the source's pair ids cover the encoder's output (batch, length) and
    replace its attention mask, the targets are packed alike, and no cache is given (a packed batch trains)."""
    if (pair_ids is None) != (encoder_pair_ids is None):
        raise ValueError("A packed batch gives pair ids for both the source and the target (`pair_ids` and "
                         "`decoder_pair_ids`), or neither.")
    if pair_ids is None:
        return
    if tuple(encoder_pair_ids.shape) != tuple(source_shape):
        raise ValueError(f"The source's `pair_ids` have shape {tuple(encoder_pair_ids.shape)}, but the encoder's "
                         f"output is (batch, length) = {tuple(source_shape)}")
    if encoder_attention_mask is not None:
        raise ValueError("Give `pair_ids` (a packed batch) or `attention_mask`, not both: in a packed batch the pair "
                         "ids say which tokens attend to which, padding included (-1).")
    if cache is not None:
        raise ValueError("A packed batch trains: it takes no cache of earlier decoding steps (`cache`).")


def shift_tokens_right_per_pair(labels: torch.Tensor, decoder_pair_ids: torch.Tensor, pad_token_id: int,
                                decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs of a packed batch: the labels shifted right by one within each pair, each pair's starting with
    `decoder_start_token_id` (§3.1's shift, per pair: a pair's first target token is never predicted from the
    previous pair's last); `pad_token_id` on padding (pair -1) and where a label is -100."""
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    pair_starts = torch.ones_like(decoder_pair_ids, dtype=torch.bool)
    pair_starts[:, 1:] = decoder_pair_ids[:, 1:] != decoder_pair_ids[:, :-1]
    shifted = torch.where(pair_starts, decoder_start_token_id, shifted)
    return shifted.masked_fill((shifted == -100) | (decoder_pair_ids < 0), pad_token_id)


__all__ = ["PACKED_ATTENTION", "check_packed_inputs", "check_packed_source", "packed_attention_mask", "same_pair",
           "shift_tokens_right_per_pair"]
