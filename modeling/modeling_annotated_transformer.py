"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017) for transformers.

Reads top to bottom like Figure 1 of the paper: embeddings and positional encoding (§3.4, §3.5),
scaled dot-product and multi-head attention (§3.2), the position-wise feed-forward network (§3.3),
the residual + LayerNorm wrapper (§3.1, §5.4), encoder and decoder layers and stacks (§3.1), and the
generating head with the pre-softmax projection and the label-smoothed loss (§3.4, §5.4).

This file travels to the Hub as custom code: it imports only torch, transformers (with huggingface_hub, which
transformers requires) and the files next to it (relative imports: the configuration, dropout, the prepacked
linear layers, the weights-file checks and the translation pipeline), so `trust_remote_code=True` loads it where
this package is not installed.
"""

import contextlib
import contextvars
import functools
import math
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple, logging
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_annotated_transformer import AnnotatedTransformerConfig
from .dropout import Dropout
from .prepacked_linear import prepacked_linear_layers
from .weight_files import verify_weights, write_checksums

logger = logging.get_logger(__name__)

# transformers 5.24 renamed the key/value cache `past_key_values` to `cache`: the argument generate() passes to
# forward(), the output field and the masking functions' keyword. The model takes either name as an argument, keeps
# `cache` inside, and returns and hands on its cache under the name of the installed version.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def cache_argument(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The cache passed as `cache` (transformers >= 5.24) or as `past_key_values` (earlier versions)."""
    if past_key_values is None:
        return cache
    if cache is not None:
        raise ValueError(
            "Pass the key/value cache as `cache` or as `past_key_values`, not both (generate() before transformers "
            "5.24 takes it as `past_key_values` only)."
        )
    return past_key_values


def encoder_decoder_cache(cache: Cache, config: AnnotatedTransformerConfig) -> EncoderDecoderCache:
    """A cache of the decoder's self-attention alone (a `DynamicCache()` passed to generate(), as decoder-only models
    take one) gets an empty encoder-decoder part beside it; one that already holds steps cannot be completed."""
    if cache.get_seq_length() > 0:
        raise ValueError(
            f"The decoder needs an `EncoderDecoderCache` (self-attention and encoder-decoder attention), got a "
            f"{type(cache).__name__} that already holds steps; pass an empty cache or an `EncoderDecoderCache`."
        )
    return EncoderDecoderCache(cache, DynamicCache(config=config))


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs are the targets shifted right by one, starting with `decoder_start_token_id` (§3.1)."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError("`pad_token_id` and `decoder_start_token_id` must be set to build decoder inputs from labels.")
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


# (id(tensor), vocabulary size) of the token ids a forward call checked for the stacks it calls (`token_ids_checked`)
_TOKEN_IDS_CHECKED = contextvars.ContextVar("token_ids_checked", default=frozenset())


def check_token_ids(*checks: tuple[torch.Tensor | None, int, str]) -> None:
    """Refuse ids the embedding cannot look up, with their value, instead of its bare "index out of range" (or a
    device-side assert on a GPU). Each check is (token_ids, vocab_size, name); together they cost one device sync
    (one per device). Tensors checked by the forward call under way (`token_ids_checked`) are passed over. Skipped
    while torch.compile traces."""
    if torch.compiler.is_compiling():
        return
    checked = _TOKEN_IDS_CHECKED.get()
    checks = [(ids, size, name) for ids, size, name in checks
              if ids is not None and ids.numel() and (id(ids), size) not in checked]
    if not checks:
        return
    for (ids, size, name), (low, high) in zip(checks, _token_id_ranges([ids for ids, _, _ in checks])):
        if low < 0 or high >= size:
            raise ValueError(
                f"`{name}` holds the token id {low if low < 0 else high}, outside the vocabulary [0, {size - 1}]: "
                "were the ids made by another tokenizer?"
            )


@contextlib.contextmanager
def token_ids_checked(*checks: tuple[torch.Tensor | None, int, str]):
    """`check_token_ids(*checks)`, then, within, the stacks called by the same forward pass over those tensors: a
    training step (labels, source and decoder inputs) syncs once, not once per stack. A GPU waits for the host after
    each sync until work is queued again. Holds for this call only: nothing is noted on the tensors themselves."""
    check_token_ids(*checks)
    known = {(id(ids), size) for ids, size, _ in checks if ids is not None}
    token = _TOKEN_IDS_CHECKED.set(_TOKEN_IDS_CHECKED.get() | known)
    try:
        yield
    finally:
        _TOKEN_IDS_CHECKED.reset(token)


def _token_id_ranges(tensors: list[torch.Tensor]) -> list[list[int]]:
    """[lowest, highest] id of each tensor, read to the host in one device sync per device."""
    ranges = [None] * len(tensors)
    devices = {}
    for index, ids in enumerate(tensors):
        devices.setdefault(ids.device, []).append(index)
    for indices in devices.values():
        values = torch.stack([torch.stack(torch.aminmax(tensors[index])) for index in indices]).tolist()
        for index, value in zip(indices, values):
            ranges[index] = value
    return ranges


