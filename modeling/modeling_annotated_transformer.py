"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017) for transformers.

Reads top to bottom like Figure 1 of the paper: embeddings and positional encoding (§3.4, §3.5),
scaled dot-product and multi-head attention (§3.2), the position-wise feed-forward network (§3.3),
the residual + LayerNorm wrapper (§3.1, §5.4), encoder and decoder layers and stacks (§3.1), and the
generating head with the pre-softmax projection and the label-smoothed loss (§3.4, §5.4).

This file travels to the Hub as custom code: it imports only torch, transformers (with huggingface_hub, which
transformers requires) and the small modules next to it, each one concern that is not the paper's figure (input
checks, the positions' lookups, the fused loss, initialisation schemes, the cache's name across transformers versions,
saving with checksums, FSDP's shared embedding, dropout and oneDNN linear layers on CPUs, the masks of packed
batches), so `trust_remote_code=True` loads it where this package is not installed.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention_masks import decoder_attention_masks, encoder_self_attention_mask
from .compatibility import CACHE_NAME, decoder_cache, layer_outputs, takes_either_cache_name
from .configuration_annotated_transformer import AnnotatedTransformerConfig
from .dropout import Dropout
from .embedding_sharing import (
    OneVocabulary,
    embed_with_the_shared_module,
    pass_over_unregistered_embeddings,
    tied_weights_keys,
)
from .generation import TransformerGenerationMixin
from .initialization import init_weights, xavier_gain
from .input_checks import (
    check_attention_mask,
    check_decoder_inputs,
    check_encoder_inputs,
    check_labels,
    check_tokens_given,
    forward_token_ids_checked,
)
from .loss import label_smoothed_loss
from .onednn_linear import install_onednn_forwards
from .packed_batches import shift_tokens_right_per_pair
from .position_lookups import PositionLookups
from .saving import SavedAsCustomCode

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


