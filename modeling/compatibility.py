"""What differs between the supported transformers versions (5.17 and later).

- transformers 5.24 renamed the key/value cache `past_key_values` to `cache` (the argument generate() passes to
  forward(), the output field and the masking functions' keyword). The model's forward methods take either name
  (`takes_either_cache_name`; the old one with transformers' deprecation warning where `cache` is the installed name),
  keep `cache` inside, and return and hand on the cache under the name of the installed version (`CACHE_NAME`).
- transformers 5.24 counts recorded hidden states by a depth key of the stack's own (`layer_outputs`).

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import functools
import inspect
import warnings

from torch import nn
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils.output_capturing import OutputRecorder

CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def cache_argument(module: nn.Module, cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The cache passed as `cache` (transformers >= 5.24) or as `past_key_values` (earlier versions; where `cache` is
    the installed name, the old one warns as transformers' own models do, naming `module`'s forward)."""
    if past_key_values is None:
        return cache
    if cache is not None:
        raise ValueError(
            "Pass the key/value cache as `cache` or as `past_key_values`, not both (generate() before transformers "
            "5.24 takes it as `past_key_values` only)."
        )
    if CACHE_NAME == "cache":
        warnings.warn(f"`past_key_values` is deprecated for `{type(module).__name__}.forward`. Use `cache` instead.",
                      FutureWarning, stacklevel=2)
    return past_key_values


def takes_either_cache_name(forward):
    """`forward`, which takes the cache as `cache`, taking it as `past_key_values` too (`cache_argument`), so that the
    model's forward methods name the cache once; its signature lists both, as generate() of either version reads it."""

    @functools.wraps(forward)
    def forward_taking_either_name(self, *args, past_key_values: Cache | None = None, **kwargs):
        if past_key_values is not None:
            kwargs["cache"] = cache_argument(self, kwargs.get("cache"), past_key_values)
        return forward(self, *args, **kwargs)

    signature = inspect.signature(forward)
    parameters = list(signature.parameters.values())
    old_name = inspect.Parameter("past_key_values", inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Cache | None)
    variadic = [index for index, parameter in enumerate(parameters) if parameter.kind is inspect.Parameter.VAR_KEYWORD]
    parameters.insert(variadic[0] if variadic else len(parameters), old_name)
    forward_taking_either_name.__signature__ = signature.replace(parameters=parameters)
    return forward_taking_either_name


def encoder_decoder_cache(cache: Cache, config) -> EncoderDecoderCache:
    """A cache of the decoder's self-attention alone (a `DynamicCache()` passed to generate(), as decoder-only models
    take one) gets an empty encoder-decoder part beside it; one that already holds steps cannot be completed."""
    if cache.get_seq_length() > 0:
        raise ValueError(
            f"The decoder needs an `EncoderDecoderCache` (self-attention and encoder-decoder attention), got a "
            f"{type(cache).__name__} that already holds steps; pass an empty cache or an `EncoderDecoderCache`."
        )
    return EncoderDecoderCache(cache, DynamicCache(config=config))


def decoder_cache(config, cache: Cache | None, use_cache: bool | None, packed: bool) -> EncoderDecoderCache | None:
    """The decoder's cache: a new one where `use_cache` asks for one and none is given (never for a packed batch,
    which trains), or the one given, with an empty encoder-decoder part added to a self-attention cache alone."""
    if use_cache and cache is None and not packed:
        return EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    if cache is not None and not isinstance(cache, EncoderDecoderCache):
        return encoder_decoder_cache(cache, config)
    return cache


def layer_outputs(layer_class: type[nn.Module], depth_key: str) -> OutputRecorder | type[nn.Module]:
    """The hidden states a stack records: its layers' outputs, counted by its own depth (`encoder_layers` or
    `decoder_layers`) when transformers resolves `output_hidden_states=[indices]` (>= 5.24), not by
    `num_hidden_layers` (the encoder's), which dropped a deeper decoder's last layers."""
    if "num_hidden_layers_key" in OutputRecorder.__dataclass_fields__:
        return OutputRecorder(layer_class, num_hidden_layers_key=depth_key)
    return layer_class
