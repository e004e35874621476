"""What `generate()` does differently for this model: oneDNN linear layers on AMD CPUs, a caller's `max_length`
counting over the saved `max_new_tokens`, `num_beams < 1` refused, and beam search reordering only the decoder's
self-attention cache.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import functools

import torch
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationMixin

from .onednn_linear import onednn_linear_layers


class TransformerGenerationMixin(GenerationMixin):
    """transformers' `GenerationMixin` (greedy, beam search, sampling, caches) with the above."""

    @functools.wraps(GenerationMixin.generate, assigned=())  # __wrapped__: its signature
    def generate(self, *args, **kwargs):
        with onednn_linear_layers(self.model.decoder, self.lm_head):
            return super().generate(*args, **kwargs)

    generate.__doc__ = (
        "On an AMD CPU in float32, the decoder's and the output layer's linear layers, which run at every step, "
        "multiply with copies of their weights in oneDNN's layout during the call (`onednn_linear_layers`); the "
        "encoder's run once per call, where the layout would cost about what it saves.\n"
        + (GenerationMixin.generate.__doc__ or "")
    )

    def _prepare_generation_config(self, generation_config, **kwargs):
        # A caller's max_length (a keyword, or in the generation config given) counts: the saved config's
        # max_new_tokens (train.py writes one) would win.
        if "max_length" in kwargs:
            max_length = kwargs["max_length"]
        elif generation_config is not None and generation_config.max_new_tokens is None:
            max_length = generation_config.max_length
        else:
            max_length = None
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        if max_length is not None and "max_new_tokens" not in kwargs:
            generation_config.max_new_tokens = None
        # transformers lets num_beams < 1 through to a ZeroDivisionError or a "negative dimension" deep in search.
        if generation_config.num_beams is not None and generation_config.num_beams < 1:
            raise ValueError(f"`num_beams` must be >= 1 (1 = greedy or sampling), got {generation_config.num_beams}.")
        return generation_config, model_kwargs

    def _reorder_cache(self, cache: Cache, beam_idx: torch.Tensor) -> Cache:
        """Beam search: after each step, the decoder self-attention cache follows the chosen beams. The
        encoder-decoder attention's keys and values stay in place: beam search repeats each source's encoder output
        once per beam, and a beam is only ever replaced by a beam of the same source, so the rows it would copy hold
        the same source's keys and values already (Marian copies them: one index copy per layer, step and K/V)."""
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache
