"""The small computations of docs/annotated.md, each made with the package's own functions and modules.

One function per claim of the walk, in the order of the paper's Figure 1: the positional encoding's rotations
(§3.5), the embeddings' scale (§3.4), the masks the attention receives (§3.1, §3.2.3), why scores are divided by
sqrt(d_k) (§3.2.1), one projection as h heads (§3.2.2), the sublayer connection and its normalisation (§3.1, §5.4),
the feed-forward network as two convolutions (§3.3), what self-attention costs (§4), initialisation, weight tying
and the shared BPE vocabulary (§3.4, §5.1), token-budget batches (§5.1), the Noam schedule (§5.3), label smoothing
(§5.4), decoding with and without the cache, and the copy task's attention. The page's cells (and the notebook made
from them) print them, `figures` draws them, and tests/test_annotated.py asserts each claim the page makes from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..data.batching import TokenBudgetBatchSampler, padding_stats
from ..inference.parameters import count_parameters
from ..loss import label_smoothed_loss
from ..modeling_annotated_transformer import (
    AnnotatedTransformerAttention,
    AnnotatedTransformerForConditionalGeneration,
    SublayerConnection,
    eager_attention_forward,
    sinusoidal_positional_encoding,
)
from ..tokenization import train_translation_tokenizers
from ..training.copy_task import copy_batch
from .copy_task import greedy_accuracy, train_with_seq2seq_trainer
from ..training.schedule import noam_learning_rate
from .greedy import greedy_decode


def small_model(seed: int = 0, **overrides) -> AnnotatedTransformerForConditionalGeneration:
    """A small untrained model in eval mode (d_model 32, 2+2 layers, 4 heads, 40 tokens), initialised as any model
    of the package is (`init_scheme` "deepnet" unless overridden)."""
    torch.manual_seed(seed)
    settings = dict(vocab_size=40, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    return AnnotatedTransformerForConditionalGeneration(AnnotatedTransformerConfig(**{**settings, **overrides})).eval()


# ----------------------------------------------------------------------------------------------------------------------
# §3.4 Embeddings, §3.5 positional encoding
# ----------------------------------------------------------------------------------------------------------------------


def relative_position_rotation(d_model: int, offset: int) -> torch.Tensor:
    """M_k (d_model x d_model, float64) with PE(pos + k) = M_k PE(pos) for every pos: block-diagonal, one 2x2 rotation
    per frequency w_i = 10000^(-2i/d_model), [[cos kw_i, sin kw_i], [-sin kw_i, cos kw_i]], acting on the pair
    (PE(pos, 2i), PE(pos, 2i+1)) = (sin pos w_i, cos pos w_i). It depends on k, not on pos (§3.5)."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for sine/cosine pairs, got {d_model}")
    angles = offset * torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    rotation[even, even] = torch.cos(angles)
    rotation[even, even + 1] = torch.sin(angles)
    rotation[even + 1, even] = -torch.sin(angles)
    rotation[even + 1, even + 1] = torch.cos(angles)
    return rotation


def rotation_error(num_positions: int, d_model: int, offset: int) -> float:
    """max over pos < num_positions of |M_k PE(pos) - PE(pos + k)|, PE the model's own table (float32)."""
    table = sinusoidal_positional_encoding(num_positions + offset, d_model).double()
    rotated = table[:num_positions] @ relative_position_rotation(d_model, offset).T
    return (rotated - table[offset:]).abs().max().item()


@dataclass
class EmbeddingScale:
    d_model: int
    embedding_std: float  # of the embedding matrix as initialised
    scaled_std: float  # of the same rows times sqrt(d_model), as the model adds them
    positional_rms: float  # root mean square of the positional encodings


def embedding_scale(d_model: int = 512, vocab_size: int = 1000, seed: int = 0) -> EmbeddingScale:
    """How large token embeddings and positional encodings are where the model adds them (§3.4, §3.5)."""
    model = small_model(seed, d_model=d_model, vocab_size=vocab_size, encoder_layers=1, decoder_layers=1,
                        encoder_ffn_dim=8, decoder_ffn_dim=8)
    embeddings = model.model.encoder.embeddings
    weight = embeddings.embed_tokens.weight.detach()
    return EmbeddingScale(
        d_model, weight.std().item(), (weight * embeddings.embed_scale).std().item(),
        embeddings.embed_positions.encoding.pow(2).mean().sqrt().item(),
    )


