"""The pictures of docs/annotated.md, each drawn from the computations in `demonstrations` (the package's own code).

`FIGURES` maps each picture's name to the function that draws it, in the page's order; `write_figures` writes them
as `<name>.png`. matplotlib is an optional extra (`pip install -e ".[plot]"`), imported only when drawing; figures are
built with `matplotlib.figure.Figure`, without pyplot, so nothing depends on a display or a global state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .. import modeling_annotated_transformer as package
from ..inference.attention_plots import require_matplotlib
from ..modeling_annotated_transformer import sinusoidal_positional_encoding
from ..tokenization import SPECIAL_TOKENS
from . import demonstrations as demo
from . import multi30k, table3_results

DPI = 100
PANEL = (5.0, 3.6)  # inches per panel: 500 x 360 pixels at DPI


def _figure(panels: int, height: float = PANEL[1], width: float = PANEL[0]):
    """A figure with `panels` axes side by side."""
    figure = require_matplotlib().Figure(figsize=(panels * width, height), layout="constrained")
    return figure, figure.subplots(1, panels, squeeze=False)[0]


def token_names(ids: Sequence[int]) -> list[str]:
    """Ids as the page writes them: special tokens by name (<pad> <s> </s> <unk>), others as numbers."""
    return [SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else str(i) for i in ids]


# ----------------------------------------------------------------------------------------------------------------------
# Figure 1: the map
# ----------------------------------------------------------------------------------------------------------------------

_ATTENTION, _NORM, _FEED_FORWARD = "#fbe3c6", "#f4f0a8", "#c9e7f5"


def model_map_figure():
    """Figure 1 of the paper redrawn, each box labelled with the package's class (or attribute) that implements it:
    the encoder on the left, the decoder on the right, N identical layers each, the output projection on top."""
    figure = require_matplotlib().Figure(figsize=(8.4, 9.4), layout="constrained")
    axes = figure.subplots()
    axes.set(xlim=(0, 10.6), ylim=(-0.1, 13.1))
    axes.axis("off")
    from matplotlib.patches import FancyBboxPatch  # matplotlib is there: require_matplotlib found it

    width, code = 3.7, dict(family="monospace", color="#333333")

    def box(x, y, label, name, colour, height=0.8):
        axes.add_patch(FancyBboxPatch((x - width / 2, y), width, height, boxstyle="round,pad=0.02,rounding_size=0.1",
                                      facecolor=colour, edgecolor="black", lw=1))
        axes.text(x, y + height * 0.64, label, ha="center", va="center", fontsize=9.5)
        axes.text(x, y + height * 0.26, name, ha="center", va="center", fontsize=7.5, **code)
        return y + height

    def arrow(x, y0, y1):
        axes.annotate("", (x, y1), (x, y0), arrowprops=dict(arrowstyle="->", lw=1))

    def stack(x, y, sublayers, layer, stack_name, side=-1):
        """N identical layers: each sub-layer, then its Add & Norm; returns the sub-layers' centres and the top."""
        top = y + 0.25 + len(sublayers) * 2.2
        axes.add_patch(FancyBboxPatch((x - width / 2 - 0.3, y), width + 0.6, top - y + 0.05,
                                      boxstyle="round,pad=0.02,rounding_size=0.2", facecolor="#f2f2f2",
                                      edgecolor="#555555", lw=1.2))
        axes.text(x + side * (width / 2 + 0.4), (y + top) / 2, "N ×", ha="right" if side < 0 else "left",
                  va="center", fontsize=11)
        axes.text(x - 0.15, y - 0.1, f"{layer} × N\nin {stack_name}", ha="right", va="top", fontsize=7, **code)
        centres, y = [], y + 0.25
        for index, (label, name, colour) in enumerate(sublayers):
            centres.append(y + 0.45)
            y = box(x, y, label, name, colour, height=0.9)
            arrow(x, y, y + 0.15)
            y = box(x, y + 0.15, "Add & Norm", package.SublayerConnection.__name__, _NORM, height=0.7) + 0.45
            if index < len(sublayers) - 1:
                arrow(x, y - 0.45, y)
        return centres, top

    attention, feed_forward = package.AnnotatedTransformerAttention.__name__, package.PositionwiseFeedForward.__name__
    left, right = 3.0, 7.9  # the encoder's and the decoder's column
    for x, side, inputs in ((left, "Input", "Inputs: source ids"), (right, "Output", "Outputs, shifted right (<s> first)")):
        axes.text(x, 0.05, inputs, ha="center", va="center", fontsize=9)
        arrow(x, 0.25, 0.5)
        top = box(x, 0.5, f"{side} Embedding × √d_model", f"{package.TransformerEmbeddings.__name__} (embed_tokens)",
                  "#f9d0d9")
        arrow(x, top, top + 0.22)
        axes.text(x, top + 0.45, "+", ha="center", va="center", fontsize=15)
        axes.text(x - 0.3, top + 0.45, "Positional Encoding", ha="right", va="center", fontsize=8.5)
        axes.text(x + 0.3, top + 0.45, package.SinusoidalPositionalEncoding.__name__, ha="left", va="center",
                  fontsize=6.5, **code)
        arrow(x, top + 0.68, top + 1.1)
    encoder_centres, encoder_top = stack(
        left, 2.5, [("Multi-Head Attention", attention, _ATTENTION), ("Feed Forward", feed_forward, _FEED_FORWARD)],
        package.AnnotatedTransformerEncoderLayer.__name__, package.AnnotatedTransformerEncoder.__name__)
    decoder_centres, decoder_top = stack(
        right, 2.5, [("Masked Multi-Head Attention", attention, _ATTENTION), ("Multi-Head Attention", attention,
                                                                            _ATTENTION),
                   ("Feed Forward", feed_forward, _FEED_FORWARD)],
        package.AnnotatedTransformerDecoderLayer.__name__, package.AnnotatedTransformerDecoder.__name__, side=1)
    # the encoder's output (memory) into every decoder layer's encoder-decoder attention
    turn, gap = encoder_top + 0.45, (left + right) / 2
    axes.plot([left, left, gap, gap], [encoder_top + 0.05, turn, turn, decoder_centres[1]], color="black", lw=1.2)
    axes.annotate("", (right - width / 2, decoder_centres[1]), (gap, decoder_centres[1]),
                  arrowprops=dict(arrowstyle="->", lw=1.2))
    axes.text(left - width / 2 - 0.3, turn + 0.12, "memory: the encoder's output, the keys and values\nof each decoder layer's "
              "encoder-decoder attention", ha="left", va="bottom", fontsize=7.5)
    arrow(right, decoder_top + 0.05, decoder_top + 0.35)
    top = box(right, decoder_top + 0.35, "Linear", "lm_head (the embeddings' matrix, §3.4)", "#d8d0f0")
    arrow(right, top, top + 0.2)
    top = box(right, top + 0.2, "Softmax", "in the loss, and in generate()", "#c8ecc8")
    arrow(right, top, top + 0.25)
    axes.text(right, top + 0.42, "Output Probabilities", ha="center", va="center", fontsize=9)
    axes.set_title("Figure 1 of the paper, with the package's classes\n(the whole model: "
                   f"{package.AnnotatedTransformerForConditionalGeneration.__name__})", fontsize=10)
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# §3.5 positional encoding
# ----------------------------------------------------------------------------------------------------------------------


