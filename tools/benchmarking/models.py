"""The two models the benchmark compares: ours and a transformers `MarianMTModel` of identical dimensions and
behaviour, and the name map between their weights.

Both are post-norm encoder-decoders with one shared embedding matrix tied to the output projection, embeddings
scaled by sqrt(d_model), fixed sinusoidal positions, ReLU feed-forward networks and the same dropout. The details
where Marian is fixed and ours is configurable are set on our side:

- LayerNorm epsilon: Marian's layers use `nn.LayerNorm`'s default 1e-5 (ours defaults to 1e-6);
- loss: Marian's own is plain cross-entropy, which ours computes with `label_smoothing=0` (same value, same
  normalisation by the number of non-ignored target tokens). With label smoothing, ours smooths as the paper
  does and Marian's logits go through transformers' `LabelSmoother`, the Trainer's way (see `training_speed`).

What stays different, and why it does not change the comparison:

- positional table layout: Marian stores sin(pos * w_i) in the first half of the columns and cos(pos * w_i) in
  the second half, ours interleaves them (sin in even columns, cos in odd: §3.5 as written). Same features in
  another order; `copy_weights_to_marian` copies our table into Marian's, so both compute the same function;
- Marian's positional tables are frozen `nn.Embedding` weights (parameters with `requires_grad=False`, two of
  them), ours is a non-persistent buffer: parameter counts are compared over trainable parameters;
- Marian adds `final_logits_bias` (a zero buffer of vocabulary size) to the logits: one extra elementwise add;
- Marian's token embedding has `padding_idx` (the pad row gets no gradient); the forward pass is the same.
"""

from __future__ import annotations

import re

import torch
from transformers import MarianConfig, MarianMTModel

from modeling.configuration_annotated_transformer import AnnotatedTransformerConfig
from modeling.modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration

# name -> (our preset, overrides). "tiny" is for tests and smoke runs.
SIZES = {
    "tiny": ("tiny", {}),
    "small": ("base", dict(
        d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=1024, decoder_ffn_dim=1024,
    )),
    "cpu_recipe": ("base", dict(  # the model of configs/multi30k_*_cpu.yaml
        d_model=128, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
    )),
    "base": ("base", {}),
    "big": ("big", {}),
}
MODEL_NAMES = ("ours", "marian")
MARIAN_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which MarianEncoderLayer/MarianDecoderLayer use

# Our parameter names -> Marian's (everything else, e.g. `self_attn.q_proj`, is named the same).
_MARIAN_NAMES = (
    (re.compile(r"\.embeddings\.embed_tokens\."), ".embed_tokens."),
    (re.compile(r"\.self_attn_sublayer\.layer_norm\."), ".self_attn_layer_norm."),
    (re.compile(r"\.encoder_attn_sublayer\.layer_norm\."), ".encoder_attn_layer_norm."),
    (re.compile(r"\.feed_forward_sublayer\.layer_norm\."), ".final_layer_norm."),
    (re.compile(r"\.feed_forward\.(fc[12])\."), r".\1."),
)


def benchmark_config(size: str, vocab_size: int = 8000, label_smoothing: float = 0.0) -> AnnotatedTransformerConfig:
    """Our configuration for a benchmark size, with the settings Marian fixes (see the module doc)."""
    if size not in SIZES:
        raise ValueError(f"Unknown benchmark size {size!r}; choose one of {list(SIZES)}.")
    preset, dimensions = SIZES[size]
    return AnnotatedTransformerConfig.from_preset(
        preset, **dimensions, vocab_size=vocab_size, layer_norm_eps=MARIAN_LAYER_NORM_EPS,
        label_smoothing=label_smoothing,
    )


def marian_config(config: AnnotatedTransformerConfig) -> MarianConfig:
    """The `MarianConfig` with the same dimensions, dropout, special tokens and behaviour as our `config` (the loss
    aside: Marian's own is plain cross-entropy, see the module doc)."""
    fixed_by_marian = {
        "norm_first": (False, "MarianMTModel is post-norm only"),
        "tie_word_embeddings": (True, "the benchmark compares the paper's shared, tied vocabulary"),
        "layer_norm_eps": (MARIAN_LAYER_NORM_EPS, "Marian's LayerNorms use nn.LayerNorm's default epsilon"),
    }
    for name, (required, reason) in fixed_by_marian.items():
        if getattr(config, name) != required:
            raise ValueError(
                f"`{name}`={getattr(config, name)!r} has no Marian equivalent: {reason}; use {required!r}."
            )
    return MarianConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # Marian's default forces </s> at max_length; ours does not
    )


def build_model(name: str, config: AnnotatedTransformerConfig, seed: int = 0):
    """One of the two models ("ours" or "marian"), each with its own initialisation."""
    if name not in MODEL_NAMES:
        raise ValueError(f"Unknown model {name!r}; choose one of {MODEL_NAMES}.")
    torch.manual_seed(seed)
    if name == "ours":
        return AnnotatedTransformerForConditionalGeneration(config)
    return MarianMTModel(marian_config(config))


def build_models(config: AnnotatedTransformerConfig, seed: int = 0) -> dict:
    """{"ours": model, "marian": model} computing the same function: Marian gets a copy of our weights."""
    models = {name: build_model(name, config, seed) for name in MODEL_NAMES}
    copy_weights_to_marian(models["ours"], models["marian"])
    return models


def marian_parameter_name(name: str) -> str:
    """The name in `MarianMTModel` of our parameter `name` (e.g. `...feed_forward.fc1.weight` -> `...fc1.weight`)."""
    for pattern, replacement in _MARIAN_NAMES:
        name = pattern.sub(replacement, name)
    return name


@torch.no_grad()
def copy_weights_to_marian(ours: AnnotatedTransformerForConditionalGeneration, marian: MarianMTModel) -> None:
    """Copy every trainable weight, and our positional table (see the module doc), into `marian`."""
    marian_parameters = dict(marian.named_parameters())
    for name, parameter in ours.named_parameters():
        marian_parameters[marian_parameter_name(name)].copy_(parameter)
    for stack in ("encoder", "decoder"):
        table = getattr(ours.model, stack).embeddings.embed_positions.encoding
        getattr(marian.model, stack).embed_positions.weight.copy_(table)


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


__all__ = [
    "MODEL_NAMES",
    "SIZES",
    "benchmark_config",
    "build_model",
    "build_models",
    "copy_weights_to_marian",
    "marian_config",
    "marian_parameter_name",
    "trainable_parameters",
]
