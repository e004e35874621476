"""The masks of the three attentions (§3.2.3), built once per stack from what the caller gave: padding masks (2-D, or
4-D taken as given), a packed batch's pair ids (`packed_batches`), or nothing at a decoding step.

- the encoder's self-attention: every source token sees every source token of its sentence (or pair), not padding;
- the decoder's self-attention: causal (§3.1: position i sees positions <= i), continuing what the cache holds;
- encoder-decoder attention: every target token sees its sentence's (or pair's) source tokens.

The masks come from transformers' masking utilities, in the form the configured attention implementation takes (an
additive float mask for eager, boolean for SDPA, a block mask for FlexAttention). Travels with the model (relative
import of modeling_annotated_transformer.py).
"""

import torch
from transformers.cache_utils import Cache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

from .compatibility import CACHE_NAME
from .input_checks import check_attention_mask
from .packed_batches import check_packed_source, packed_attention_mask


def encoder_self_attention_mask(config, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                                pair_ids: torch.Tensor | None):
    """Each source token attends to its own pair's source (packed), or to its sentence's tokens."""
    if pair_ids is not None:
        return packed_attention_mask(config, hidden_states, pair_ids, pair_ids)
    return create_bidirectional_mask(config=config, inputs_embeds=hidden_states, attention_mask=attention_mask)


def decoder_attention_masks(
    config,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache: Cache | None,
    past_length: int | torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    encoder_attention_mask: torch.Tensor | None,
    pair_ids: torch.Tensor | None = None,
    encoder_pair_ids: torch.Tensor | None = None,
):
    """(the causal self-attention mask, the encoder-decoder attention mask) of the decoder's `hidden_states`, after
    checking that the masks given cover their tokens."""
    batch_size, seq_length = hidden_states.shape[:2]
    check_attention_mask(attention_mask, (batch_size, past_length + seq_length), "decoder_attention_mask")
    check_attention_mask(encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask")
    check_packed_source(encoder_hidden_states.shape[:2], encoder_pair_ids, encoder_attention_mask, pair_ids, cache)
    if pair_ids is not None:
        # each target token attends causally within its own pair's target, and to its own pair's source
        return (packed_attention_mask(config, hidden_states, pair_ids, pair_ids, causal=True),
                packed_attention_mask(config, hidden_states, pair_ids, encoder_pair_ids))
    if attention_mask is None and seq_length == 1:
        # A decoding step: the one new position may attend to itself and to every earlier one, so nothing is masked,
        # and no mask is built (and checked on the host) at every generated token.
        causal_mask = None
    else:
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, past_length + seq_length, device=hidden_states.device)
        causal_mask = create_causal_mask(
            config=config, inputs_embeds=hidden_states, attention_mask=attention_mask,
            **{CACHE_NAME: cache.self_attention_cache if cache is not None else None},
        )
    encoder_mask = create_bidirectional_mask(
        config=config, inputs_embeds=hidden_states, attention_mask=encoder_attention_mask,
        encoder_hidden_states=encoder_hidden_states,
    )
    return causal_mask, encoder_mask


__all__ = ["decoder_attention_masks", "encoder_self_attention_mask"]