def positional_encoding_figure(num_positions: int = 100, d_model: int = 64, dimensions=(4, 12, 20, 28)):
    """The sinusoidal table as a heatmap (a row per dimension, a column per position), and the curves of a few
    dimensions far enough apart that their wavelengths differ several times (2π · 10000^(dimension/d_model))."""
    table = sinusoidal_positional_encoding(num_positions, d_model).numpy()
    figure, (heatmap, curves) = _figure(2)
    image = heatmap.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower")
    heatmap.set(xlabel="position", ylabel="dimension", title=f"PE(pos, dimension), d_model = {d_model}")
    figure.colorbar(image, ax=heatmap, shrink=0.8)
    for dimension in dimensions:
        kind = "sin" if dimension % 2 == 0 else "cos"
        wavelength = 2 * np.pi * 10000 ** ((dimension - dimension % 2) / d_model)
        curves.plot(table[:, dimension], label=f"dimension {dimension} ({kind}, wavelength {wavelength:.0f})")
    curves.set(xlabel="position", ylabel="PE", ylim=(-1.1, 1.6), title="a few dimensions: one sinusoid each")
    curves.legend(fontsize=7, loc="upper right", ncols=2)
    return figure


def relative_positions_figure(d_model_rotation: int = 16, offset: int = 3, num_positions: int = 100,
                              d_model: int = 64):
    """The rotation M_k that maps PE(pos) to PE(pos + k), and PE(pos) . PE(pos') over positions, which depends on
    pos - pos' only."""
    rotation = demo.relative_position_rotation(d_model_rotation, offset).numpy()
    table = sinusoidal_positional_encoding(num_positions, d_model).double()
    figure, (matrix, products) = _figure(2)
    image = matrix.imshow(rotation, cmap="RdBu", vmin=-1, vmax=1)
    matrix.set(title=f"M_k, k = {offset}, d_model = {d_model_rotation}: one 2x2 rotation\nper frequency",
               xlabel="PE(pos) dimension", ylabel="PE(pos + k) dimension")
    figure.colorbar(image, ax=matrix, shrink=0.8)
    image = products.imshow((table @ table.T).numpy(), cmap="viridis", origin="lower")
    products.set(title=f"PE(pos) . PE(pos'), d_model = {d_model}:\na function of pos - pos' only",
                 xlabel="pos'", ylabel="pos")
    figure.colorbar(image, ax=products, shrink=0.8)
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# §3.1, §3.2.3 masks
# ----------------------------------------------------------------------------------------------------------------------