def check_labels_fit_decoder_inputs(labels: torch.Tensor, decoder_tokens: torch.Tensor | None) -> None:
    """Each label is the target of the decoder input at its position: given both, they must be (batch, length) alike
    (otherwise the loss's gather fails with a bare size error)."""
    if decoder_tokens is not None and tuple(decoder_tokens.shape[:2]) != tuple(labels.shape):
        raise ValueError(
            f"`labels` has shape {tuple(labels.shape)}, but the decoder inputs are (batch, length) = "
            f"{tuple(decoder_tokens.shape[:2])}: each label is the target at its decoder input's position, so both "
            "must have the same shape (or leave out `decoder_input_ids` to build them from `labels`)."
        )


def warn_if_counted_padding(labels: torch.Tensor, pad_token_id: int | None) -> None:
    """The Trainer's `num_items_in_batch` counts every label but -100, so labels padded with the pad id, which the
    loss leaves out, would be counted in its denominator: say so (one device sync; skipped while compiling)."""
    if pad_token_id is None or torch.compiler.is_compiling() or not bool((labels == pad_token_id).any()):
        return
    logger.warning(
        f"`labels` are padded with pad_token_id ({pad_token_id}), which the loss leaves out, but the Trainer's "
        "`num_items_in_batch` counts every label that is not -100: the summed loss is divided by the padding too, so "
        "each batch's loss shrinks by its share of padding. Pad labels with -100 (DataCollatorForSeq2Seq's "
        "`label_pad_token_id`) for the exact mean over target tokens."
    )


def check_attention_mask(attention_mask: torch.Tensor | None, shape: tuple[int, int], name: str) -> None:
    """A 2-D mask must cover exactly the (batch, length) of the tokens it masks; anything else would be broadcast
    or ignored. (4-D masks are taken as given.)"""
    if attention_mask is not None and attention_mask.dim() == 2 and tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(
            f"`{name}` has shape {tuple(attention_mask.shape)}, but the tokens it masks are (batch, length) = "
            f"{tuple(shape)}"
        )


# ----------------------------------------------------------------------------------------------------------------------
# §3.4 Embeddings and §3.5 Positional Encoding
# ----------------------------------------------------------------------------------------------------------------------


