"""Attention heatmaps for one sentence, the pictures The Annotated Transformer draws ("Attention Visualization").

For each chosen kind of attention (§3.2.3: encoder self-attention, causal decoder self-attention, encoder-decoder
attention) and each chosen layer, one figure holds a grid of the chosen heads: row i of a panel is the attention
distribution of query position i over the key positions (each row sums to 1), axes labelled with the decoded
subwords. The decoder side is the decoder's input: the start token `<s>`, then the given target's tokens or the
model's greedy translation.

Weights come from `model(..., output_attentions=True)`, which only the eager attention implementation fills (SDPA
and flash attention return no weights), so `load_attention_model` switches the model to eager.
matplotlib is an optional extra (`pip install matplotlib`, or the `plot` extra), imported only when drawing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .translation import check_model_folder, load_config, load_translation_model

# kind -> (title, which stack's layers/heads it has, what the rows and the columns are)
ATTENTION_KINDS = {
    "encoder": ("Encoder self-attention", "encoder", ("source", "source")),
    "decoder": ("Decoder self-attention (masked)", "decoder", ("target", "target")),
    "cross": ("Encoder-decoder attention", "decoder", ("target", "source")),
}
INSTALL_HINT = "matplotlib is not installed: pip install matplotlib (or pip install -e '.[plot]')"


def require_matplotlib():
    """`matplotlib.figure`, or ImportError with the one line that says how to install it."""
    try:
        import matplotlib.figure
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return matplotlib.figure


# ----------------------------------------------------------------------------------------------------------------------
# Attention weights of one sentence
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SentenceAttention:
    """Attention weights of one sentence pair: per kind, one (heads, queries, keys) tensor per layer."""

    source_tokens: list[str]
    target_tokens: list[str]  # the decoder input: <s>, then the target
    weights: dict[str, tuple[torch.Tensor, ...]]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a kind's panels: queries and keys."""
        tokens = {"source": self.source_tokens, "target": self.target_tokens}
        rows, columns = ATTENTION_KINDS[kind][2]
        return tokens[rows], tokens[columns]