MASK_TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention", "cross": "encoder-decoder"}


def masks_figure():
    """The boolean masks (SDPA's) each kind of attention receives for `mask_example()`, one row per sentence."""
    masks, inputs = demo.masks_as_received("sdpa"), demo.mask_example()
    source, target = inputs["input_ids"], inputs["decoder_input_ids"]
    labels = {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}
    figure = require_matplotlib().Figure(figsize=(10, 6.4), layout="constrained")
    axes = figure.subplots(2, 3)
    for column, kind in enumerate(MASK_TITLES):
        rows, columns = labels[kind]
        for sentence in range(2):
            panel = axes[sentence, column]
            panel.imshow(masks[kind][sentence, 0].numpy(), cmap="Greys_r", vmin=0, vmax=1)
            panel.set_title(f"{MASK_TITLES[kind]}, sentence {sentence + 1}", fontsize=9)
            panel.set_xticks(range(columns.shape[1]), token_names(columns[sentence].tolist()), fontsize=8)
            panel.set_yticks(range(rows.shape[1]), token_names(rows[sentence].tolist()), fontsize=8)
            panel.set_xticks(np.arange(columns.shape[1] + 1) - 0.5, minor=True)
            panel.set_yticks(np.arange(rows.shape[1] + 1) - 0.5, minor=True)
            panel.grid(which="minor", color="grey", lw=0.5)
            panel.tick_params(which="minor", length=0)
            panel.set(xlabel="keys", ylabel="queries")
    figure.suptitle("What each attention receives (white: may attend, black: masked)")
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# §3.2.1 scaled dot-product attention
# ----------------------------------------------------------------------------------------------------------------------

D_KS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def attention_scaling_figure(num_keys: int = 16):
    """Spread of q . k and the largest attention weight against d_k, with and without the 1/sqrt(d_k) scaling."""
    spreads = [demo.dot_product_spread(d_k, num_keys=num_keys) for d_k in D_KS]
    figure, (spread, peak) = _figure(2)
    spread.plot(D_KS, [s.score_std for s in spreads], "o-", label="q . k")
    spread.plot(D_KS, [s.scaled_score_std for s in spreads], "o-", label="q . k / sqrt(d_k)")
    spread.plot(D_KS, np.sqrt(D_KS), ":", color="grey", label="sqrt(d_k)")
    spread.set(xscale="log", yscale="log", xlabel="d_k", ylabel="standard deviation",
               title="scores of random q, k (components N(0, 1))")
    spread.legend(fontsize=8)
    peak.plot(D_KS, [s.top_weight for s in spreads], "o-", label="softmax(q . k)")
    peak.plot(D_KS, [s.scaled_top_weight for s in spreads], "o-", label="softmax(q . k / sqrt(d_k))")
    peak.axhline(1 / num_keys, ls=":", color="grey", label=f"uniform, 1/{num_keys}")
    peak.set(xscale="log", ylim=(0, 1.02), xlabel="d_k", ylabel="mean largest weight",
             title=f"attention over {num_keys} keys: unscaled, it saturates")
    peak.legend(fontsize=8)
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# §3.1, §5.4 the sublayer connection
# ----------------------------------------------------------------------------------------------------------------------