# ----------------------------------------------------------------------------------------------------------------------
# §3.1, §3.2.3 masks
# ----------------------------------------------------------------------------------------------------------------------


def mask_example() -> dict[str, torch.Tensor]:
    """A padded batch of two pairs: sources of 5 and 3 tokens (the second padded with <pad> 0), decoder inputs of 4
    and 3 tokens (<s> first; the second padded)."""
    input_ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    decoder_input_ids = torch.tensor([[1, 5, 6, 7], [1, 9, 10, 0]])
    return dict(input_ids=input_ids, attention_mask=input_ids.ne(0).long(), decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_input_ids.ne(0).long())


ATTENTIONS = {  # kind -> the first layer's attention module of that kind
    "encoder": lambda model: model.model.encoder.layers[0].self_attn,
    "decoder": lambda model: model.model.decoder.layers[0].self_attn,
    "cross": lambda model: model.model.decoder.layers[0].encoder_attn,
}


@torch.no_grad()
def attention_masks(model, **inputs) -> dict[str, torch.Tensor | None]:
    """The `attention_mask` argument each kind of attention (encoder self-attention, decoder self-attention,
    encoder-decoder attention) receives in the first layer during `model(**inputs)`, caught by forward hooks: for
    the eager implementation an additive float mask (0 or the dtype's minimum), for SDPA a boolean one (True: may
    attend); shape (batch, 1, queries, keys)."""
    received, hooks = {}, []
    for kind, attention_of in ATTENTIONS.items():
        def keep(module, args, kwargs, output, kind=kind):
            received[kind] = kwargs.get("attention_mask")
        hooks.append(attention_of(model).register_forward_hook(keep, with_kwargs=True))
    try:
        model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return received


def masks_as_received(implementation: str, seed: int = 0) -> dict[str, torch.Tensor | None]:
    """`attention_masks` of `mask_example()` in a small model with the attention `implementation` ("eager", "sdpa")."""
    model = small_model(seed)
    model.set_attn_implementation(implementation)
    return attention_masks(model, **mask_example())


# ----------------------------------------------------------------------------------------------------------------------
# §3.2.1 scaled dot-product attention, §3.2.2 multi-head attention
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class DotProductSpread:
    d_k: int
    score_std: float  # of q . k, q and k with independent N(0, 1) components
    scaled_score_std: float  # of q . k / sqrt(d_k)
    top_weight: float  # mean largest softmax weight over the keys, unscaled scores
    scaled_top_weight: float  # the same with the scaling the model uses


@torch.no_grad()
def dot_product_spread(d_k: int, num_keys: int = 16, samples: int = 2000, seed: int = 0) -> DotProductSpread:
    """Scores and attention weights of random queries and keys through the model's `eager_attention_forward`, with
    scaling 1 and with 1/sqrt(d_k) (§3.2.1 and its footnote: q . k has mean 0 and variance d_k)."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(samples, 1, 1, d_k, generator=generator)
    key = torch.randn(samples, 1, num_keys, d_k, generator=generator)
    value = torch.zeros(samples, 1, num_keys, 1)
    scores = (query @ key.transpose(2, 3)).flatten()
    module = nn.Identity().eval()  # the attention function reads only `training`, for dropout
    weights = eager_attention_forward(module, query, key, value, None, scaling=1.0)[1]
    scaled_weights = eager_attention_forward(module, query, key, value, None, scaling=d_k**-0.5)[1]
    return DotProductSpread(
        d_k, scores.std().item(), (scores * d_k**-0.5).std().item(),
        weights.amax(-1).mean().item(), scaled_weights.amax(-1).mean().item(),
    )


@torch.no_grad()
def heads_as_separate_projections(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(the model's multi-head attention output, the same from h separate d_model x d_k projections) for a random
    input to an encoder self-attention module: head i's W_i^Q is rows i*d_k ... (i+1)*d_k - 1 of q_proj's one
    d_model x d_model matrix (likewise K and V), and W^O is out_proj (§3.2.2)."""
    model = small_model(seed)
    model.set_attn_implementation("eager")
    attention: AnnotatedTransformerAttention = model.model.encoder.layers[0].self_attn
    hidden_states = torch.randn(2, 5, attention.config.d_model, generator=torch.Generator().manual_seed(seed))
    combined = attention(hidden_states)[0]
    d_k, heads = attention.head_dim, []
    for head in range(attention.num_heads):
        rows = slice(head * d_k, (head + 1) * d_k)
        query, key, value = (F.linear(hidden_states, projection.weight[rows], projection.bias[rows])
                             for projection in (attention.q_proj, attention.k_proj, attention.v_proj))
        weights = torch.softmax(query @ key.transpose(1, 2) / math.sqrt(d_k), dim=-1)
        heads.append(weights @ value)  # head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    separate = attention.out_proj(torch.cat(heads, dim=-1))  # Concat(head_1, ..., head_h) W^O
    return combined, separate


