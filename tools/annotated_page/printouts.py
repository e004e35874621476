"""The printed results of docs/annotated.md: each a few lines of text computed by `modeling.learning.demonstrations`,
held on the page in a marker block `<!-- output: NAME -->` ... `<!-- /output -->` that `page` fills and checks
(`OUTPUTS` names them). Every one runs in well under a second on a CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from modeling.configuration_annotated_transformer import AnnotatedTransformerConfig
from modeling.learning import demonstrations as demo
from modeling.modeling_annotated_transformer import AnnotatedTransformerDecoderLayer

ROTATION_OFFSETS = (1, 5, 20, 50)
ROTATION_POSITIONS, ROTATION_D_MODEL = 1000, 512
SCALING_D_KS = (1, 4, 16, 64, 512)
PADDING_BUDGETS = (1024, 4096, 8192)
SMOOTHING_EPSILON, SMOOTHING_VOCAB, SMOOTHING_GOLD = 0.1, 8, (4, 6, 2)


def _grid(rows) -> str:
    """Rows of values, right-aligned in columns."""
    rows = [[str(value) for value in row] for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(value.rjust(width) for value, width in zip(row, widths)).rstrip() for row in rows)


def _table(header, rows) -> str:
    """A header and rows, left column left-aligned, the others right-aligned."""
    rows = [[str(value) for value in row] for row in (header, *rows)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["  ".join(value.ljust(width) if column == 0 else value.rjust(width)
                       for column, (value, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return "\n".join(lines)


def relative_positions() -> str:
    errors = [(k, demo.rotation_error(ROTATION_POSITIONS, ROTATION_D_MODEL, k)) for k in ROTATION_OFFSETS]
    lines = [f"d_model {ROTATION_D_MODEL}, pos = 0 ... {ROTATION_POSITIONS - 1}: max |M_k PE(pos) - PE(pos + k)|"]
    lines += [f"k = {k:>2}: {error:.1e}" for k, error in errors]
    return "\n".join(lines)


def embeddings() -> str:
    scale = demo.embedding_scale()
    return _table(("d_model 512, init_scheme deepnet", "std"), [
        ("token embeddings as initialised", f"{scale.embedding_std:.4f}"),
        (f"times sqrt(d_model) = {scale.d_model ** 0.5:.1f}", f"{scale.scaled_std:.4f}"),
        ("positional encodings (root mean square)", f"{scale.positional_rms:.4f}"),
    ])


def _mask_rows(mask: torch.Tensor) -> list[list[str]]:
    if mask.dtype == torch.bool:
        return [["1" if allowed else "0" for allowed in row] for row in mask.tolist()]
    minimum = torch.finfo(mask.dtype).min
    return [["min" if value == minimum else f"{value:g}" for value in row] for row in mask.tolist()]


def masks() -> str:
    inputs, boolean, additive = demo.mask_example(), demo.masks_as_received("sdpa"), demo.masks_as_received("eager")
    lines = [f"input_ids              {inputs['input_ids'].tolist()}",
             f"attention_mask         {inputs['attention_mask'].tolist()}",
             f"decoder_input_ids      {inputs['decoder_input_ids'].tolist()}",
             f"decoder_attention_mask {inputs['decoder_attention_mask'].tolist()}", ""]
    titles = {"encoder": "encoder self-attention", "decoder": "decoder self-attention", "cross":
              "encoder-decoder attention"}
    for kind, title in titles.items():
        mask = boolean[kind]
        lines.append(f"{title}: {str(mask.dtype).removeprefix('torch.')} {tuple(mask.shape)} (SDPA; 1 = may attend)")
        sentences = [_grid(_mask_rows(mask[sentence, 0])).splitlines() for sentence in range(mask.shape[0])]
        lines += [f"  {first}      {second}" for first, second in zip(*sentences)]
    mask = additive["decoder"]
    lines += ["", f"decoder self-attention, sentence 2, as eager attention adds it to the scores: "
                  f"{str(mask.dtype).removeprefix('torch.')}, min = {torch.finfo(mask.dtype).min:.4g}"]
    lines += [f"  {line}" for line in _grid(_mask_rows(mask[1, 0])).splitlines()]
    return "\n".join(lines)


def attention_scaling() -> str:
    spreads = [demo.dot_product_spread(d_k) for d_k in SCALING_D_KS]
    return _table(("d_k", "std q.k", "std q.k/sqrt(d_k)", "largest weight", "scaled"), [
        (s.d_k, f"{s.score_std:.2f}", f"{s.scaled_score_std:.2f}", f"{s.top_weight:.2f}", f"{s.scaled_top_weight:.2f}")
        for s in spreads
    ])


def multi_head() -> str:
    combined, separate = demo.heads_as_separate_projections()
    return (f"output {tuple(combined.shape)}; one d_model x d_model projection against h = 4 separate "
            f"d_model x d_k ones:\nlargest difference {(combined - separate).abs().max().item():.1e}")


def sublayer_connection() -> str:
    rows = []
    for start in demo.sublayer_starts():
        ratios, gradients = start.update_ratios, start.gradient_norms
        decoder = len(gradients) // 2
        rows.append((start.label, f"{sum(ratios) / len(ratios):.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}",
                     f"{gradients[decoder]:.2f} / {gradients[-1]:.2f}"))
    return _table(("6+6, d_model 64, at the start", "|Sublayer(x)|/|x| mean", "range",
                   "gradient decoder 1 / 6"), rows)


def layer_norm_batch_norm() -> str:
    result = demo.layer_norm_against_batch_norm()
    rows = []
    for name in list(result.layer_norm)[1:]:
        rows.append((f"A {name}" if name != "more padding" else "A beside B, more padding",
                     *(f"{(normalised[name] - normalised['alone']).abs().max().item():.2f}"
                       for normalised in (result.layer_norm, result.batch_norm))))
    return _table(("largest change of A's normalised values", "LayerNorm", "BatchNorm"), rows)


def feed_forward() -> str:
    outputs = demo.feed_forward_three_ways()
    return "\n".join(f"{name:<12} largest difference from the whole sequence: "
                     f"{(output - outputs['sequence']).abs().max().item():.1e}"
                     for name, output in outputs.items() if name != "sequence")


def decoder_layer() -> str:
    layer = AnnotatedTransformerDecoderLayer(AnnotatedTransformerConfig.from_preset("base", vocab_size=100), 0)
    counts = [(name, sum(p.numel() for p in child.parameters())) for name, child in layer.named_children()]
    counts.append(("total", sum(count for _, count in counts)))
    return f"{layer}\n\n" + _table(("parameters", ""), [(name, f"{count:,}") for name, count in counts])


def weight_tying() -> str:
    shared = demo.shared_matrices(demo.small_model())
    counts = demo.tied_and_untied_parameters()
    lines = [f"{name} is the source embedding's matrix: {same}" for name, same in shared.items()]
    lines.append(f"base, 37,000 tokens: {counts['tied']:,} parameters tied, {counts['untied']:,} untied")
    return "\n".join(lines)


def token_budget() -> str:
    source, target = demo.example_lengths()
    rows = []
    for budget in PADDING_BUDGETS:
        c = demo.padding_comparison(budget, source, target)
        rows.append((budget, c.batches, f"{c.pairs_per_batch:.0f}", f"{100 * c.budget_padding:.1f}%",
                     f"{100 * c.random_padding:.1f}%"))
    return _table(("max_tokens", "batches", "pairs/batch", "padding, budget", "random"), rows)


def noam() -> str:
    rows = []
    for d_model, warmup_steps in demo.NOAM_SETTINGS:
        curve = demo.noam_curve(d_model, warmup_steps)
        rows.append((f"d_model {d_model}, warmup {warmup_steps}", int(curve.argmax()) + 1, f"{curve.max():.3e}",
                     f"{(d_model * warmup_steps) ** -0.5:.3e}"))
    return _table(("", "peak at step", "peak rate", "(d_model warmup)^-0.5"), rows)


def label_smoothing() -> str:
    targets = demo.smoothed_targets(SMOOTHING_GOLD, SMOOTHING_VOCAB, SMOOTHING_EPSILON)
    header = ("gold", *(f"q({i})" for i in range(SMOOTHING_VOCAB)), "sum")
    rows = [(gold, *(f"{round(q, 4) + 0.0:.4f}" for q in row.tolist()), f"{row.sum().item():.4f}")
            for gold, row in zip(SMOOTHING_GOLD, targets)]
    return (f"epsilon {SMOOTHING_EPSILON}, V {SMOOTHING_VOCAB}, <pad> = 0; "
            f"epsilon / (V - 2) = {SMOOTHING_EPSILON / (SMOOTHING_VOCAB - 2):.4f}\n" + _table(header, rows))


OUTPUTS: dict[str, Callable[[], str]] = {  # in the page's order
    "relative_positions": relative_positions,
    "embeddings": embeddings,
    "masks": masks,
    "attention_scaling": attention_scaling,
    "multi_head": multi_head,
    "sublayer_connection": sublayer_connection,
    "layer_norm_batch_norm": layer_norm_batch_norm,
    "feed_forward": feed_forward,
    "decoder_layer": decoder_layer,
    "weight_tying": weight_tying,
    "token_budget": token_budget,
    "noam": noam,
    "label_smoothing": label_smoothing,
}


def printout(name: str) -> str:
    """The text of the output `name`, ending in a newline (ValueError for an unknown name)."""
    if name not in OUTPUTS:
        raise ValueError(f"unknown output {name!r}: choose from {', '.join(OUTPUTS)}")
    with torch.random.fork_rng():
        return OUTPUTS[name]().rstrip("\n") + "\n"


__all__ = ["OUTPUTS", "printout"]