def sublayer_connection_figure():
    """|Sublayer(x)| / |x| per sublayer and the gradient norm per layer of fresh 6+6 models: post-norm with
    Xavier-uniform and with DeepNet's initialisation, pre-norm with Xavier-uniform."""
    starts = demo.sublayer_starts()
    figure, (updates, gradients) = _figure(2, width=5.5)
    for start in starts:
        updates.plot(range(1, len(start.update_ratios) + 1), start.update_ratios, "o-", ms=3, label=start.label)
        gradients.plot(range(1, len(start.gradient_norms) + 1), start.gradient_norms, "o-", ms=3, label=start.label)
    encoder_sublayers = sum(name.startswith("encoder") for name in starts[0].sublayers)
    updates.axvline(encoder_sublayers + 0.5, color="grey", ls=":")
    updates.set(xlabel=f"sublayer (encoder 1-{encoder_sublayers}, then decoder)", ylabel="|Sublayer(x)| / |x|",
                title="how far each sublayer moves its input, at the start")
    updates.legend(fontsize=8)
    layers = len(starts[0].layers) // 2
    gradients.axvline(layers + 0.5, color="grey", ls=":")
    gradients.set_xticks(range(1, 2 * layers + 1), [name.replace("encoder ", "E").replace("decoder ", "D")
                                                    for name in starts[0].layers])
    gradients.set(xlabel="layer", ylabel="gradient norm", title="gradient of each layer, first step")
    gradients.legend(fontsize=8)
    return figure


def layer_norm_batch_norm_figure():
    """Which axis each normalisation reads, on an embedded padded batch, and what padding does to each."""
    result = demo.layer_norm_against_batch_norm()
    tokens = result.hidden_states.reshape(-1, result.hidden_states.shape[-1]).numpy()
    padding = result.attention_mask.reshape(-1).numpy() == 0
    figure, (grid, changes) = _figure(2)
    grid.imshow(tokens, aspect="auto", cmap="RdBu", vmin=-3, vmax=3)
    for row in np.flatnonzero(padding):
        grid.axhspan(row - 0.5, row + 0.5, facecolor="lightgrey", alpha=0.85, hatch="//", lw=0)
    grid.axhline(result.hidden_states.shape[1] - 0.5, color="black", lw=1)
    from matplotlib.patches import Rectangle  # matplotlib is there: _figure required it

    grid.add_patch(Rectangle((-0.5, 1.5), tokens.shape[1], 1, fill=False, ec="black", lw=2))
    grid.add_patch(Rectangle((4.5, -0.5), 1, tokens.shape[0], fill=False, ec="darkorange", lw=2))
    grid.text(tokens.shape[1] - 1, 7, "LayerNorm: one token,\nevery feature", ha="right", fontsize=8,
              bbox=dict(facecolor="white", edgecolor="black"))
    grid.text(6.5, 10, "BatchNorm: one feature,\nevery token (padding too)", fontsize=8, color="darkorange",
              bbox=dict(facecolor="white", edgecolor="darkorange"))
    grid.set(xlabel="feature (d_model)", ylabel="token: A's 12, then B's 12",
             title="a batch of A (4 tokens) and B (7) padded to 12:\nembedded, padding hatched")
    names = list(result.layer_norm)[1:]
    x = np.arange(len(names))
    for shift, (label, normalised) in zip((-0.2, 0.2), (("LayerNorm", result.layer_norm),
                                                        ("BatchNorm", result.batch_norm))):
        change = [(normalised[name] - normalised["alone"]).abs().max().item() for name in names]
        changes.bar_label(changes.bar(x + shift, change, width=0.4, label=label), fmt="%.2f", fontsize=8)
    changes.set_xticks(x, ["A beside B\n(padded to 7)", "A beside B\n(padded to 12)"])
    changes.set(ylabel="largest change of A's normalised values", title="A normalised alone, then in a batch")
    changes.legend(fontsize=8)
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# §5.3, §5.1, §5.4 training
# ----------------------------------------------------------------------------------------------------------------------