class SinusoidalPositionalEncoding(PositionLookups, nn.Module):
    """§3.5 fixed sinusoids, precomputed up to `max_position_embeddings`. A non-persistent buffer: not a weight, not
    saved; `_init_weights` rebuilds it because `from_pretrained` materialises buffers uninitialised."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__()
        self.register_buffer(
            "encoding",
            sinusoidal_positional_encoding(config.max_position_embeddings, config.d_model),
            persistent=False,
        )

    @property
    def table(self) -> torch.Tensor:
        return self.encoding


class LearnedPositionalEmbedding(PositionLookups, nn.Embedding):
    """Table 3 (E): "learned positional embeddings [...] instead" of the sinusoids, one row per position, trained
    with the model (each stack its own, as in the paper's tensor2tensor code and in fairseq)."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    @property
    def table(self) -> torch.Tensor:
        return self.weight


POSITIONS = {"sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEmbedding}


class TransformerEmbeddings(nn.Module):
    """§3.4 + §3.5 + §5.4: token embedding * sqrt(d_model) + positional encoding, then dropout."""

    def __init__(self, config: AnnotatedTransformerConfig, vocab_size: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = POSITIONS[config.position_embedding_type](config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, input_ids=None, inputs_embeds=None, past_length: int | torch.Tensor = 0, attention_mask=None,
        position_ids=None,
    ) -> torch.Tensor:
        """`position_ids` (a packed batch's): each token's position within its pair; `attention_mask` (the
        encoder's): positions count each row's tokens, not its padding; otherwise they run from `past_length` (the
        decoder's, which continues from its cache)."""
        check_tokens_given(input_ids, inputs_embeds)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        inputs_embeds = inputs_embeds * self.embed_scale
        if position_ids is not None:
            positions = self.embed_positions.at(position_ids)
        elif attention_mask is not None and attention_mask.dim() == 2:
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
        self.head_dim, self.value_dim = config.head_sizes(num_heads)  # d_k, d_v: d_model / h unless configured
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, num_heads * self.head_dim)
        self.k_proj = nn.Linear(config.d_model, num_heads * self.head_dim)
        self.v_proj = nn.Linear(config.d_model, num_heads * self.value_dim)
        self.out_proj = nn.Linear(num_heads * self.value_dim, config.d_model)

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
            key = self.k_proj(source).view(*source.shape[:-1], -1, self.head_dim).transpose(1, 2)
            value = self.v_proj(source).view(*source.shape[:-1], -1, self.value_dim).transpose(1, 2)
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

    @takes_either_cache_name  # the cache's name across transformers versions, under which checkpointing drops it
    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None, cache: Cache | None = None, **kwargs,
    ) -> torch.Tensor:
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


class AnnotatedTransformerPreTrainedModel(SavedAsCustomCode, OneVocabulary, PreTrainedModel):
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
        # the configuration's checks run again: `from_pretrained(..., label_smoothing=1.0)` set values after they ran
        super().__init__(config.validated(), *inputs, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        """The configuration's `init_scheme` (see `initialization`); rebuilds the positional-encoding buffer, which
        `from_pretrained` leaves uninitialised."""
        if isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.encoding, sinusoidal_positional_encoding(*module.encoding.shape))
        else:
            init_weights(module, self.config, xavier_gain(self, module))


# ----------------------------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder stacks
# ----------------------------------------------------------------------------------------------------------------------


class AnnotatedTransformerStack(AnnotatedTransformerPreTrainedModel):
    """§3.1: a stack of N identical layers over the embeddings (+ a final LayerNorm when pre-norm)."""

    def __init__(self, config: AnnotatedTransformerConfig, vocab_size: int, layer_class: type, num_layers: int):
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(config, vocab_size)
        self.layers = nn.ModuleList([layer_class(config, layer_idx=i) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value


class AnnotatedTransformerEncoder(AnnotatedTransformerStack):
    """The encoder: `encoder_layers` layers over the source embeddings."""

    _can_record_outputs = {
        "hidden_states": layer_outputs(AnnotatedTransformerEncoderLayer, "encoder_layers"),
        "attentions": AnnotatedTransformerAttention,
    }

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config, config.src_vocab_size, AnnotatedTransformerEncoderLayer, config.encoder_layers)

    # no `merge_with_config_defaults`: its `use_cache` default would reach the layers, which keep no cache
    @capture_outputs
    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, position_ids=None, pair_ids=None, **kwargs
    ) -> BaseModelOutput:
        """`pair_ids` and `position_ids`: a packed batch's (see `packed_batches`), in place of `attention_mask`."""
        check_encoder_inputs(self.config, input_ids, inputs_embeds, attention_mask, position_ids, pair_ids)
        hidden_states = self.embeddings(input_ids, inputs_embeds, attention_mask=attention_mask,
                                        position_ids=position_ids)
        attention_mask = encoder_self_attention_mask(self.config, hidden_states, attention_mask, pair_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class AnnotatedTransformerDecoder(AnnotatedTransformerStack):
    """The decoder: `decoder_layers` layers over the target embeddings; self-attention is causal so position i sees
    only positions < i (§3.1), and its keys/values live in an `EncoderDecoderCache` during generation."""

    _can_record_outputs = {
        "hidden_states": layer_outputs(AnnotatedTransformerDecoderLayer, "decoder_layers"),
        "attentions": OutputRecorder(AnnotatedTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(AnnotatedTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config, config.vocab_size, AnnotatedTransformerDecoderLayer, config.decoder_layers)

    @takes_either_cache_name
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self, input_ids=None, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
        cache: Cache | None = None, inputs_embeds=None, use_cache: bool | None = None, position_ids=None,
        pair_ids=None, encoder_pair_ids=None, **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """`pair_ids`, `position_ids` and `encoder_pair_ids`: a packed batch's (see `packed_batches`), in place of
        the attention masks; it trains, so no cache is built."""
        cache = decoder_cache(self.config, cache, use_cache, packed=pair_ids is not None)
        # Positions continue from what the cache holds (transformers 5 has no cache_position): an int, or a 0-d
        # tensor for a static cache.
        past_length = cache.get_seq_length() if cache is not None else 0
        check_decoder_inputs(self.config, input_ids, inputs_embeds, attention_mask, position_ids, pair_ids,
                             encoder_hidden_states, past_length)
        hidden_states = self.embeddings(input_ids, inputs_embeds, past_length=past_length, position_ids=position_ids)
        causal_mask, encoder_attention_mask = decoder_attention_masks(
            self.config, hidden_states, attention_mask, cache, past_length, encoder_hidden_states,
            encoder_attention_mask, pair_ids, encoder_pair_ids,
        )
        for layer in self.layers:
            # encoder_hidden_states positional, so that gradient checkpointing passes it through; the cache under the
            # name under which it drops it (the layer runs twice)
            hidden_states = layer(hidden_states, causal_mask, encoder_hidden_states,
                                  encoder_attention_mask=encoder_attention_mask, **{CACHE_NAME: cache}, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states,
                                                         **{CACHE_NAME: cache if use_cache else None})


class AnnotatedTransformerModel(AnnotatedTransformerPreTrainedModel):
    """The bare encoder-decoder (Figure 1 without the final Linear + Softmax); returns `Seq2SeqModelOutput`."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        if config.tie_word_embeddings:
            # §3.4: one weight matrix shared by the two embedding layers (and the pre-softmax projection). Each
            # stack keeps its own module and transformers ties the parameters, so a checkpoint that lacks the
            # shared matrix is reported missing instead of counted as loaded through the other stack.
            self.shared = nn.Embedding(config.vocab_size, config.d_model)
            self._tied_weights_keys = tied_weights_keys()
            # for `embed_with_the_shared_module` (it passes nothing over while the stacks keep their own modules)
            self.register_load_state_dict_pre_hook(pass_over_unregistered_embeddings)
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
        """Tied: both stacks embed with `shared` itself, one module at one path, as FSDP2 needs (see
        `embedding_sharing`)."""
        embed_with_the_shared_module(self)

    @takes_either_cache_name
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
        position_ids=None,
        decoder_position_ids=None,
        pair_ids=None,
        decoder_pair_ids=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                position_ids=position_ids, pair_ids=pair_ids, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids, attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state, encoder_attention_mask=attention_mask,
            cache=cache, inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache, position_ids=decoder_position_ids, pair_ids=decoder_pair_ids,
            encoder_pair_ids=pair_ids, **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state, **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states, decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions, encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state, encoder_attentions=encoder_outputs.attentions,
        )


# ----------------------------------------------------------------------------------------------------------------------
# §3.4 Linear + Softmax, §5.4 label smoothing
# ----------------------------------------------------------------------------------------------------------------------


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs are the targets shifted right by one, starting with `decoder_start_token_id` (§3.1)."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError("`pad_token_id` and `decoder_start_token_id` must be set to build decoder inputs from labels.")
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


class AnnotatedTransformerForConditionalGeneration(AnnotatedTransformerPreTrainedModel, TransformerGenerationMixin):
    """The full Figure 1: encoder-decoder, then the pre-softmax linear projection (tied to the embeddings, §3.4).
    `forward(labels=...)` returns the (label-smoothed) loss; `generate()` does greedy, beam search and sampling."""

    def __init__(self, config: AnnotatedTransformerConfig):
        super().__init__(config)
        self.model = AnnotatedTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self._tied_weights_keys = tied_weights_keys("model.", with_output_projection=True)
            # Stored once as `model.shared.weight`; the Trainer, reloading a checkpoint, re-ties these instead of
            # reporting them missing.
            self._keys_to_ignore_on_save = list(self._tied_weights_keys)
        else:
            self._tied_weights_keys = None
        self.post_init()
        # AMD CPUs: generate()'s layers get their oneDNN forward now, before any compile traces them (`onednn_linear`)
        install_onednn_forwards(self.model.decoder, self.lm_head)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor, decoder_pair_ids=None) -> torch.Tensor:
        """The labels shifted right (§3.1), within each pair of a packed batch (`decoder_pair_ids`)."""
        if decoder_pair_ids is not None:
            return shift_tokens_right_per_pair(
                labels, decoder_pair_ids, self.config.pad_token_id, self.config.decoder_start_token_id
            )
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @takes_either_cache_name
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
        position_ids=None,
        decoder_position_ids=None,
        pair_ids=None,
        decoder_pair_ids=None,
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
        pair_ids, decoder_pair_ids, position_ids, decoder_position_ids: a packed batch (`modeling.data.packing`):
            several whole pairs end to end in each row, each token's pair (-1 on padding) and its position within
            its pair; attention then stays within each pair (`packed_batches`), in place of the attention masks.
            Decoder inputs built from `labels` are then shifted within each pair.
        """
        if labels is not None:
            check_labels(self, labels, decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds,
                         num_items_in_batch)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels, decoder_pair_ids)
        with forward_token_ids_checked(self.config, labels, input_ids if encoder_outputs is None else None,
                                       decoder_input_ids):
            outputs = self.model(
                input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
                cache=cache, inputs_embeds=inputs_embeds,
                decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache, position_ids=position_ids,
                decoder_position_ids=decoder_position_ids, pair_ids=pair_ids, decoder_pair_ids=decoder_pair_ids,
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

        # the bare model's outputs (the cache, hidden states, attentions) but its last hidden state, which `logits` are
        return Seq2SeqLMOutput(loss=loss, logits=logits,
                               **{name: value for name, value in outputs.items() if name != "last_hidden_state"})


__all__ = [
    "AnnotatedTransformerPreTrainedModel",
    "AnnotatedTransformerModel",
    "AnnotatedTransformerForConditionalGeneration",
    "label_smoothed_loss",
    "sinusoidal_positional_encoding",
    "shift_tokens_right",
]
