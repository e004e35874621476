"""Export a trained model to CTranslate2 (fast CPU/GPU inference, int8/float16 quantization); `ctranslate2_runtime`
translates with the export.

The model is written through CTranslate2's specification API, mapped layer by layer as its own Marian/BART loader
(`ctranslate2/converters/transformers.py`) does: q/k/v projections fused (one matrix for self-attention, query plus
fused key/value for encoder-decoder attention), each sub-layer's LayerNorm attached to the sub-layer, and
`pre_norm` set from `config.norm_first` (pre-norm adds the final LayerNorm after each stack, as ours does). Where
CTranslate2's defaults differ from this model, the export says what this model does instead of relying on them:

- positional encoding: CTranslate2's converters write the concatenated [sin | cos] table of Marian and fairseq, and
  the table its runtime uses when a model stores none differs from ours too; §3.5 and
  `sinusoidal_positional_encoding` interleave sin (even dimensions) and cos (odd dimensions), so each stack's table
  is written out as its position encodings (`max_position_embeddings` rows: longer inputs are an error, as here),
  the learned one of a model with `position_embedding_type="learned"` likewise;
- heads: d_k = d_v other than d_model / heads (Table 3's rows that set them) as CTranslate2's `head_dim`; a model
  whose d_k and d_v differ is refused, since CTranslate2 has one head size;
- LayerNorm epsilon (`config.layer_norm_eps`) and the embedding scale sqrt(d_model) (`config.scale_embedding`);
- vocabularies: the tokenizers' tokens in id order (one shared vocabulary when source and target agree, else
  source/target vocabularies), special tokens and the decoder start token `<s>` taken from the model config;
- decoding: `min_decoding_length=0` (CTranslate2 forbids `</s>` as the first token by default, `generate` does not).

Greedy decoding gives the token ids `generate(num_beams=1)` gives. Beam search gives those of
`generate(num_beams=k, early_stopping=True)`: CTranslate2 stops once k hypotheses have ended, while `generate`'s
default (`early_stopping=False`) may search on, so a few sentences can differ from that default.

The export folder also holds the tokenizer(s) and the model's `generation_config.json`, so it translates on its own:
`translate_ctranslate2(texts, folder)` defaults to the beam size and length the model was trained to decode with.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from ..common.run_folders import refuse_output_in_checkpoint
from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR
from ..tokenization import save_tokenizers
from .ctranslate2_runtime import CTRANSLATE2_MODEL_FILE, require_ctranslate2
from .translation import check_model_folder, load_translation_model

try:
    from ctranslate2.converters import Converter
    from ctranslate2.specs import common_spec, model_spec, transformer_spec
except ImportError:  # an optional extra: the functions below say what to install (`require_ctranslate2`)
    Converter = abc.ABC

# ----------------------------------------------------------------------------------------------------------------------
# Model -> CTranslate2 specification
# ----------------------------------------------------------------------------------------------------------------------


def _activation(name: str):
    activations = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "gelu_new": common_spec.Activation.GELUTanh,
        "gelu_pytorch_tanh": common_spec.Activation.GELUTanh,
        "silu": common_spec.Activation.SWISH,
        "swish": common_spec.Activation.SWISH,
    }
    if name not in activations:
        raise ValueError(
            f"activation_function {name!r} has no CTranslate2 equivalent; exportable: {sorted(activations)}"
        )
    return activations[name]


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = linear.weight.detach()
    if linear.bias is not None:
        spec.bias = linear.bias.detach()


def _set_fused_linear(spec, linears: Sequence[torch.nn.Linear]) -> None:
    spec.weight = torch.cat([linear.weight.detach() for linear in linears])
    spec.bias = torch.cat([linear.bias.detach() for linear in linears])


def _set_layer_norm(spec, layer_norm: torch.nn.LayerNorm) -> None:
    spec.gamma = layer_norm.weight.detach()
    spec.beta = layer_norm.bias.detach()


def _set_attention(spec, attention, sublayer) -> None:
    """§3.2.2 multi-head attention: self-attention as one fused q/k/v matrix, encoder-decoder attention as the query
    and a fused key/value matrix (keys/values come from the encoder output); the sub-layer's LayerNorm with it."""
    if len(spec.linear) == 3:  # encoder-decoder attention
        _set_linear(spec.linear[0], attention.q_proj)
        _set_fused_linear(spec.linear[1], [attention.k_proj, attention.v_proj])
    else:
        _set_fused_linear(spec.linear[0], [attention.q_proj, attention.k_proj, attention.v_proj])
    _set_linear(spec.linear[-1], attention.out_proj)
    _set_layer_norm(spec.layer_norm, sublayer.layer_norm)