BUDGETS = (1024, 2048, 4096, 8192)


def token_budget_batches_figure(shown_budget: int = 4096):
    """Padding of token-budget batches against random batches of the same mean size, and each budget batch's size
    against its longest source."""
    source, target = demo.example_lengths()
    comparisons = [demo.padding_comparison(budget, source, target) for budget in BUDGETS]
    figure, (bars, sizes) = _figure(2)
    x = np.arange(len(BUDGETS))
    bars.bar(x - 0.2, [100 * c.random_padding for c in comparisons], width=0.4, label="random batches")
    bars.bar(x + 0.2, [100 * c.budget_padding for c in comparisons], width=0.4, label="token budget")
    bars.set_xticks(x, [f"{budget}\n({c.pairs_per_batch:.0f} pairs)" for budget, c in zip(BUDGETS, comparisons)])
    bars.set(xlabel="max_tokens (mean pairs per batch)", ylabel="padding, % of the padded tokens",
             title="29,000 Multi30k-like pairs")
    bars.set_ylim(0, 70)
    bars.legend(fontsize=8, loc="upper left")
    shown = comparisons[BUDGETS.index(shown_budget)]
    sizes.scatter(shown.longest_sources, shown.batch_sizes, s=10)
    lengths = np.arange(3, max(shown.longest_sources) + 1)
    sizes.plot(lengths, shown_budget / lengths, ":", color="grey", label=f"{shown_budget} / length")
    sizes.set(xlabel="longest source in the batch", ylabel="pairs in the batch",
              title=f"the {shown.batches} batches of max_tokens {shown_budget}")
    sizes.legend(fontsize=8)
    return figure


def noam_schedule_figure(steps: int = 20000):
    """`noam_learning_rate` for a few (d_model, warmup_steps), as The Annotated Transformer draws it."""
    figure, (axes,) = _figure(1, width=6.5)
    for d_model, warmup_steps in demo.NOAM_SETTINGS:
        axes.plot(range(1, steps + 1), demo.noam_curve(d_model, warmup_steps, steps),
                  label=f"d_model {d_model}, warmup {warmup_steps}")
    axes.set(xlabel="step", ylabel="learning rate (factor 1)",
             title="lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5)")
    axes.legend(fontsize=8)
    return figure


def label_smoothing_figure(epsilon: float = 0.4, vocab_size: int = 8, gold_ids=(4, 6, 5, 7, 2)):
    """The smoothed target distribution q for a few gold tokens, and the loss against the model's confidence in the
    gold token, as The Annotated Transformer draws them."""
    targets = demo.smoothed_targets(gold_ids, vocab_size, epsilon).numpy()
    figure, (heatmap, losses) = _figure(2)
    image = heatmap.imshow(targets, cmap="viridis", vmin=0, vmax=1)
    heatmap.set_xticks(range(vocab_size), token_names(range(vocab_size)))
    heatmap.set_yticks(range(len(gold_ids)), [f"gold {name}" for name in token_names(gold_ids)])
    heatmap.set(xlabel="token", title=f"target distribution q, epsilon = {epsilon}, V = {vocab_size}")
    figure.colorbar(image, ax=heatmap, shrink=0.8)
    confidences = np.linspace(0.02, 0.999, 400)
    for smoothing in (0.0, 0.1, epsilon):
        loss = demo.loss_against_confidence(confidences, smoothing)
        line = losses.plot(confidences, loss, label=f"epsilon = {smoothing}")[0]
        losses.plot(confidences[loss.argmin()], loss.min(), "o", color=line.get_color())
    losses.set(xlabel="probability the model gives the gold token", ylabel="loss (KL(q || p))", ylim=(0, 3),
               title="loss against confidence, V = 8:\nleast at 1 - epsilon")
    losses.legend(fontsize=8)
    return figure


# ----------------------------------------------------------------------------------------------------------------------
# The copy task
# ----------------------------------------------------------------------------------------------------------------------