# ----------------------------------------------------------------------------------------------------------------------
# §4 why self-attention
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class AttentionCost:
    length: int  # n, the positions of the sequence
    d_model: int
    projections: int  # FLOPs of the four d_model x d_model projections (Q, K, V, output): 4 * 2 n d_model^2
    attention: int  # FLOPs between positions (Q K^T, then the weights times V): 2 * 2 n^2 d_model


@torch.no_grad()
def self_attention_cost(length: int, d_model: int = 512, heads: int = 8) -> AttentionCost:
    """The floating-point operations of one call of the model's multi-head self-attention (eager) on `length`
    positions, as torch's `FlopCounterMode` counts them (a multiply-add is 2): the batched products between
    positions apart from the projections."""
    model = small_model(d_model=d_model, encoder_attention_heads=heads, decoder_attention_heads=heads,
                        encoder_layers=1, decoder_layers=1, max_position_embeddings=max(64, length))
    model.set_attn_implementation("eager")
    attention = model.model.encoder.layers[0].self_attn
    counter = FlopCounterMode(display=False)
    with counter:
        attention(torch.zeros(1, length, d_model))
    counts = counter.get_flop_counts()["Global"]
    between_positions = sum(count for op, count in counts.items() if "bmm" in str(op))
    return AttentionCost(length, d_model, counter.get_total_flops() - between_positions, between_positions)