def _set_feed_forward(spec, feed_forward, sublayer) -> None:
    _set_linear(spec.linear_0, feed_forward.fc1)
    _set_linear(spec.linear_1, feed_forward.fc2)
    _set_layer_norm(spec.layer_norm, sublayer.layer_norm)


def _head_dim(config, num_heads: int) -> int | None:
    """CTranslate2's `head_dim` for heads of d_k = d_v other than d_model / heads (None: its default); it has one
    size for queries, keys and values, so a model whose d_k and d_v differ is refused."""
    d_k, d_v = config.head_sizes(num_heads)
    if d_k != d_v:
        raise ValueError(f"d_k ({d_k}) != d_v ({d_v}): CTranslate2 gives queries, keys and values one head size, so a "
                         "model whose key and value sizes differ cannot be exported")
    return None if d_k * num_heads == config.d_model else d_k


def _set_stack(spec, stack, embed_tokens: torch.nn.Embedding, config) -> None:
    """Embeddings (§3.4), the stack's positions (our interleaved sinusoids, §3.5, or its learned table), and the
    final LayerNorm of a pre-norm stack."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = embed_tokens.weight.detach()
    spec.scale_embeddings = config.scale_embedding  # True = multiply by sqrt(d_model)
    spec.position_encodings.encodings = stack.embeddings.embed_positions.table.detach().float()
    if config.norm_first:
        _set_layer_norm(spec.layer_norm, stack.layer_norm)


def _vocabulary(tokenizer, size: int, which: str) -> list[str]:
    """The tokenizer's tokens in id order; the model's embedding matrix must have one row per token."""
    if len(tokenizer) != size:
        raise ValueError(
            f"the {which} tokenizer has {len(tokenizer)} tokens but the model's {which} embeddings have {size} rows: "
            f"export the tokenizer the model was trained with"
        )
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    missing = [token_id for token_id, token in enumerate(tokens) if token is None]
    if missing:
        raise ValueError(f"the {which} tokenizer has no token for id(s) {missing[:10]}: its ids are not 0..{size - 1}")
    return tokens


def _token(tokenizer, name: str, token_id) -> str:
    if isinstance(token_id, list):
        if len(token_id) != 1:
            raise ValueError(f"`{name}` {token_id}: CTranslate2 models have one such token; set a single id")
        token_id = token_id[0]
    if token_id is None:
        raise ValueError(f"`{name}` is not set in the model config; CTranslate2 needs it")
    return tokenizer.convert_ids_to_tokens(token_id)


def transformer_spec_from_model(model, tokenizer, target_tokenizer=None):
    """A `ctranslate2.specs.TransformerSpec` holding the weights, vocabularies and special tokens of an
    `AnnotatedTransformerForConditionalGeneration` (post- or pre-norm, tied or untied embeddings)."""
    require_ctranslate2()
    target_tokenizer = target_tokenizer or tokenizer
    config = model.config
    activation = _activation(config.activation_function)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(
            config.encoder_layers, config.encoder_attention_heads, pre_norm=config.norm_first, activation=activation,
            head_dim=_head_dim(config, config.encoder_attention_heads),
        ),
        transformer_spec.TransformerDecoderSpec(
            config.decoder_layers, config.decoder_attention_heads, pre_norm=config.norm_first, activation=activation,
            head_dim=_head_dim(config, config.decoder_attention_heads),
        ),
    )
    encoder, decoder = model.model.encoder, model.model.decoder
    _set_stack(spec.encoder, encoder, encoder.embeddings.embed_tokens, config)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_sublayer)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_sublayer)
    _set_stack(spec.decoder, decoder, decoder.embeddings.embed_tokens, config)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_sublayer)
        _set_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_sublayer)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_sublayer)
    _set_linear(spec.decoder.projection, model.lm_head)  # tied: the same matrix; CTranslate2 stores it once

    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.config.unk_token = tokenizer.unk_token
    spec.config.bos_token = target_tokenizer.bos_token
    spec.config.eos_token = _token(target_tokenizer, "eos_token_id", config.eos_token_id)
    spec.config.decoder_start_token = _token(target_tokenizer, "decoder_start_token_id", config.decoder_start_token_id)
    spec.register_source_vocabulary(_vocabulary(tokenizer, config.src_vocab_size, "source"))
    spec.register_target_vocabulary(_vocabulary(target_tokenizer, config.vocab_size, "target"))
    return spec


class AnnotatedTransformerConverter(Converter):
    """CTranslate2 converter for an in-memory model and its tokenizer(s): `.convert(output_dir, quantization=...)`."""

    def __init__(self, model, tokenizer, target_tokenizer=None):
        require_ctranslate2()
        self.model, self.tokenizer, self.target_tokenizer = model, tokenizer, target_tokenizer

    def _load(self):
        return transformer_spec_from_model(self.model, self.tokenizer, self.target_tokenizer)


def is_export_file(path: Path) -> bool:
    """Whether `path`, in an export folder, is one that `export_ctranslate2` writes: CTranslate2's model, config and
    vocabularies, the tokenizer(s) and the generation config."""
    if path.is_dir():
        return path.name == TARGET_TOKENIZER_SUBDIR
    written = (CTRANSLATE2_MODEL_FILE, "config.json", "generation_config.json", "special_tokens_map.json")
    return path.name in written or path.name.startswith("tokenizer") or path.name.endswith(("vocabulary.json",
                                                                                          "vocabulary.txt"))


def export_ctranslate2(
    model_dir: str | os.PathLike, output_dir: str | os.PathLike, *, quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Convert the model folder written by `scripts/train.py` to a CTranslate2 model in `output_dir`, with the
    tokenizer(s) and generation config beside it. An existing `output_dir` is refused unless `force`, which replaces
    an empty folder or an earlier export, nothing else.
    `quantization`: a CTranslate2 weight type (int8, int8_float16, int16, float16, bfloat16, float32, ...) or None
    to keep float32. Everything is checked before anything is written."""
    require_ctranslate2()
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    if quantization is not None and quantization not in model_spec.ACCEPTED_MODEL_TYPES:
        raise ValueError(f"quantization {quantization!r} is not one of {', '.join(model_spec.ACCEPTED_MODEL_TYPES)}")
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"output path {output_dir} is a file, not a folder")
    if output_dir.exists() and not force:
        raise FileExistsError(f"output folder {output_dir} already exists: pass --force (force=True) to replace it")
    if output_dir.exists() and any(output_dir.iterdir()) and not (output_dir / CTRANSLATE2_MODEL_FILE).is_file():
        raise FileExistsError(
            f"output folder {output_dir} holds files but no earlier export ({CTRANSLATE2_MODEL_FILE}); --force only "
            "replaces an export: choose another folder"
        )
    existing = sorted(output_dir.iterdir()) if output_dir.is_dir() else []
    others = [path.name for path in existing if not is_export_file(path)]
    if others:
        raise FileExistsError(
            f"output folder {output_dir} holds an earlier export and other files ({', '.join(others[:5])}), which "
            "--force would delete with it: move them, or choose another folder"
        )
    if output_dir.resolve() in (model_dir.resolve(), *model_dir.resolve().parents):
        raise ValueError(f"output folder {output_dir} holds the model folder {model_dir}: replacing it would delete it")
    refuse_output_in_checkpoint(output_dir)
    check_model_folder(model_dir)
    if (model_dir / "config.json").is_file():  # what CTranslate2 cannot hold, named before the weights load
        config = AnnotatedTransformerConfig.from_pretrained(model_dir)
        for heads in (config.encoder_attention_heads, config.decoder_attention_heads):
            _head_dim(config, heads)
    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device="cpu")
    converter = AnnotatedTransformerConverter(model, tokenizer, target_tokenizer)
    converter.convert(str(output_dir), quantization=quantization, force=force)
    save_tokenizers(tokenizer if target_tokenizer is tokenizer else (tokenizer, target_tokenizer), output_dir)
    model.generation_config.save_pretrained(output_dir)
    return output_dir


# ----------------------------------------------------------------------------------------------------------------------
# Translating with the exported model
__all__ = [
    "AnnotatedTransformerConverter",
    "export_ctranslate2",
    "is_export_file",
    "transformer_spec_from_model",
]