def attention_layers_figure(attentions: dict[str, Sequence[torch.Tensor]], source: Sequence[str],
                            decoder_input: Sequence[str], title: str):
    """Every layer and head of each kind of attention (`demonstrations.attention_weights`): a row per (kind, layer),
    a column per head; each panel's rows are queries, its columns keys, coloured from 0 to 1."""
    rows = [(kind, layer) for kind in demo.ATTENTION_OUTPUTS for layer in range(len(attentions[kind]))]
    heads = attentions["encoder"][0].shape[0]
    labels = {"encoder": (source, source), "decoder": (decoder_input, decoder_input), "cross": (decoder_input, source)}
    figure = require_matplotlib().Figure(figsize=(2.1 * heads, 2.2 * len(rows) + 0.4), layout="constrained")
    axes = figure.subplots(len(rows), heads, squeeze=False)
    for row, (kind, layer) in enumerate(rows):
        queries, keys = labels[kind]
        for head in range(heads):
            panel = axes[row, head]
            image = panel.imshow(attentions[kind][layer][head].numpy(), vmin=0, vmax=1, cmap="viridis")
            if row == 0:
                panel.set_title(f"head {head}", fontsize=9)
            if head == 0:
                panel.set_ylabel(f"{MASK_TITLES[kind]}\nlayer {layer}", fontsize=8)
            panel.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
            panel.set_yticks(range(len(queries)), queries, fontsize=6)
    figure.colorbar(image, ax=axes, shrink=0.3, label="attention weight")
    figure.suptitle(f"{title} (rows: queries, columns: keys)")
    return figure


def copy_task_attention_figure(result: demo.CopyAttention | None = None):
    """Every layer and head of the copy task's model, trained here (`demonstrations.copy_task_attention`) unless
    `result` is given, for a new sequence decoded greedily."""
    result = demo.copy_task_attention() if result is None else result
    return attention_layers_figure(
        result.attentions, token_names(result.source), token_names(result.decoder_input),
        f"Copy task (greedy accuracy {100 * result.accuracy:.1f}%)",
    )


def translation_attention_figure(attentions: dict[str, Sequence[torch.Tensor]] | None = None,
                                 source: Sequence[str] | None = None, decoder_input: Sequence[str] | None = None):
    """Every layer (rows) and head of each kind of attention (columns: encoder self-attention, decoder
    self-attention, encoder-decoder attention, a head each) for one validation sentence and its greedy translation,
    as The Annotated Transformer's last part draws its model's. From `attentions` (kind -> per layer (heads,
    queries, keys)) and the tokens, as the walk passes those of the model built from scratch; without them, from
    the shipped model's (`multi30k.translation_attention`, FileNotFoundError when the clone lacks it)."""
    if attentions is None:
        result = multi30k.translation_attention()
        attentions, source, decoder_input = result.attentions, result.source, result.decoder_input
    kinds, layers = list(demo.ATTENTION_OUTPUTS), len(attentions["encoder"])
    heads = attentions["encoder"][0].shape[0]
    labels = {"encoder": (source, source), "decoder": (decoder_input, decoder_input), "cross": (decoder_input, source)}
    figure = require_matplotlib().Figure(figsize=(1.3 * heads * len(kinds) + 0.8, 1.3 * layers + 1.2),
                                         layout="constrained")
    axes = figure.subplots(layers, heads * len(kinds), squeeze=False)
    for column, (kind, head) in enumerate((kind, head) for kind in kinds for head in range(heads)):
        queries, keys = labels[kind]
        for layer in range(layers):
            panel = axes[layer, column]
            image = panel.imshow(attentions[kind][layer][head].detach().float().numpy(), vmin=0, vmax=1,
                                 cmap="viridis")
            panel.set_xticks(range(len(keys)), keys if layer == layers - 1 else [], rotation=90, fontsize=5)
            panel.set_yticks(range(len(queries)), queries if head == 0 else [], fontsize=5)
            if layer == 0:
                panel.set_title(f"{MASK_TITLES[kind]}\nhead {head}" if head == 0 else f"head {head}", fontsize=7)
            if column == 0:
                panel.set_ylabel(f"layer {layer}", fontsize=8)
    figure.colorbar(image, ax=axes, shrink=0.3, label="attention weight")
    figure.suptitle("German→English: a validation sentence and its greedy translation, every layer and head (rows of "
                    "a panel: queries, columns: keys)", fontsize=9)
    return figure


TABLE3_PANELS = {"A": "(A) heads, at constant computation", "B": "(B) a smaller key size d_k",
                 "E": "(E) learned positions"}