def sinusoidal_positional_encoding(num_positions: int, d_model: int) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)
    inverse_frequency = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    encoding = torch.zeros(num_positions, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(position * inverse_frequency)
    encoding[:, 1::2] = torch.cos(position * inverse_frequency)[:, : d_model // 2]
    return encoding.float()


class SinusoidalPositionalEncoding(nn.Module):
    """§3.5 fixed sinusoids, precomputed up to `max_position_embeddings`. A non-persistent buffer: not a weight, not
    saved; `_init_weights` rebuilds it because `from_pretrained` materialises buffers uninitialised."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__()
        self.register_buffer(
            "encoding",
            sinusoidal_positional_encoding(config.max_position_embeddings, config.d_model),
            persistent=False,
        )

    def forward(self, start: int | torch.Tensor, length: int) -> torch.Tensor:
        """The encodings of positions start, ..., start + length - 1: a slice of the table (no gather, no device
        sync), or a gather when `start` is a tensor (a static cache's length), so that a compiled decoding step
        neither syncs nor breaks its graph."""
        if not torch.compiler.is_compiling() and start + length > self.encoding.shape[0]:
            raise ValueError(
                f"Sequence position {int(start + length - 1)} is beyond `max_position_embeddings` "
                f"({self.encoding.shape[0]}): truncate the input or build the model with a larger "
                "`max_position_embeddings`."
            )
        if isinstance(start, torch.Tensor):
            return self.encoding.index_select(0, start + torch.arange(length, device=start.device))
        return self.encoding[start : start + length]

    def of_tokens(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """(batch, length, d_model): each token's position counts the tokens before it in its row, so that a
        left-padded sentence is encoded as it is alone (padding positions, masked everywhere, repeat a neighbour's)."""
        self(0, attention_mask.shape[1])  # the length check
        return self.encoding[(attention_mask.ne(0).long().cumsum(-1) - 1).clamp(min=0)]


class TransformerEmbeddings(nn.Module):
    """§3.4 + §3.5 + §5.4: token embedding * sqrt(d_model) + positional encoding, then dropout."""

    def __init__(self, config: AnnotatedTransformerConfig, vocab_size: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = SinusoidalPositionalEncoding(config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, input_ids=None, inputs_embeds=None, past_length: int | torch.Tensor = 0, attention_mask=None
    ) -> torch.Tensor:
        """`attention_mask` (the encoder's): positions count each row's tokens, not its padding; otherwise they
        run from `past_length` (the decoder's, which continues from its cache)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Specify exactly one of `input_ids` / `inputs_embeds` (or their decoder_ counterparts).")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if 0 in inputs_embeds.shape[:2]:  # torch would fail later, reshaping the attention heads
            shape = tuple(inputs_embeds.shape[:2])
            raise ValueError(f"Empty input: (batch, length) = {shape}; give at least one token.")
        inputs_embeds = inputs_embeds * self.embed_scale
        if attention_mask is not None and attention_mask.dim() == 2:
            check_attention_mask(attention_mask, inputs_embeds.shape[:2], "attention_mask")
            positions = self.embed_positions.of_tokens(attention_mask)
        else:
            positions = self.embed_positions(past_length, inputs_embeds.shape[1])
        return self.dropout(inputs_embeds + positions.to(inputs_embeds.dtype))


# ----------------------------------------------------------------------------------------------------------------------
# §3.2 Attention
# ----------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
):
    """§3.2.1 scaled dot-product attention: softmax(Q K^T / sqrt(d_k)) V. The mask is additive and filled with the
    dtype's minimum (from transformers' masking utilities), so half precision does not overflow and a fully
    masked row gives a uniform distribution instead of NaN."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class AnnotatedTransformerAttention(nn.Module):
    """§3.2.2 multi-head attention, one module used three ways (§3.2.3): encoder self-attention, causal decoder
    self-attention whose keys/values grow in the cache one step at a time, and encoder-decoder attention whose
    keys/values are computed once per source and reused from the cache."""

    def __init__(self, config: AnnotatedTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        input_shape = hidden_states.shape[:-1]
        query = self.q_proj(hidden_states).view(*input_shape, -1, self.head_dim).transpose(1, 2)

        layer_cache, cross_attention_ready = cache, False
        if isinstance(cache, EncoderDecoderCache):
            cross_attention_ready = is_cross_attention and cache.is_updated.get(self.layer_idx, False)
            layer_cache = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache

        if cross_attention_ready:
            key = layer_cache.layers[self.layer_idx].keys
            value = layer_cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            kv_shape = (*source.shape[:-1], -1, self.head_dim)
            key = self.k_proj(source).view(kv_shape).transpose(1, 2)
            value = self.v_proj(source).view(kv_shape).transpose(1, 2)
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)
                if is_cross_attention:
                    cache.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = self.out_proj(output.reshape(*input_shape, -1).contiguous())
        return output, weights


# ----------------------------------------------------------------------------------------------------------------------
# §3.3 Position-wise feed-forward network, §3.1/§5.4 residual connection + layer normalisation
# ----------------------------------------------------------------------------------------------------------------------


class PositionwiseFeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, config: AnnotatedTransformerConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(self.activation_fn(self.fc1(hidden_states))))


class SublayerConnection(nn.Module):
    """Residual connection around a sub-layer with dropout (§5.4) and LayerNorm, the one place where the
    normalisation is placed: post-norm LayerNorm(x + Dropout(Sublayer(x))) as in the paper (§3.1), or pre-norm
    x + Dropout(Sublayer(LayerNorm(x))) as in The Annotated Transformer (`config.norm_first`)."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return hidden_states + self.dropout(sublayer(self.layer_norm(hidden_states)))
        return self.layer_norm(hidden_states + self.dropout(sublayer(hidden_states)))


# ----------------------------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder layers
# ----------------------------------------------------------------------------------------------------------------------


class AnnotatedTransformerEncoderLayer(GradientCheckpointingLayer):
    """§3.1: multi-head self-attention, then the feed-forward network, each wrapped in a SublayerConnection."""

    def __init__(self, config: AnnotatedTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = AnnotatedTransformerAttention(config, config.encoder_attention_heads, False, layer_idx)
        self.self_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config, config.encoder_ffn_dim)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> torch.Tensor:
        hidden_states = self.self_attn_sublayer(
            hidden_states, lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0]
        )
        return self.feed_forward_sublayer(hidden_states, self.feed_forward)


class AnnotatedTransformerDecoderLayer(GradientCheckpointingLayer):
    """§3.1: masked (causal) self-attention, encoder-decoder attention over the encoder output, then the
    feed-forward network, each wrapped in a SublayerConnection."""

    def __init__(self, config: AnnotatedTransformerConfig, layer_idx: int):
        super().__init__()
        self.self_attn = AnnotatedTransformerAttention(config, config.decoder_attention_heads, True, layer_idx)
        self.self_attn_sublayer = SublayerConnection(config)
        self.encoder_attn = AnnotatedTransformerAttention(config, config.decoder_attention_heads, False, layer_idx)
        self.encoder_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config, config.decoder_ffn_dim)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        cache = cache_argument(cache, past_key_values)
        hidden_states = self.self_attn_sublayer(
            hidden_states,
            lambda x: self.self_attn(x, attention_mask=attention_mask, cache=cache, **kwargs)[0],
        )
        hidden_states = self.encoder_attn_sublayer(
            hidden_states,
            lambda x: self.encoder_attn(
                x, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask, cache=cache,
                **kwargs,
            )[0],
        )
        return self.feed_forward_sublayer(hidden_states, self.feed_forward)


# ----------------------------------------------------------------------------------------------------------------------
# Initialisation and capabilities
# ----------------------------------------------------------------------------------------------------------------------


class AnnotatedTransformerPreTrainedModel(PreTrainedModel):
    config: AnnotatedTransformerConfig
    config_class = AnnotatedTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AnnotatedTransformerEncoderLayer", "AnnotatedTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    # no graph break in any forward, a static cache included: generate() may compile the decoding step
    _can_compile_fullgraph = True

    def __init__(self, config: AnnotatedTransformerConfig, *inputs, **kwargs):
        # The configuration's checks ran when it was built; `from_pretrained(..., label_smoothing=1.0)` sets values
        # after that, so they run again on what the model is built from.
        try:
            config.validate()
        except StrictDataclassError as error:
            raise ValueError(str(error.__cause__ or error)) from None
        super().__init__(config, *inputs, **kwargs)

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """Resize the one vocabulary: source and target embeddings (and the output projection), tied or not. With
        separate source/target vocabularies (`src_vocab_size != vocab_size`) a single new size is ambiguous."""
        if self.config.src_vocab_size != self.config.vocab_size:
            raise NotImplementedError(
                f"`resize_token_embeddings` resizes one shared vocabulary, but this model has separate source "
                f"({self.config.src_vocab_size}) and target ({self.config.vocab_size}) vocabularies: resize the "
                "encoder's and the decoder's `embeddings.embed_tokens` (and `lm_head`) yourself."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.src_vocab_size = self.config.vocab_size
        return embeddings

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        # transformers resizes the input (source) embeddings and `lm_head`; untied, the decoder's are another matrix.
        if not self.config.tie_word_embeddings:
            decoder = self.get_decoder()
            decoder.set_input_embeddings(self._get_resized_embeddings(
                decoder.get_input_embeddings(), new_num_tokens, pad_to_multiple_of, mean_resizing
            ))
        return super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)

    def save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        """Save as transformers does, plus the weights' SHA-256 digests (`checksums.sha256`) that loading checks."""
        # FSDP2's `fully_shard` gives a sharded model a class of its own, `FSDP<name>`, defined in torch: transformers
        # would save that class's file and its relative imports (torch's FSDP sources) as the model code and name
        # the class in `auto_map`, a folder that fails to load. Saved as the class it was built as, it does not.
        sharded_class = type(self)
        try:
            self.__class__ = _unsharded_class(sharded_class)
            return self._save_pretrained(save_directory, is_main_process, *args, **kwargs)
        finally:
            self.__class__ = sharded_class

    def _save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        # Saved as custom code (`register_for_auto_class`), the folder should also open with `AutoModel`, not only
        # with the Auto class of the saved object, so both models go into `auto_map`.
        if self._auto_class is not None:
            module = self.__class__.__module__.split(".")[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.AnnotatedTransformerModel",
                "AutoModelForSeq2SeqLM": f"{module}.AnnotatedTransformerForConditionalGeneration",
            }
            # The translation pipeline travels too (transformers 5 has none): this relative import makes transformers
            # copy its file with the model code, and `custom_pipelines` is what `pipeline(model=folder,
            # trust_remote_code=True)` looks up. Unregistered (loaded as remote code), the loaded config keeps its own.
            from .pipeline_annotated_transformer import AnnotatedTransformerTranslationPipeline

            if custom_pipelines := AnnotatedTransformerTranslationPipeline.custom_pipelines():
                self.config.custom_pipelines = custom_pipelines
        result = super().save_pretrained(save_directory, is_main_process, *args, **kwargs)
        if is_main_process:
            write_checksums(save_directory)
        return result

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """Load as transformers does, from safetensors only (never a pickle), after checking that a local folder's
        weights files are complete and match their saved digests: a corrupt file is named in the error instead of
        failing deep inside safetensors, or loading silently with a flipped bit."""
        kwargs.setdefault("use_safetensors", True)
        folder = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if os.path.isdir(folder):
            verify_weights(folder)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        """Xavier-uniform for every matrix (`p.dim() > 1`, as The Annotated Transformer does), except, under the
        "fairseq" and "deepnet" schemes, the embeddings: N(0, d_model^-0.5) (the tied output projection shares them);
        under "deepnet" the value-path matrices of each layer's sublayers (`residual_branch_matrices`) get DeepNet's
        smaller Xavier gain (`deepnet_gains`); zero biases; unit LayerNorms.
        Rebuilds the positional-encoding buffer, which `from_pretrained` leaves uninitialised."""
        scheme = self.config.init_scheme
        if isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.encoding, sinusoidal_positional_encoding(*module.encoding.shape))
        elif isinstance(module, nn.Embedding) and scheme in ("fairseq", "deepnet"):
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            if scheme == "normal":
                init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            else:
                init.xavier_uniform_(module.weight, gain=self._xavier_gain(module))
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def _xavier_gain(self, linear: nn.Module) -> float:
        """1, except under "deepnet" for the value, attention-output and feed-forward matrices of a layer: DeepNet's
        beta, the encoder's or the decoder's (transformers initialises a Linear on its own, so its layer is looked up
        here, among this model's layers)."""
        if self.config.init_scheme != "deepnet":
            return 1.0
        encoder_gain, decoder_gain = deepnet_gains(self.config.encoder_layers, self.config.decoder_layers)
        for layer in self.modules():
            if isinstance(layer, (AnnotatedTransformerEncoderLayer, AnnotatedTransformerDecoderLayer)) and any(
                linear is matrix for matrix in residual_branch_matrices(layer)
            ):
                return decoder_gain if isinstance(layer, AnnotatedTransformerDecoderLayer) else encoder_gain
        return 1.0


def residual_branch_matrices(layer: nn.Module) -> list[nn.Linear]:
    """The matrices on the value path of each sublayer of an encoder or decoder layer: every attention's value and
    output projections, and both feed-forward matrices (queries and keys only shape the attention weights)."""
    attentions = [child for child in layer.children() if isinstance(child, AnnotatedTransformerAttention)]
    return [linear for attention in attentions for linear in (attention.v_proj, attention.out_proj)] + [
        layer.feed_forward.fc1,
        layer.feed_forward.fc2,
    ]


def deepnet_gains(encoder_layers: int, decoder_layers: int) -> tuple[float, float]:
    """DeepNet's beta for an N-layer encoder and an M-layer decoder (Wang et al. 2022, "DeepNet: Scaling Transformers
    to 1,000 Layers", §3): 0.87 (N^4 M)^(-1/16) for the encoder, (12 M)^(-1/4) for the decoder (0.50 and 0.34 at
    6+6), the Xavier gain of `residual_branch_matrices`, so that each post-norm sublayer starts close to the
    identity. DeepNorm's other half, the residual weight alpha in LayerNorm(alpha x + Sublayer(x)), is left out: it
    would change the paper's architecture."""
    return 0.87 * (encoder_layers**4 * decoder_layers) ** (-1 / 16), (12 * decoder_layers) ** (-1 / 4)


# ----------------------------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder stacks
# ----------------------------------------------------------------------------------------------------------------------


def _unsharded_class(cls: type) -> type:
    """`cls`, or the class FSDP2's `fully_shard` built it from where `cls` is the `FSDP<name>` class (made in torch)
    that it gives a sharded module."""
    if not torch.distributed.is_available():
        return cls
    from torch.distributed.fsdp import FSDPModule

    return next(base for base in cls.__mro__ if not issubclass(base, FSDPModule))


def layer_outputs(layer_class: type[nn.Module], depth_key: str) -> OutputRecorder | type[nn.Module]:
    """The hidden states a stack records: its layers' outputs, counted by its own depth (`encoder_layers` or
    `decoder_layers`) when transformers resolves `output_hidden_states=[indices]` (>= 5.24), not by
    `num_hidden_layers` (the encoder's), which dropped a deeper decoder's last layers."""
    if "num_hidden_layers_key" in OutputRecorder.__dataclass_fields__:
        return OutputRecorder(layer_class, num_hidden_layers_key=depth_key)
    return layer_class


class AnnotatedTransformerEncoder(AnnotatedTransformerPreTrainedModel):
    """A stack of `encoder_layers` identical layers over the source embeddings (+ a final LayerNorm when pre-norm)."""

    _can_record_outputs = {
        "hidden_states": layer_outputs(AnnotatedTransformerEncoderLayer, "encoder_layers"),
        "attentions": AnnotatedTransformerAttention,
    }

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(config, config.src_vocab_size)
        self.layers = nn.ModuleList(
            [AnnotatedTransformerEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value

    # no `merge_with_config_defaults`: its `use_cache` default would reach the layers, which keep no cache
    @capture_outputs
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> BaseModelOutput:
        check_token_ids((input_ids, self.config.src_vocab_size, "input_ids"))
        hidden_states = self.embeddings(input_ids, inputs_embeds, attention_mask=attention_mask)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class AnnotatedTransformerDecoder(AnnotatedTransformerPreTrainedModel):
    """A stack of `decoder_layers` identical layers; self-attention is causal so position i sees only positions < i
    (§3.1), and its keys/values live in an `EncoderDecoderCache` during generation."""

    _can_record_outputs = {
        "hidden_states": layer_outputs(AnnotatedTransformerDecoderLayer, "decoder_layers"),
        "attentions": OutputRecorder(AnnotatedTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(AnnotatedTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(config, config.vocab_size)
        self.layers = nn.ModuleList(
            [AnnotatedTransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache: Cache | None = None,
        inputs_embeds=None,
        use_cache: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        cache = cache_argument(cache, past_key_values)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        elif cache is not None and not isinstance(cache, EncoderDecoderCache):
            cache = encoder_decoder_cache(cache, self.config)
        # Positions continue from what the cache holds (transformers 5 has no cache_position): an int, or a 0-d
        # tensor for a static cache.
        past_length = cache.get_seq_length() if cache is not None else 0
        # later generation steps feed back ids the model itself chose; a compiled step checks nothing on the host
        if not torch.compiler.is_compiling() and past_length == 0:
            check_token_ids((input_ids, self.config.vocab_size, "decoder_input_ids"))
        hidden_states = self.embeddings(input_ids, inputs_embeds, past_length=past_length)

        batch_size, seq_length = hidden_states.shape[:2]
        check_attention_mask(attention_mask, (batch_size, past_length + seq_length), "decoder_attention_mask")
        if encoder_hidden_states is not None:
            check_attention_mask(encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask")
        if attention_mask is None and seq_length == 1:
            # A decoding step: the one new position may attend to itself and to every earlier one, so nothing is
            # masked, and no mask is built (and checked on the host) at every generated token.
            causal_mask = None
        else:
            if attention_mask is None:
                attention_mask = torch.ones(batch_size, past_length + seq_length, device=hidden_states.device)
            self_attn_cache = cache.self_attention_cache if cache is not None else None
            causal_mask = create_causal_mask(
                config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask,
                **{CACHE_NAME: self_attn_cache},
            )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, so gradient checkpointing passes it through
                encoder_attention_mask=encoder_attention_mask,
                **{CACHE_NAME: cache},  # the name under which gradient checkpointing drops it (the layer runs twice)
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_NAME: cache if use_cache else None}
        )


def _pass_over_unregistered_embeddings(module, state_dict, prefix, *args) -> None:
    """`load_state_dict` pre-hook of a tied `AnnotatedTransformerModel`: a stack that embeds with `shared`
    unregistered (`embed_with_the_shared_module`) has no key of its own, so the state dict's copy under the stack's
    name is dropped."""
    for name in ("encoder", "decoder"):
        if "embed_tokens" not in getattr(module, name).embeddings._modules:
            state_dict.pop(f"{prefix}{name}.embeddings.embed_tokens.weight", None)


class AnnotatedTransformerModel(AnnotatedTransformerPreTrainedModel):
    """The bare encoder-decoder (Figure 1 without the final Linear + Softmax); returns `Seq2SeqModelOutput`."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        if config.tie_word_embeddings:
            # §3.4: one weight matrix shared by the two embedding layers (and the pre-softmax projection). Each
            # stack keeps its own module and transformers ties the parameters, so a checkpoint that lacks the
            # shared matrix is reported missing instead of counted as loaded through the other stack.
            self.shared = nn.Embedding(config.vocab_size, config.d_model)
            self._tied_weights_keys = {
                "encoder.embeddings.embed_tokens.weight": "shared.weight",
                "decoder.embeddings.embed_tokens.weight": "shared.weight",
            }
            # for `embed_with_the_shared_module` (it passes nothing over while the stacks keep their own modules)
            self.register_load_state_dict_pre_hook(_pass_over_unregistered_embeddings)
        else:
            self._tied_weights_keys = None
        self.encoder = AnnotatedTransformerEncoder(config)
        self.decoder = AnnotatedTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.tie_word_embeddings:
            self.shared = value
            self.decoder.set_input_embeddings(value)
        self.encoder.set_input_embeddings(value)

    def embed_with_the_shared_module(self) -> None:
        """Tied: both stacks embed with the module `shared` itself from now on, used but not registered in them, so
        that one module at one path holds the matrix (with the output projection). FSDP2 training (`fully_shard`)
        needs that: accelerate shards the input embedding and the output projection in one unit, and a stack's own
        module holding the same weight stayed in the root's unit, a second copy (torch < 2.13 trained the two apart
        and failed after an evaluation and a save; torch 2.13 refuses to shard); a module registered at three paths
        is one holder, but its state dict then names it three times and torch's full-state-dict load (the best
        checkpoint's, at the end) fails on the extra two. A state dict that names the stacks' embeddings (a model
        saved or loaded with its own modules) still loads: those copies of `shared.weight` are passed over. Saved
        checkpoints are the same; `from_pretrained` builds the stacks' own modules again, and so do
        `set_input_embeddings` and `resize_token_embeddings`."""
        if not self.config.tie_word_embeddings or "embed_tokens" not in self.encoder.embeddings._modules:
            return
        for stack in (self.encoder, self.decoder):
            del stack.embeddings._modules["embed_tokens"]
            object.__setattr__(stack.embeddings, "embed_tokens", self.shared)

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache_argument(cache, past_key_values),
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ----------------------------------------------------------------------------------------------------------------------
# §3.4 Linear + Softmax, §5.4 label smoothing
# ----------------------------------------------------------------------------------------------------------------------


def _loss_chunk_rows(logits: torch.Tensor) -> int:
    """Rows of logits the loss reads at a time, in float32: 4 MiB on a CPU (its passes over a chunk stay in cache),
    256 MiB elsewhere (few kernel launches; the float32 copies of bf16 logits stay bounded)."""
    elements = 2**20 if logits.device.type == "cpu" else 2**26
    return max(1, elements // logits.size(-1))


def _loss_chunks(logits: torch.Tensor) -> list[slice]:
    """The row ranges the loss goes through, one after the other. Under torch.compile a single one: the graph then
    holds no loop whose length depends on the number of rows (each new length would be a new graph), and the
    compiler fuses the passes itself."""
    if torch.compiler.is_compiling():
        return [slice(None)]
    step = _loss_chunk_rows(logits)
    return [slice(start, start + step) for start in range(0, logits.size(0), step)]


def _smoothing_weight(epsilon: float, vocab_size: int, pad_token_id: int | None) -> float:
    """q's weight on each token other than the gold one and padding: epsilon / (V - 2) (V - 1 without padding)."""
    return 0.0 if epsilon == 0 else epsilon / (vocab_size - 1 - (pad_token_id is not None))


def _smoothed_targets(like: torch.Tensor, gold_ids, epsilon: float, smooth: float, pad_token_id):
    """q as a tensor shaped `like` (for the differentiable gradient only): 1 - epsilon on the gold token, `smooth` on
    the others, 0 on padding."""
    targets = torch.full_like(like, smooth)
    if smooth and pad_token_id is not None:
        targets[:, pad_token_id] = 0
    return targets.scatter(-1, gold_ids.unsqueeze(-1), 1 - epsilon)


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """The summed loss of `label_smoothed_loss` over rows of logits, and its gradient, fused.

    With log p = logits - lse (lse: each row's log-sum-exp), q's weights 1 - epsilon (gold) and s = epsilon / (V - 2)
    (every other token but padding), and sum_v q_v = 1, a kept row's loss is
        sum_v q_v log q_v + lse - (1 - epsilon) logit_gold - s * (sum_v logit_v - logit_gold - logit_pad)
    and its gradient softmax(logits) - q. Forward reads the logits once per chunk of rows (see `_loss_chunks`) for
    lse and the row sums, in float32 for bf16/fp16 logits; backward writes the gradient chunk by chunk. Nothing of
    the logits' size is kept or built beside the gradient itself: no log-softmax copy for backward, no float32 copy
    of bf16 logits, no one-hot or zero-filled gradient buffer. A backward that builds a graph (`create_graph=True`,
    for second derivatives) computes the same gradient with differentiable operations instead.
    Returns (summed loss, lse); lse is not differentiable.
    """

    @staticmethod
    def forward(logits, labels, epsilon: float, pad_token_id: int | None):
        rows, vocab_size = logits.shape
        keep = labels != -100
        gold_ids = labels.clamp(min=0)
        smooth = _smoothing_weight(epsilon, vocab_size, pad_token_id)
        dtype = torch.promote_types(logits.dtype, torch.float32)  # float32 for bf16/fp16 logits
        lse = torch.empty(rows, dtype=dtype, device=logits.device)
        sums = torch.empty_like(lse) if smooth else None
        for rows_in_chunk in _loss_chunks(logits):
            chunk = logits[rows_in_chunk].to(dtype)  # a view unless the logits are bf16/fp16
            torch.logsumexp(chunk, dim=-1, out=lse[rows_in_chunk])
            if smooth:
                torch.sum(chunk, dim=-1, out=sums[rows_in_chunk])
        gold = logits.gather(-1, gold_ids.unsqueeze(-1)).squeeze(-1).to(dtype)
        loss = lse - gold
        if smooth:
            others = sums - gold
            if pad_token_id is not None:
                others = others - logits[:, pad_token_id].to(dtype)
            # Constant entropy term sum_v q_v log q_v, so the loss is 0 when p == q (as nn.KLDivLoss reports it).
            entropy = (1 - epsilon) * math.log(1 - epsilon) + epsilon * math.log(smooth)
            loss = entropy + lse - (1 - epsilon) * gold - smooth * others
        return torch.where(keep, loss, 0).sum(), lse  # where, not a product: an ignored row's inf or NaN stays out

    @staticmethod
    def setup_context(ctx, inputs, output):
        logits, labels, epsilon, pad_token_id = inputs
        _, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(logits, labels, lse)
        ctx.epsilon, ctx.pad_token_id = epsilon, pad_token_id

    @staticmethod
    def backward(ctx, grad_loss, grad_lse):
        logits, labels, lse = ctx.saved_tensors
        epsilon, pad_token_id = ctx.epsilon, ctx.pad_token_id
        smooth = _smoothing_weight(epsilon, logits.size(-1), pad_token_id)
        keep, gold_ids = labels != -100, labels.clamp(min=0)
        scale = torch.where(keep, grad_loss.to(lse.dtype), 0)  # 0 on ignored rows
        if torch.is_grad_enabled():  # create_graph=True: a gradient that is itself differentiable
            probabilities = torch.softmax(logits.to(lse.dtype), dim=-1)
            targets = _smoothed_targets(probabilities, gold_ids, epsilon, smooth, pad_token_id)
            return ((probabilities - targets) * scale.unsqueeze(-1)).to(logits.dtype), None, None, None
        grad = torch.empty_like(logits)
        in_place = grad.dtype == lse.dtype  # else each chunk is computed in float32, then copied
        for rows_in_chunk in _loss_chunks(logits):
            chunk = grad[rows_in_chunk] if in_place else None
            chunk = torch.sub(logits[rows_in_chunk].to(lse.dtype), lse[rows_in_chunk, None], out=chunk).exp_()
            if smooth:
                chunk.sub_(smooth)  # - q off the gold and padding columns
            chunk_scale = scale[rows_in_chunk]
            chunk.mul_(chunk_scale[:, None])
            rows = torch.arange(chunk.size(0), device=chunk.device)
            chunk[rows, gold_ids[rows_in_chunk]] -= (1 - epsilon - smooth) * chunk_scale
            if smooth and pad_token_id is not None:
                chunk[:, pad_token_id] += smooth * chunk_scale  # q is 0 there
            if not in_place:
                grad[rows_in_chunk].copy_(chunk)
        return grad, None, None, None


def label_smoothed_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, pad_token_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss over target tokens and the number of tokens it covers (labels -100 or padding are ignored).

    With `epsilon == 0` this is the cross-entropy. Otherwise it is §5.4's label smoothing as The Annotated
    Transformer computes it: the KL divergence KL(q || p) to a target distribution q with 1 - epsilon on the gold
    token and epsilon spread evenly over the other tokens except padding (epsilon / (V - 2); the padding column of
    q is 0), in closed form so that q is never materialised (`LabelSmoothedCrossEntropy`):
        KL = sum_v q_v log q_v - sum_v q_v log p_v.
    Computed in float32 (or float64) whatever the logits' dtype.
    """
    logits = logits.reshape(-1, logits.size(-1))
    labels = labels.reshape(-1)
    if pad_token_id is not None:
        labels = labels.masked_fill(labels == pad_token_id, -100)
    num_tokens = (labels != -100).sum()  # no boolean gather of the logits: no copy, no device sync
    return LabelSmoothedCrossEntropy.apply(logits, labels, epsilon, pad_token_id)[0], num_tokens


class AnnotatedTransformerForConditionalGeneration(AnnotatedTransformerPreTrainedModel, GenerationMixin):
    """The full Figure 1: encoder-decoder, then the pre-softmax linear projection (tied to the embeddings, §3.4).
    `forward(labels=...)` returns the (label-smoothed) loss; `generate()` does greedy, beam search and sampling."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        self.model = AnnotatedTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._checked_counted_padding = False  # `warn_if_counted_padding` looks at the first such batch only
        if config.tie_word_embeddings:
            # Every target points at the root parameter: transformers does not resolve chains of ties.
            self._tied_weights_keys = {
                "lm_head.weight": "model.shared.weight",
                "model.encoder.embeddings.embed_tokens.weight": "model.shared.weight",
                "model.decoder.embeddings.embed_tokens.weight": "model.shared.weight",
            }
            # Stored once as `model.shared.weight`; the Trainer, reloading a checkpoint, re-ties these instead of
            # reporting them missing.
            self._keys_to_ignore_on_save = list(self._tied_weights_keys)
        else:
            self._tied_weights_keys = None
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @functools.wraps(GenerationMixin.generate, assigned=())  # __wrapped__: its signature
    def generate(self, *args, **kwargs):
        with prepacked_linear_layers(self.model.decoder, self.lm_head):
            return super().generate(*args, **kwargs)

    generate.__doc__ = (
        "On an AMD CPU in float32, the decoder's and the output layer's linear layers, which run at every step, "
        "multiply with oneDNN-prepacked copies of their weights during the call (`prepacked_linear_layers`); the "
        "encoder's run once per call, where packing would cost about what it saves.\n"
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

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        cache: the key/value cache of earlier decoding steps (`past_key_values`, its name before transformers 5.24,
            is accepted too); returned under the installed version's name.
        labels: target token ids, -100 (or the pad id) where no loss is wanted. When `decoder_input_ids` are not
            given they are built by shifting `labels` right.
        num_items_in_batch: passed by the Trainer: the number of target tokens in the whole (accumulated,
            all-process) batch. The summed loss is divided by it, so gradient accumulation and multi-process
            training give exactly the full-batch mean; without it the loss is the mean over this batch's tokens.
            The Trainer counts every label but -100: labels padded with the pad id get a warning (the first
            time it is given), since their padding would be counted.
        """
        if labels is not None:
            check_labels_fit_decoder_inputs(
                labels, decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
            )
            if num_items_in_batch is not None and not self._checked_counted_padding:
                self._checked_counted_padding = True
                warn_if_counted_padding(labels, self.config.pad_token_id)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        # with labels (training), the stacks' ids are checked with them, in one device sync
        checked = contextlib.nullcontext() if labels is None or torch.compiler.is_compiling() else token_ids_checked(
            (labels.masked_fill(labels == -100, 0), self.config.vocab_size, "labels"),
            (input_ids if encoder_outputs is None else None, self.config.src_vocab_size, "input_ids"),
            (decoder_input_ids, self.config.vocab_size, "decoder_input_ids"),
        )
        with checked:
            outputs = self.model(
                input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask,
                encoder_outputs=encoder_outputs,
                cache=cache_argument(cache, past_key_values),
                inputs_embeds=inputs_embeds,
                decoder_inputs_embeds=decoder_inputs_embeds,
                use_cache=use_cache,
                **kwargs,
            )
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            loss_sum, num_tokens = label_smoothed_loss(
                logits, labels.to(logits.device), self.config.label_smoothing, self.config.pad_token_id
            )
            denominator = num_items_in_batch if num_items_in_batch is not None else num_tokens.clamp(min=1)
            if isinstance(denominator, torch.Tensor):
                denominator = denominator.to(loss_sum.device)
            loss = loss_sum / denominator

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "AnnotatedTransformerPreTrainedModel",
    "AnnotatedTransformerModel",
    "AnnotatedTransformerForConditionalGeneration",
    "label_smoothed_loss",
    "sinusoidal_positional_encoding",
    "shift_tokens_right",
]