@torch.enable_grad()
def positions_read(length: int = 32, seed: int = 0) -> dict[str, int]:
    """How many input positions the output at position 0 depends on after one layer (a non-zero gradient): the
    model's self-attention (a small model's first encoder layer's) and a convolution of kernel width 3, the
    paper's path-length comparison (§4, Table 1)."""
    model = small_model(seed)
    d_model = model.config.d_model
    convolution = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1)
    inputs = torch.randn(1, length, d_model, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    layers = {"self-attention": lambda x: model.model.encoder.layers[0].self_attn(x)[0],
              "a convolution of width 3": lambda x: convolution(x.transpose(1, 2)).transpose(1, 2)}
    read = {}
    for name, layer in layers.items():
        gradient = torch.autograd.grad(layer(inputs)[0, 0].sum(), inputs)[0][0]  # (length, d_model)
        read[name] = int((gradient.abs().sum(-1) > 0).sum())
    return read


# ----------------------------------------------------------------------------------------------------------------------
# §3.1, §5.4 the sublayer connection: norm placement, LayerNorm against BatchNorm, initialisation
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SublayerStart:
    """How a freshly initialised 6+6 model's sublayers start: per sublayer connection (encoder layers, then decoder
    layers), the mean of |Sublayer(x)| / |x| over the tokens; per layer, the gradient norm of its parameters."""

    label: str
    sublayers: list[str]
    update_ratios: list[float]
    layers: list[str]
    gradient_norms: list[float]


SUBLAYER_SETTINGS = (  # (label, init_scheme, norm_first)
    ("post-norm, Xavier-uniform", "xavier_uniform", False),
    ("post-norm, DeepNet (default)", "deepnet", False),
    ("pre-norm, Xavier-uniform", "xavier_uniform", True),
)


def sublayer_start(init_scheme: str, norm_first: bool, label: str = "", d_model: int = 64, layers: int = 6,
                   seed: int = 0) -> SublayerStart:
    """One label-smoothed training step's forward and backward through a fresh model (no update), recording each
    `SublayerConnection`'s |Sublayer(x)| / |x| (a forward pre-hook wraps the sublayer it is given) and each layer's
    gradient norm."""
    model = small_model(seed, vocab_size=500, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                        encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, dropout=0.0, label_smoothing=0.1,
                        init_scheme=init_scheme, norm_first=norm_first)
    names, ratios, hooks = [], [], []
    for name, module in model.named_modules():
        if isinstance(module, SublayerConnection):
            def wrap(module, args, name=name):
                hidden_states, sublayer = args

                def measured(x):
                    output = sublayer(x)
                    ratios.append((output.norm(dim=-1) / hidden_states.norm(dim=-1)).mean().item())
                    names.append(name.removeprefix("model."))
                    return output
                return hidden_states, measured
            hooks.append(module.register_forward_pre_hook(wrap))
    generator = torch.Generator().manual_seed(seed)
    input_ids, labels = (torch.randint(4, 500, (8, 16), generator=generator) for _ in range(2))
    model.train()
    model(input_ids=input_ids, labels=labels).loss.backward()
    for hook in hooks:
        hook.remove()
    stacks = (("encoder", model.model.encoder.layers), ("decoder", model.model.decoder.layers))
    layer_names = [f"{stack} {index + 1}" for stack, stack_layers in stacks for index in range(len(stack_layers))]
    gradients = [math.sqrt(sum(p.grad.pow(2).sum().item() for p in layer.parameters()))
                 for _, stack_layers in stacks for layer in stack_layers]
    return SublayerStart(label, names, ratios, layer_names, gradients)


def sublayer_starts(**kwargs) -> list[SublayerStart]:
    """`sublayer_start` for each of `SUBLAYER_SETTINGS`."""
    return [sublayer_start(scheme, norm_first, label, **kwargs) for label, scheme, norm_first in SUBLAYER_SETTINGS]


INIT_MATRICES = {  # what the page shows -> the parameter it is (first layer of each stack)
    "embeddings": "model.shared.weight",
    "encoder q_proj": "model.encoder.layers.0.self_attn.q_proj.weight",
    "encoder v_proj": "model.encoder.layers.0.self_attn.v_proj.weight",
    "encoder fc1": "model.encoder.layers.0.feed_forward.fc1.weight",
    "decoder v_proj": "model.decoder.layers.0.self_attn.v_proj.weight",
    "decoder fc2": "model.decoder.layers.0.feed_forward.fc2.weight",
}


def initial_stds(init_scheme: str, preset: str = "base", vocab_size: int = 8000, seed: int = 0) -> dict[str, float]:
    """The standard deviation of each of `INIT_MATRICES` in a fresh model of `preset` under `init_scheme`."""
    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset(preset, vocab_size=vocab_size, init_scheme=init_scheme)
    parameters = dict(AnnotatedTransformerForConditionalGeneration(config).named_parameters())
    return {label: parameters[name].std().item() for label, name in INIT_MATRICES.items()}


@dataclass
class NormalisedBatches:
    """A sentence A of 4 tokens embedded alone, beside a sentence B of 7 tokens (A padded to 7), and beside B with
    both padded to 12; A's normalised tokens under LayerNorm and BatchNorm in each case."""

    hidden_states: torch.Tensor  # the embedded batch A + B padded to 12: (2, 12, d_model)
    attention_mask: torch.Tensor  # its mask
    layer_norm: dict[str, torch.Tensor]  # "alone", "beside B", "more padding" -> A's 4 normalised tokens
    batch_norm: dict[str, torch.Tensor]


@torch.no_grad()
def layer_norm_against_batch_norm(seed: int = 0) -> NormalisedBatches:
    """LayerNorm (the model's first `SublayerConnection`'s) normalises each token over its d_model features;
    BatchNorm (`nn.BatchNorm1d` with batch statistics, as in training) normalises each feature over every token of
    the batch, padding included. Inputs: the model's embeddings of the batches."""
    model = small_model(seed)
    embeddings = model.model.encoder.embeddings
    layer_norm = model.model.encoder.layers[0].self_attn_sublayer.layer_norm
    batch_norm = nn.BatchNorm1d(model.config.d_model, affine=False).train()
    generator = torch.Generator().manual_seed(seed)
    sentence_a = torch.randint(4, 40, (4,), generator=generator)
    sentence_b = torch.randint(4, 40, (7,), generator=generator)

    def batch(*sentences, length):
        input_ids = torch.zeros(len(sentences), length, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            input_ids[row, : len(sentence)] = sentence
        attention_mask = input_ids.ne(0).long()
        return embeddings(input_ids, attention_mask=attention_mask), attention_mask

    batches = {"alone": batch(sentence_a, length=4), "beside B": batch(sentence_a, sentence_b, length=7),
               "more padding": batch(sentence_a, sentence_b, length=12)}
    normalised_ln, normalised_bn = {}, {}
    for name, (hidden_states, _) in batches.items():
        normalised_ln[name] = layer_norm(hidden_states)[0, :4]
        flat = batch_norm(hidden_states.reshape(-1, hidden_states.shape[-1]))  # every token, padding included
        normalised_bn[name] = flat.reshape(hidden_states.shape)[0, :4]
    return NormalisedBatches(*batches["more padding"], normalised_ln, normalised_bn)


# ----------------------------------------------------------------------------------------------------------------------
# §3.3 position-wise feed-forward network, §3.1 the stacks, §3.4 weight tying
# ----------------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def feed_forward_three_ways(seed: int = 0) -> dict[str, torch.Tensor]:
    """The model's `PositionwiseFeedForward` on a random (2, 6, d_model) input: on the whole sequence, position by
    position, and as two convolutions with kernel size 1 carrying the same weights (§3.3)."""
    feed_forward = small_model(seed).model.encoder.layers[0].feed_forward
    hidden_states = torch.randn(2, 6, feed_forward.fc1.in_features, generator=torch.Generator().manual_seed(seed))
    by_position = torch.stack([feed_forward(hidden_states[:, i]) for i in range(hidden_states.shape[1])], dim=1)
    channels = hidden_states.transpose(1, 2)  # Conv1d reads (batch, channels = d_model, positions)
    inner = F.conv1d(channels, feed_forward.fc1.weight[:, :, None], feed_forward.fc1.bias)
    convolved = F.conv1d(torch.relu(inner), feed_forward.fc2.weight[:, :, None], feed_forward.fc2.bias)
    return {"sequence": feed_forward(hidden_states), "by position": by_position,
            "convolutions": convolved.transpose(1, 2)}


def shared_matrices(model) -> dict[str, bool]:
    """Whether the target embedding and the pre-softmax projection are the very tensor of the source embedding."""
    source = model.model.encoder.embeddings.embed_tokens.weight
    return {"target embedding": model.model.decoder.embeddings.embed_tokens.weight is source,
            "pre-softmax projection": model.lm_head.weight is source}


def tied_and_untied_parameters(preset: str = "base", vocab_size: int = 37000) -> dict[str, int]:
    """Trainable parameters of a preset with one shared matrix (§3.4) and with three."""
    return {tied: count_parameters(AnnotatedTransformerConfig.from_preset(
        preset, vocab_size=vocab_size, tie_word_embeddings=tied == "tied")) for tied in ("tied", "untied")}


EXAMPLE_PAIRS = (  # German-English pairs in the style of Multi30k's image captions, written for the walk
    ("Ein Hund läuft über die Wiese.", "A dog runs across the meadow."),
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Ein Mann fährt Fahrrad auf der Straße.", "A man rides a bicycle on the street."),
    ("Eine Frau liest ein Buch im Park.", "A woman reads a book in the park."),
    ("Kinder spielen Fußball auf dem Rasen.", "Children play soccer on the grass."),
    ("Ein Junge springt in den See.", "A boy jumps into the lake."),
    ("Zwei Männer sitzen auf einer Bank.", "Two men sit on a bench."),
    ("Ein Mädchen trägt einen roten Hut.", "A girl wears a red hat."),
    ("Eine Gruppe von Menschen steht vor einem Gebäude.", "A group of people stands in front of a building."),
    ("Ein Hund fängt einen Ball im Park.", "A dog catches a ball in the park."),
    ("Ein Mann spielt Gitarre auf der Straße.", "A man plays guitar on the street."),
    ("Drei Kinder laufen am Strand.", "Three children run on the beach."),
)


def joint_tokenizer(vocab_size: int = 400):
    """A byte-level BPE tokenizer trained on both sides of `EXAMPLE_PAIRS` together (`train_translation_tokenizers`,
    joint): one vocabulary for both languages, the one that tied embeddings need (§3.4, §5.1)."""
    sources, targets = zip(*EXAMPLE_PAIRS)
    return train_translation_tokenizers(list(sources), list(targets), vocab_size=vocab_size, min_frequency=2)


# ----------------------------------------------------------------------------------------------------------------------
# §5.1 token-budget batches, §5.3 the Noam schedule, §5.4 label smoothing
# ----------------------------------------------------------------------------------------------------------------------

NOAM_SETTINGS = ((512, 4000), (512, 8000), (256, 4000))  # (d_model, warmup_steps), as The Annotated Transformer draws


def noam_curve(d_model: int, warmup_steps: int, steps: int = 20000) -> np.ndarray:
    """`noam_learning_rate` (§5.3, factor 1) at steps 1 ... steps."""
    return np.array([noam_learning_rate(step, d_model, warmup_steps) for step in range(1, steps + 1)])


def example_lengths(num_pairs: int = 29000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) token lengths shaped like Multi30k's with an 8,000-token BPE (`</s>` counted): source about
    Normal(16, 6), target about 0.95 of it, within [3, 64]; no download needed."""
    rng = np.random.default_rng(seed)
    source = np.clip(np.rint(rng.normal(16, 6, num_pairs)), 3, 64).astype(np.int64)
    target = np.clip(np.rint(source * rng.normal(0.95, 0.12, num_pairs)), 3, 64).astype(np.int64)
    return source, target


@dataclass
class PaddingComparison:
    max_tokens: int
    batches: int
    pairs_per_batch: float
    budget_padding: float  # padding fraction of token-budget batches
    random_padding: float  # of as many random batches of the same mean size
    batch_sizes: list[int]  # per token-budget batch: pairs
    longest_sources: list[int]  # and longest source


def padding_comparison(max_tokens: int, source: Sequence[int], target: Sequence[int], seed: int = 0
                       ) -> PaddingComparison:
    """`padding_stats` of `TokenBudgetBatchSampler`'s batches against random batches of the same mean size."""
    sampler = TokenBudgetBatchSampler(source, target, max_tokens, seed=seed)
    budget = padding_stats(sampler.batches, source, target)
    size = round(budget["pairs"] / budget["batches"])
    order = np.random.default_rng(seed).permutation(len(source))
    random = padding_stats([order[start : start + size] for start in range(0, len(order), size)], source, target)
    return PaddingComparison(max_tokens, budget["batches"], budget["pairs"] / budget["batches"],
                             budget["padding_fraction"], random["padding_fraction"],
                             [len(batch) for batch in sampler.batches],
                             [int(np.max(np.asarray(source)[batch])) for batch in sampler.batches])


def smoothed_targets(gold_ids: Sequence[int], vocab_size: int, epsilon: float, pad_token_id: int = 0) -> torch.Tensor:
    """The target distribution q of the model's loss, one row per gold token, read back from the loss itself: its
    gradient with respect to the logits is softmax(logits) - q (`LabelSmoothedCrossEntropy`), so with all logits
    0 (softmax uniform) q = 1/V - gradient."""
    logits = torch.zeros(len(gold_ids), vocab_size, dtype=torch.float64, requires_grad=True)
    loss_sum, _ = label_smoothed_loss(logits, torch.tensor(list(gold_ids)), epsilon, pad_token_id)
    loss_sum.backward()
    return (1 / vocab_size - logits.grad).detach()


def loss_against_confidence(confidences: Sequence[float], epsilon: float, vocab_size: int = 8, gold_id: int = 3,
                            pad_token_id: int = 0) -> np.ndarray:
    """The model's loss for a prediction that puts `confidence` on the gold token and spreads the rest evenly over
    the other tokens but padding (which gets ~0), for each confidence (The Annotated Transformer's picture of
    label smoothing penalising over-confidence)."""
    losses = []
    for confidence in confidences:
        probabilities = torch.full((1, vocab_size), (1 - confidence) / (vocab_size - 2), dtype=torch.float64)
        probabilities[0, gold_id], probabilities[0, pad_token_id] = confidence, 1e-30
        loss_sum, count = label_smoothed_loss(probabilities.log(), torch.tensor([gold_id]), epsilon, pad_token_id)
        losses.append((loss_sum / count).item())
    return np.array(losses)


# ----------------------------------------------------------------------------------------------------------------------
# The copy task
# ----------------------------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------------------------
# Decoding: what the cache saves
# ----------------------------------------------------------------------------------------------------------------------

PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj"}


@contextmanager
def projection_counter(model) -> Iterator[dict[str, int]]:
    """Within the block, count the token rows that the decoder's query, key and value projections compute, summed
    over its layers: {"self-attention q": rows, ..., "encoder-decoder v": rows} (forward pre-hooks)."""
    counts, hooks = {}, []
    for layer in model.model.decoder.layers:
        for kind, attention in (("self-attention", layer.self_attn), ("encoder-decoder", layer.encoder_attn)):
            for letter, name in PROJECTIONS.items():
                key = f"{kind} {letter}"
                counts.setdefault(key, 0)

                def count(module, args, key=key):
                    counts[key] += args[0].shape[:-1].numel()
                hooks.append(getattr(attention, name).register_forward_pre_hook(count))
    try:
        yield counts
    finally:
        for hook in hooks:
            hook.remove()


# ----------------------------------------------------------------------------------------------------------------------
# The copy task
# ----------------------------------------------------------------------------------------------------------------------

ATTENTION_OUTPUTS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


@torch.no_grad()
def attention_weights(model, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor
                      ) -> dict[str, tuple[torch.Tensor, ...]]:
    """Every layer's attention weights of the first pair, per kind ("encoder", "decoder", "cross"): one (heads,
    queries, keys) tensor per layer. Only eager attention forms the weights as a tensor (SDPA computes the output
    in one fused call, and `output_attentions=True` then returns no weights), so the model must run eagerly."""
    if model.config._attn_implementation != "eager":
        raise ValueError(f"attention implementation {model.config._attn_implementation!r} returns no attention "
                         "weights: call model.set_attn_implementation('eager') first")
    outputs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_attentions=True)
    return {kind: tuple(layer[0] for layer in getattr(outputs, name)) for kind, name in ATTENTION_OUTPUTS.items()}


@dataclass
class CopyAttention:
    accuracy: float  # token accuracy of greedy decoding on 200 held-out sequences (`greedy_accuracy`)
    source: list[int]
    decoder_input: list[int]  # <s>, then the greedy output without </s>
    attentions: dict[str, tuple[torch.Tensor, ...]]  # `attention_weights`: kind -> per layer (heads, queries, keys)

    @property
    def cross_attention(self) -> torch.Tensor:
        """The last decoder layer's encoder-decoder attention: (heads, queries, keys)."""
        return self.attentions["cross"][-1]


def copy_example(model, length: int = 10, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """(a new random sequence of the copy task, (1, length + 1); the decoder input that reads it: <s>, then the
    model's greedy output without its </s>)."""
    source, _ = copy_batch(1, length, model.config.vocab_size, model.config.eos_token_id,
                           torch.Generator().manual_seed(seed))
    generated = greedy_decode(model, source, torch.ones_like(source), max_new_tokens=length + 1)[0].tolist()
    decoder_input = generated[:-1] if generated[-1] == model.config.eos_token_id else generated
    return source, torch.tensor([decoder_input])


def copy_task_attention(steps: int = 350, length: int = 10, seed: int = 0) -> CopyAttention:
    """Train the copy task's tiny model as the walk does (`train_with_seq2seq_trainer`: Adam, the Noam schedule,
    label smoothing 0.1), decode a new random sequence greedily, and take every layer's attention weights of each kind
    (eagerly)."""
    model, _ = train_with_seq2seq_trainer(steps=steps, length=length, seed=seed)
    accuracy = greedy_accuracy(model, length, seed=seed + 1)
    source, decoder_input = copy_example(model, length, seed + 2)
    model.set_attn_implementation("eager")
    return CopyAttention(accuracy, source[0].tolist(), decoder_input[0].tolist(),
                         attention_weights(model, source, decoder_input))


__all__ = [
    "ATTENTIONS",
    "ATTENTION_OUTPUTS",
    "EXAMPLE_PAIRS",
    "INIT_MATRICES",
    "NOAM_SETTINGS",
    "SUBLAYER_SETTINGS",
    "attention_masks",
    "attention_weights",
    "copy_example",
    "copy_task_attention",
    "dot_product_spread",
    "embedding_scale",
    "example_lengths",
    "feed_forward_three_ways",
    "heads_as_separate_projections",
    "initial_stds",
    "joint_tokenizer",
    "layer_norm_against_batch_norm",
    "loss_against_confidence",
    "mask_example",
    "masks_as_received",
    "noam_curve",
    "padding_comparison",
    "positions_read",
    "projection_counter",
    "relative_position_rotation",
    "rotation_error",
    "self_attention_cost",
    "shared_matrices",
    "small_model",
    "smoothed_targets",
    "sublayer_start",
    "sublayer_starts",
    "tied_and_untied_parameters",
]