def table3_figure(table: table3_results.Table3 | None = None, groups: Sequence[str] = tuple(TABLE3_PANELS)):
    """Table 3's rows of `groups` (`table3_results.load_table3()` unless `table` is given): each row's difference in BLEU from
    its base row, ours (validation, Multi30k) beside the paper's (dev, newstest2013), and the band of our base seeds'
    spread, inside which a difference is a tie. Nothing is trained: the runs are the repository's measured ones."""
    table = table3_results.load_table3() if table is None else table
    figure, panels = _figure(len(groups), width=4.2, height=3.8)
    limit = 1.0  # BLEU points either side of 0, at least
    for axes, group in zip(panels, groups):
        rows = table.group(group)
        positions = np.arange(len(rows))
        ours = np.array([np.nan if row.bleu_difference is None else row.bleu_difference for row in rows])
        paper = np.array([np.nan if row.paper_bleu_difference is None else row.paper_bleu_difference for row in rows])
        axes.axhspan(-table.bleu_range, table.bleu_range, color="lightgrey", label="our base seeds' range (tie)")
        axes.axhline(0, color="grey", linewidth=0.8)
        axes.bar(positions - 0.18, ours, width=0.36, label="ours, validation")
        axes.bar(positions + 0.18, paper, width=0.36, label="the paper, dev")
        for position in positions[np.isnan(ours)]:
            axes.text(position - 0.18, 0.5, "not measured yet", rotation=90, ha="center", va="center", fontsize=7,
                      transform=axes.get_xaxis_transform())
        axes.set_xticks(positions, [row.setting.replace(", ", "\n") for row in rows], fontsize=7)
        axes.set_xlim(-0.7, max(len(rows), 2) - 0.3)
        axes.set(title=TABLE3_PANELS.get(group, group), ylabel="BLEU minus the base row's")
        limit = max(limit, table.bleu_range, *np.abs(ours[~np.isnan(ours)]), *np.abs(paper[~np.isnan(paper)]))
    for axes in panels:
        axes.set_ylim(-1.15 * limit, 1.15 * limit)
    panels[0].legend(fontsize=7, loc="best")
    figure.suptitle(f"Table 3 at Multi30k's scale ({table.measured_runs} of {table.planned_runs} runs measured)",
                    fontsize=10)
    return figure


FIGURES: dict[str, Callable] = {  # in the page's order
    "model_map": model_map_figure,
    "positional_encoding": positional_encoding_figure,
    "relative_positions": relative_positions_figure,
    "attention_scaling": attention_scaling_figure,
    "masks": masks_figure,
    "layer_norm_batch_norm": layer_norm_batch_norm_figure,
    "token_budget_batches": token_budget_batches_figure,
    "noam_schedule": noam_schedule_figure,
    "label_smoothing": label_smoothing_figure,
    "copy_task_attention": copy_task_attention_figure,
    "table3": table3_figure,
    "translation_attention": translation_attention_figure,  # the walk's last section
    "sublayer_connection": sublayer_connection_figure,  # the appendix
}
TRAINED = {"copy_task_attention"}  # the figures that train a model first (seconds, not a fraction of one)


def write_figures(output_dir: str | os.PathLike, names: Sequence[str] | None = None, dpi: int = DPI) -> list[Path]:
    """Write `<name>.png` into `output_dir` for each of `names` (default: every figure); return the paths."""
    require_matplotlib()
    names = list(FIGURES) if names is None else list(names)
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}: choose from {', '.join(FIGURES)}")
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    paths = []
    with torch.random.fork_rng():  # figures that train leave the caller's random state as it was
        for name in names:
            path = Path(output_dir) / f"{name}.png"
            FIGURES[name]().savefig(path, dpi=dpi)
            paths.append(path)
    return paths


__all__ = [
    "DPI",
    "FIGURES",
    "TRAINED",
    "attention_layers_figure",
    "attention_scaling_figure",
    "copy_task_attention_figure",
    "label_smoothing_figure",
    "layer_norm_batch_norm_figure",
    "masks_figure",
    "model_map_figure",
    "noam_schedule_figure",
    "positional_encoding_figure",
    "relative_positions_figure",
    "sublayer_connection_figure",
    "table3_figure",
    "token_budget_batches_figure",
    "token_names",
    "translation_attention_figure",
    "write_figures",
]
