"""Greedy decoding written out, the way The Annotated Transformer writes `greedy_decode`, with the key/value cache.

The decoder is auto-regressive (§3): it reads the tokens it has produced so far and predicts the next one. The
encoder runs once per source; each step feeds the decoder only the newest token, because the cache holds the keys
and values of every earlier position (self-attention) and of the source (encoder-decoder attention, computed at the
first step). `generate(num_beams=1, do_sample=False)` does the same with more options; `tests/test_annotated.py`
checks that both give the very same tokens.
"""

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache


@torch.no_grad()
def greedy_decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """(batch, 1 + at most max_new_tokens): the decoder start token, then each step's most probable token; a row that
    has produced </s> is padded with <pad> until every row has, as `generate()` pads it."""
    config = model.config
    memory = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    tokens = torch.full((input_ids.shape[0], 1), config.decoder_start_token_id, device=input_ids.device)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    for _ in range(max_new_tokens):
        hidden_states = model.get_decoder()(
            input_ids=tokens[:, -1:],  # the newest token only: the cache holds the earlier ones
            encoder_hidden_states=memory,
            encoder_attention_mask=attention_mask,  # the source's padding is masked here too
            cache=cache,
            use_cache=True,
        ).last_hidden_state
        next_tokens = model.lm_head(hidden_states[:, -1]).argmax(dim=-1)  # the pre-softmax projection (§3.4)
        next_tokens = next_tokens.masked_fill(finished, config.pad_token_id)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
        finished |= next_tokens == config.eos_token_id
        if finished.all():
            break
    return tokens


__all__ = ["greedy_decode"]