def _byte_of_symbol() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {symbol: byte for byte, symbol in bytes_to_unicode().items()}


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own. A byte-level token that holds part of a multi-byte character (which decodes
    to U+FFFD) shows its bytes instead, e.g. "l\\xc3" and "\\xa4uft" for "läuft"; a blank token shows as "␣"."""
    byte_of_symbol = None
    labels = []
    for token_id in ids:
        label = tokenizer.decode([token_id])
        if "\ufffd" in label:
            byte_of_symbol = byte_of_symbol or _byte_of_symbol()
            token = tokenizer.convert_ids_to_tokens(token_id)
            if all(symbol in byte_of_symbol for symbol in token):
                label = bytes(byte_of_symbol[symbol] for symbol in token).decode("utf-8", "backslashreplace").strip()
        labels.append(label if label.strip() else "␣" * max(len(label), 1))
    return labels


def load_attention_model(model_dir: str | os.PathLike, device: str = "cpu"):
    """(model, source tokenizer, target tokenizer) as `load_translation_model` gives them, with eager attention so
    that `output_attentions=True` returns the weights."""
    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device=device)
    model.set_attn_implementation("eager")
    return model, tokenizer, target_tokenizer


def check_sentences(source: str, target: str | None = None) -> None:
    """Raise ValueError unless the source (and the target, when given) holds more than whitespace."""
    if not source.strip():
        raise ValueError(f"the source sentence {source!r} is empty: give a sentence to translate")
    if target is not None and not target.strip():
        raise ValueError(
            f"the target sentence {target!r} is empty: give a translation, or leave it out to generate one"
        )


@torch.no_grad()
def sentence_attention(
    model, tokenizer, source: str, target: str | None = None, target_tokenizer=None, *,
    max_new_tokens: int | None = None,
) -> SentenceAttention:
    """The attention weights of every layer and head for `source` and `target` (default: the model's greedy
    translation of `source`, up to `max_new_tokens`)."""
    target_tokenizer = target_tokenizer or tokenizer
    check_sentences(source, target)
    if model.config._attn_implementation != "eager":
        raise ValueError(
            f"attention implementation {model.config._attn_implementation!r} returns no attention weights: load the "
            f"model with attn_implementation='eager' (load_attention_model does)"
        )
    inputs = tokenizer([source], return_tensors="pt").to(model.device)
    inputs.pop("token_type_ids", None)
    start = [model.config.decoder_start_token_id]
    if target is None:
        # an explicit max_new_tokens=None would replace the generation config's length with transformers' default 20
        length = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
        generated = model.generate(**inputs, num_beams=1, do_sample=False, **length)[0].tolist()
        target_ids = generated[1:]
        if target_ids and target_ids[-1] == model.config.eos_token_id:
            target_ids = target_ids[:-1]  # </s> is predicted, never read by the decoder
    else:
        target_ids = target_tokenizer(target, add_special_tokens=False)["input_ids"]
    decoder_input_ids = torch.tensor([start + target_ids], device=model.device)
    outputs = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
    weights = {"encoder": outputs.encoder_attentions, "decoder": outputs.decoder_attentions,
               "cross": outputs.cross_attentions}
    if any(layers is None or any(layer is None for layer in layers) for layers in weights.values()):
        raise ValueError("the model returned no attention weights: load it with attn_implementation='eager'")
    return SentenceAttention(
        source_tokens=token_labels(tokenizer, inputs["input_ids"][0].tolist()),
        target_tokens=token_labels(target_tokenizer, decoder_input_ids[0].tolist()),
        weights={kind: tuple(layer[0].float().cpu() for layer in layers) for kind, layers in weights.items()},
    )


# ----------------------------------------------------------------------------------------------------------------------
# Choosing layers and heads
# ----------------------------------------------------------------------------------------------------------------------


def _sizes(config, stack: str) -> tuple[int, int]:
    """(layers, heads) of the encoder or decoder stack."""
    return getattr(config, f"{stack}_layers"), getattr(config, f"{stack}_attention_heads")


def check_selection(
    config, kinds: Sequence[str], layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
) -> None:
    """Raise ValueError naming the bad value unless every kind is known and every chosen layer and head exists in the
    stack each chosen kind belongs to (None = all of them)."""
    if not kinds:
        raise ValueError(f"no attention kind chosen: choose from {', '.join(ATTENTION_KINDS)}")
    for kind in kinds:
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {kind!r}: choose from {', '.join(ATTENTION_KINDS)}")
        stack = ATTENTION_KINDS[kind][1]
        num_layers, num_heads = _sizes(config, stack)
        for name, chosen, count in (("layer", layers, num_layers), ("head", heads, num_heads)):
            for index in chosen or ():
                if not 0 <= index < count:
                    raise ValueError(
                        f"{name} {index} is out of range for {kind} attention: the {stack} has {count} {name}s "
                        f"(0 to {count - 1})"
                    )


# ----------------------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------------------


def attention_figure(
    weights: torch.Tensor, heads: Sequence[int], row_labels: Sequence[str], column_labels: Sequence[str], title: str,
):
    """A matplotlib Figure with one heatmap panel per head of `weights` (heads, queries, keys), in a grid of at most
    4 columns. Colours run from 0 to the largest weight shown, one scale for all panels so heads compare (a fixed
    0-1 scale would leave diffuse attention, about 1/length per key, uniformly dark)."""
    figure_module = require_matplotlib()
    columns = min(4, len(heads))
    rows = math.ceil(len(heads) / columns)
    cell = max(2.5, 0.22 * max(len(row_labels), len(column_labels)) + 1.0)  # inches per panel: labels stay legible
    figure = figure_module.Figure(figsize=(columns * cell, rows * cell + 0.6), layout="constrained")
    highest = float(weights[list(heads)].max())
    figure.suptitle(f"{title} (rows: queries, columns: keys; colour: 0 to {highest:.2f})")
    for position, head in enumerate(heads):
        axes = figure.add_subplot(rows, columns, position + 1)
        axes.imshow(weights[head].numpy(), vmin=0.0, vmax=highest, cmap="viridis")
        axes.set_title(f"head {head}", fontsize=9)
        axes.set_xticks(range(len(column_labels)), column_labels, rotation=90, fontsize=7)
        axes.set_yticks(range(len(row_labels)), row_labels, fontsize=7)
    return figure


def attention_figures(
    attention: SentenceAttention, config, kinds: Sequence[str] = tuple(ATTENTION_KINDS),
    layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
) -> dict[tuple[str, int], object]:
    """One figure per (kind, layer), each with one panel per chosen head (None = all layers / all heads)."""
    check_selection(config, kinds, layers, heads)
    figures = {}
    for kind in kinds:
        title, stack, _ = ATTENTION_KINDS[kind]
        num_layers, num_heads = _sizes(config, stack)
        row_labels, column_labels = attention.labels(kind)
        for layer in layers if layers is not None else range(num_layers):
            figures[kind, layer] = attention_figure(
                attention.weights[kind][layer], list(heads if heads is not None else range(num_heads)),
                row_labels, column_labels, f"{title}, layer {layer}",
            )
    return figures


def figure_path(output_dir: str | os.PathLike, kind: str, layer: int) -> Path:
    return Path(output_dir) / f"{kind}_attention_layer{layer}.png"


def plot_attention(
    model_dir: str | os.PathLike, source: str, output_dir: str | os.PathLike, *, target: str | None = None,
    kinds: Sequence[str] = tuple(ATTENTION_KINDS), layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None, max_new_tokens: int | None = None, dpi: int = 120,
) -> list[Path]:
    """Write `<kind>_attention_layer<L>.png` into `output_dir` for each chosen kind and layer; return the paths.
    Everything (matplotlib, the sentences, the model folder, layers and heads) is checked before anything is
    written."""
    require_matplotlib()
    check_sentences(source, target)
    if Path(output_dir).exists() and not Path(output_dir).is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file; give a folder")
    # The choices are checked against the config before the weights load (a quick error, no loading output).
    check_model_folder(model_dir)
    check_selection(load_config(model_dir), kinds, layers, heads)
    model, tokenizer, target_tokenizer = load_attention_model(model_dir)
    attention = sentence_attention(model, tokenizer, source, target, target_tokenizer, max_new_tokens=max_new_tokens)
    figures = attention_figures(attention, model.config, kinds, layers, heads)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    paths = []
    for (kind, layer), figure in figures.items():
        paths.append(figure_path(output_dir, kind, layer))
        figure.savefig(paths[-1], dpi=dpi)
    return paths


__all__ = [
    "ATTENTION_KINDS",
    "SentenceAttention",
    "attention_figure",
    "attention_figures",
    "check_selection",
    "check_sentences",
    "figure_path",
    "load_attention_model",
    "plot_attention",
    "require_matplotlib",
    "sentence_attention",
    "token_labels",
]
