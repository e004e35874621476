"""The walk's exercises, each checked against the package's own code: `check(name, answer)` prints whether the
learner's function is right and, when it is not, what is wrong, in one line; `problem(name, answer)` returns that
line (None when the answer is right), for tests. A check never raises: a notebook runs on past an unfinished
exercise.

    relative_position_rotation(d_model, k)          §3.5: M_k with PE(pos + k) = M_k PE(pos)
    causal_mask(size)                               §3.1: the decoder's (size, size) mask, True where i may see j
    attention(query, key, value, mask)              §3.2.1: masked scaled dot-product attention
    split_heads(x, h), merge_heads(x)               §3.2.2: (B, T, d_model) into h heads of d_k, and back
    SublayerConnection(d_model, dropout, norm_first)          §3.1, §5.4: residual, dropout and LayerNorm
    DecoderLayer(d_model, h, d_ff, dropout, norm_first)       §3.1: a decoder layer, against the package's
    noam_rate(step, d_model, warmup_steps)          §5.3: the learning rate at one step
    smoothed_target(gold_ids, vocab_size, epsilon)  §5.4: label smoothing's target distribution q
    greedy_step(model, memory, src_mask, tokens)    §3: the next token of each sentence, in the walk's model

The two classes are the walk's own (docs/annotated.md builds the model from scratch): their stubs give `__init__`
(the parts, named as the walk names them) and leave `forward` to write; a check builds them and loads the weights of
the package's modules into them, so that their output can be compared with the package's. `greedy_step` works on the
walk's model (`decode`, `generator`), which its check stands in for with a package model (`WalkInterface`).

After each exercise the walk calls `yours_or_reference(name, yours)`: the learner's answer where its check passes,
the reference solution (`solutions`) where it does not, with one printed line saying which, so that the model the
walk builds, trains and translates with is the learner's wherever the learner's code is right.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling_annotated_transformer import eager_attention_forward, sinusoidal_positional_encoding
from ..training.schedule import noam_learning_rate
from . import solutions
from .demonstrations import small_model, smoothed_targets


class Wrong(Exception):
    """What is wrong with an answer, in one line."""


def _tensor(value, call: str, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
    """`value` as the tensor `call` should return, or Wrong naming how it differs in type, shape or dtype."""
    if not isinstance(value, torch.Tensor):
        raise Wrong(f"{call} returned {type(value).__name__}, not a tensor: return a torch.Tensor of shape {shape}")
    if tuple(value.shape) != shape:
        raise Wrong(f"{call} has shape {tuple(value.shape)}, expected {shape}")
    if dtype is not None and value.dtype != dtype:
        raise Wrong(f"{call} has dtype {value.dtype}, expected {dtype}")
    return value


def _causal_mask(answer: Callable) -> None:
    for size in (4, 7, 1):  # size 1 last: its one entry cannot tell a swapped mask from a missing diagonal
        mask = _tensor(answer(size), f"causal_mask({size})", (size, size), torch.bool)
        allowed = torch.ones(size, size, dtype=torch.bool).tril()  # query i (row) may see keys j <= i (columns)
        if torch.equal(mask, allowed):
            continue
        if torch.equal(mask, allowed.T):
            raise Wrong("it is transposed: row i is query position i, which may attend to the columns j <= i")
        if torch.equal(mask, ~allowed):
            raise Wrong("True and False are swapped: True must mark what a position may attend to")
        i, j = (mask & ~allowed).nonzero()[0].tolist() if (mask & ~allowed).any() else (None, None)
        if i is not None:
            raise Wrong(f"causal_mask({size}) lets position {i} attend to position {j}, which comes after it")
        i, j = (allowed & ~mask).nonzero()[0].tolist()
        where = "itself" if i == j else f"position {j}, which comes before it"
        raise Wrong(f"causal_mask({size}) keeps position {i} from attending to {where}")


def _relative_position_rotation(answer: Callable) -> None:
    positions = 60
    for d_model, offset in ((16, 3), (8, 1), (32, 10)):
        call = f"relative_position_rotation({d_model}, {offset})"
        rotation = _tensor(answer(d_model, offset), call, (d_model, d_model)).double()
        table = sinusoidal_positional_encoding(positions + offset, d_model).double()
        rotated = table[:positions] @ rotation.T  # M_k PE(pos), for every pos at once (PE(pos) is a row here)
        error = (rotated - table[offset:]).abs()
        if error.max() < 1e-5:
            continue
        if ((table[:positions] @ rotation - table[offset:]).abs().max()) < 1e-5:
            raise Wrong(f"{call} is transposed: row 2i must give PE(pos + k, 2i) from PE(pos, 2i) and PE(pos, 2i+1)")
        dimension = int(error.amax(0).argmax())
        kind = "sin" if dimension % 2 == 0 else "cos"
        raise Wrong(f"{call} · PE(pos) misses PE(pos + {offset}) by up to {error.max():.2f}, worst in dimension "
                    f"{dimension} (the {kind} of frequency i = {dimension // 2}): check the angle k·w_i, "
                    f"w_i = 10000^(-2i/d_model), and the sign of each sine")


SMOOTHING_CASES = (([4, 6, 2], 8, 0.1), ([5, 1], 12, 0.4))  # (gold ids, V, epsilon) the check of smoothed_target tries


def _smoothed_target(answer: Callable) -> None:
    for gold, vocab_size, epsilon in SMOOTHING_CASES:
        call = f"smoothed_target({gold}, {vocab_size}, {epsilon})"
        target = _tensor(answer(gold, vocab_size, epsilon), call, (len(gold), vocab_size)).double()
        expected = smoothed_targets(gold, vocab_size, epsilon)  # read back from the package's loss
        if torch.allclose(target, expected, atol=1e-6):
            continue
        # <pad> first: filling every column with epsilon / (V - 2) and forgetting to zero <pad> is the usual slip
        if target[:, 0].abs().max() > 1e-6:
            raise Wrong(f"{call}: <pad> (id 0) gets {target[0, 0]:.4f}; zero its column: the model never predicts "
                        "padding")
        gold_values = target[range(len(gold)), gold]
        if not torch.allclose(gold_values, torch.full_like(gold_values, 1 - epsilon), atol=1e-6):
            raise Wrong(f"{call}: the gold token gets {gold_values[0]:.4f}, expected 1 - epsilon = {1 - epsilon:.4f}")
        others = torch.ones_like(target, dtype=torch.bool)
        others[range(len(gold)), gold], others[:, 0] = False, False
        if not torch.allclose(target[others], expected[others], atol=1e-6):
            value = target[others][(target[others] - expected[others]).abs().argmax()]
            raise Wrong(f"{call}: the other tokens should each get epsilon / (V - 2) = "
                        f"{epsilon / (vocab_size - 2):.4f} (all but the gold token and <pad> share epsilon); one gets "
                        f"{value:.4f}")
        raise Wrong(f"{call}: a row sums to {target.sum(-1).tolist()[0]:.4f}, not 1: q is a distribution")


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)


_SHAPES = ("scores are queries (..., T, d_k) times keys transposed (..., d_k, S), and the mask broadcasts to them "
           "(..., T, S)")


def _call(call: str, function: Callable, *args, shapes: str = _SHAPES):
    """`function(*args)`, with a shape error said as what it means (Wrong, ending in `shapes`); other errors pass
    on."""
    try:
        return function(*args)
    except NotImplementedError:  # a RuntimeError too: the stub, untouched
        raise
    except RuntimeError as error:
        text = (str(error).splitlines() or [""])[0]
        if "view size is not compatible" in text:
            raise Wrong(f"{call} raised RuntimeError: view() cannot read a transposed tensor: use .reshape(...) "
                        "(or .contiguous().view(...))") from None
        if re.search(r"cannot be multiplied|must match the size|size of tensor a|shape .* is invalid|expanded size|"
                     r"Expected size", text):
            raise Wrong(f"{call} raised RuntimeError ({text}): {shapes}") from None
        raise


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask (True: may attend) as the package's eager attention adds it to the scores."""
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


@torch.no_grad()
def _attention(answer: Callable) -> None:
    generator = torch.Generator().manual_seed(0)
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]  # (B, 1, 1, S)
    cases = (  # (queries (B, h, T, d_k), keys and values (B, h, S, d_k), mask), d_k 8
        (torch.randn(2, 3, 4, 8, generator=generator), torch.randn(2, 3, 5, 8, generator=generator),
         torch.randn(2, 3, 5, 8, generator=generator), padding, "a padding mask (B, 1, 1, S)"),
        (torch.randn(1, 2, 4, 8, generator=generator), torch.randn(1, 2, 4, 8, generator=generator),
         torch.randn(1, 2, 4, 8, generator=generator), torch.ones(4, 4, dtype=torch.bool).tril(),
         "a causal mask (T, T)"),
    )
    module = nn.Identity().eval()  # the package's function reads only `training`, for dropout
    for query, key, value, mask, what in cases:
        call = f"attention(query, key, value, mask) with {what}"
        result = _call(call, answer, query, key, value, mask)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise Wrong(f"{call} returned {type(result).__name__}: return (output, weights), the weighted sum of the "
                        "values and the softmax weights")
        (batch, heads, queries, d_k), keys = query.shape, key.shape[2]
        output = _tensor(result[0], f"{call}: output", (batch, heads, queries, d_k))
        weights = _tensor(result[1], f"{call}: weights", (batch, heads, queries, keys))

        def package(scaling, mask_added=_additive(mask)):
            return eager_attention_forward(module, query, key, value, mask_added, scaling=scaling)[1]

        expected = package(d_k**-0.5)
        if not _close(weights, expected):
            scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
            softmax_over_keys = (f"{call}: a query's weights over the keys must sum to 1: take the softmax over the "
                                 "last axis, the keys")
            if weights.isnan().any():  # every query here may attend to some key: only an inverted mask hides them all
                by_queries = scores.masked_fill(~mask, float("-inf")).softmax(-2)  # or a softmax over the queries
                if torch.equal(weights.isnan(), by_queries.isnan()) and _close(weights.nan_to_num(),
                                                                               by_queries.nan_to_num()):
                    raise Wrong(softmax_over_keys)
                raise Wrong(f"{call}: some weights are NaN, the softmax of a row whose keys are all masked: the mask's "
                            "sense is inverted? True marks the keys a query may attend to; fill where it is False")
            if not torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5):
                raise Wrong(softmax_over_keys)
            if _close(weights, package(1.0)):
                raise Wrong(f"{call}: the scores are not scaled: divide q·k by √d_k (√{d_k})")
            if _close(weights, package(1 / d_k)):
                raise Wrong(f"{call}: the scores are divided by d_k; divide them by √d_k")
            if _close(weights, package(d_k**-0.5, None)):
                raise Wrong(f"{call}: the mask is not applied: masked keys get weight; fill their scores with -inf "
                            "where the mask is False")
            if _close(weights, package(d_k**-0.5, _additive(~mask))):
                raise Wrong(f"{call}: the mask's sense is inverted: True marks the keys a query may attend to, so "
                            "fill the scores where the mask is False")
            if _close(weights, scores.masked_fill(~mask, 0.0).softmax(-1)):
                raise Wrong(f"{call}: masked scores set to 0 still get weight exp(0): fill them with -inf (or the "
                            "dtype's minimum)")
            raise Wrong(f"{call}: the weights differ from softmax(Q Kᵀ / √d_k) with the mask, by up to "
                        f"{(weights - expected).abs().max():.3f}")
        if not _close(output, weights @ value):
            raise Wrong(f"{call}: the weights are right but the output is not weights @ value")


def _split_heads(answer: Callable) -> None:
    for batch, length, h, d_k in ((2, 5, 3, 4), (1, 3, 4, 2)):
        x = torch.arange(batch * length * h * d_k, dtype=torch.float32).reshape(batch, length, h * d_k)
        call = f"split_heads(x of shape {tuple(x.shape)}, h={h})"
        heads = _call(call, answer, x, h)
        expected = x.view(batch, length, h, d_k).transpose(1, 2)
        if isinstance(heads, torch.Tensor) and tuple(heads.shape) == (batch, length, h, d_k):
            raise Wrong(f"{call} has shape (B, T, h, d_k) = {(batch, length, h, d_k)}: move the head axis before the "
                        "positions, (B, h, T, d_k) (transpose(1, 2))")
        heads = _tensor(heads, call, tuple(expected.shape))
        if torch.equal(heads, expected):
            continue
        if torch.equal(heads, x.reshape(batch, h, length, d_k)):
            raise Wrong(f"{call} reshapes straight to (B, h, T, d_k), which mixes positions into heads: view as "
                        "(B, T, h, d_k), each head taking d_k consecutive features, then transpose(1, 2)")
        if torch.equal(heads, x.view(batch, length, d_k, h).permute(0, 3, 1, 2)):
            raise Wrong(f"{call} gives each head every h-th feature: view as (B, T, h, d_k), not (B, T, d_k, h), so "
                        "that head i takes features i·d_k to (i+1)·d_k - 1")
        raise Wrong(f"{call}: head i at position t must hold x[:, t, i·d_k:(i+1)·d_k]")


def _merge_heads(answer: Callable) -> None:
    for batch, h, length, d_k in ((2, 3, 5, 4), (1, 4, 3, 2)):
        x = torch.arange(batch * h * length * d_k, dtype=torch.float32).reshape(batch, h, length, d_k)
        call = f"merge_heads(x of shape {tuple(x.shape)})"
        merged = _call(call, answer, x)
        expected = x.transpose(1, 2).reshape(batch, length, h * d_k)
        if isinstance(merged, torch.Tensor) and tuple(merged.shape) == (batch, h, length * d_k):
            raise Wrong(f"{call} has shape (B, h, T·d_k): concatenate the heads at each position, (B, T, h·d_k)")
        merged = _tensor(merged, call, tuple(expected.shape))
        if torch.equal(merged, expected):
            continue
        if torch.equal(merged, x.reshape(batch, length, h * d_k)):
            raise Wrong(f"{call} reshapes without moving the heads back: transpose (B, h, T, d_k) to (B, T, h, d_k) "
                        "first, then reshape")
        if torch.equal(merged, x.permute(0, 2, 3, 1).reshape(batch, length, h * d_k)):
            raise Wrong(f"{call} interleaves the heads' features: keep each head's d_k features together, "
                        "(B, T, h, d_k), then reshape")
        raise Wrong(f"{call}: position t must hold Concat(head_1[t], ..., head_h[t])")


def _load(module: nn.Module, state_dict: dict, what: str) -> None:
    """Load `state_dict` into the learner's `module`, or Wrong naming the parameters that are not the stub's."""
    own = set(module.state_dict())
    if own != set(state_dict):
        missing, extra = sorted(set(state_dict) - own), sorted(own - set(state_dict))
        found = f"it lacks {missing[0]}" if missing else f"it has {extra[0]}, which the stub has not"
        raise Wrong(f"its parameters are not those of the stub's __init__ ({found}): keep the stub's __init__ "
                    f"({what}) and write forward")
    module.load_state_dict(state_dict)


def _sublayer_connection(answer: Callable) -> None:
    d_model = 8
    generator = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(2, 3, d_model, generator=generator) + 1
    sublayer = nn.Linear(d_model, d_model)
    norm = nn.LayerNorm(d_model, eps=1e-6)
    with torch.no_grad():
        for parameter in (*sublayer.parameters(), *norm.parameters()):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5 + (parameter.dim() == 1))
    weights = {"norm.weight": norm.weight.detach(), "norm.bias": norm.bias.detach()}
    forms = {  # what a forward may compute -> what the check says of it (None: right for that placement)
        "post": lambda x, drop: norm(x + drop(sublayer(x))), "pre": lambda x, drop: x + drop(sublayer(norm(x))),
    }
    wrong = {
        "no norm": (lambda x, drop: x + drop(sublayer(x)), "there is no LayerNorm: post-norm normalises the sum, "
                    "pre-norm the sub-layer's input"),
        "no residual": (lambda x, drop: norm(drop(sublayer(x))), "the residual is missing: add x to the "
                        "sub-layer's output"),
        "no residual pre": (lambda x, drop: drop(sublayer(norm(x))), "the residual is missing: add x to the "
                            "sub-layer's output"),
        "norm twice": (lambda x, drop: norm(x + drop(sublayer(norm(x)))), "it normalises twice: pre-norm is "
                       "x + sublayer(norm(x)), with no LayerNorm after the sum"),
        "normalised residual": (lambda x, drop: norm(x) + drop(sublayer(norm(x))), "the residual must be x itself, "
                                "not norm(x): x + sublayer(norm(x))"),
    }
    for norm_first in (False, True):
        right, other = ("pre", "post") if norm_first else ("post", "pre")
        call = f"SublayerConnection({d_model}, dropout=0.0, norm_first={norm_first})"
        module = answer(d_model, 0.0, norm_first)
        _load(module, weights, "one LayerNorm, `norm`, and a Dropout")
        with torch.no_grad():
            output = _tensor(_call(call, module.eval(), x, sublayer), f"{call}(x, sublayer)", tuple(x.shape))
            if _close(output, forms[right](x, nn.Identity())):
                continue
            if _close(output, forms[other](x, nn.Identity())):
                placement = ("normalises the sum (post-norm); pre-norm normalises the sub-layer's input: "
                             "x + sublayer(norm(x))") if norm_first else (
                             "normalises the sub-layer's input (pre-norm); post-norm, the paper's, normalises the "
                             "sum: norm(x + sublayer(x))")
                raise Wrong(f"{call} {placement}")
            for form, says in wrong.values():
                if _close(output, form(x, nn.Identity())):
                    raise Wrong(f"{call}: {says}")
        raise Wrong(f"{call}: expected {'x + sublayer(norm(x))' if norm_first else 'norm(x + sublayer(x))'}")
    for norm_first in (False, True):  # dropout, in training: on the sub-layer's output, before the sum (§5.4)
        right = "pre" if norm_first else "post"
        call = f"SublayerConnection({d_model}, dropout=0.5, norm_first={norm_first}) in training"
        module = answer(d_model, 0.5, norm_first)
        _load(module, weights, "one LayerNorm, `norm`, and a Dropout")
        module.train()
        with torch.no_grad():
            torch.manual_seed(0)
            output = _call(call, module, x, sublayer)
            torch.manual_seed(0)
            expected = forms[right](x, lambda y: F.dropout(y, 0.5, training=True))
            if _close(output, expected):
                continue
            if _close(output, forms[right](x, nn.Identity())):
                raise Wrong(f"{call}: nothing is dropped: apply self.dropout to the sub-layer's output (§5.4)")
            raise Wrong(f"{call}: dropout must apply to the sub-layer's output, before it is added to x (§5.4), "
                        "not to the sum or to x")


_DECODER_LAYER_NAMES = (  # the package's decoder layer's parameters -> the names of the walk's DecoderLayer stub
    (r"self_attn_sublayer", "sublayer.0"), (r"encoder_attn_sublayer", "sublayer.1"),
    (r"feed_forward_sublayer", "sublayer.2"), (r"\blayer_norm\b", "norm"), (r"\bencoder_attn\b", "src_attn"),
    (r"\b(q|k|v)_proj\b", r"w_\1"), (r"\bout_proj\b", "w_o"), (r"\bfc(1|2)\b", r"w_\1"),
)


def _renamed(state_dict: dict, rules) -> dict:
    renamed = {}
    for name, tensor in state_dict.items():
        for pattern, replacement in rules:
            name = re.sub(pattern, replacement, name)
        renamed[name] = tensor
    return renamed


@torch.no_grad()
def _decoder_layer(answer: Callable) -> None:
    d_model, heads, d_ff = 32, 4, 64  # `small_model`'s
    generator = torch.Generator().manual_seed(0)
    x, memory = torch.randn(2, 4, d_model, generator=generator), torch.randn(2, 5, d_model, generator=generator)
    source_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]  # (B, 1, 1, S)
    target_mask = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T)
    for norm_first in (False, True):
        call = f"DecoderLayer({d_model}, {heads}, {d_ff}, 0.0, norm_first={norm_first})"
        package = small_model(seed=3, norm_first=norm_first, init_scheme="xavier_uniform").model.decoder.layers[0]
        for name, parameter in package.named_parameters():
            if "layer_norm" in name:  # not the ones and zeros LayerNorm starts with, so that each one matters
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3 + (name.endswith("weight")))
        ours = answer(d_model, heads, d_ff, 0.0, norm_first)
        _load(ours, _renamed(package.state_dict(), _DECODER_LAYER_NAMES),
              "self_attn, src_attn, feed_forward and three SublayerConnections in `sublayer`")
        ours.eval()
        expected = package(x, target_mask, memory, encoder_attention_mask=source_mask)
        shapes = ("are the masks swapped? self-attention takes target_mask (..., T, T), encoder-decoder attention "
                  "source_mask (..., 1, S)")
        output = _tensor(_call(f"{call}(x, memory, source_mask, target_mask)", ours, x, memory, source_mask,
                               target_mask, shapes=shapes), f"{call}(x, memory, source_mask, target_mask)",
                         tuple(x.shape))
        if _close(output, expected):
            continue
        sublayer, self_attn, src_attn, feed_forward = ours.sublayer, ours.self_attn, ours.src_attn, ours.feed_forward

        def layer(first_mask, cross_mask=source_mask, keys=memory, order=(0, 1), wrappers=(0, 1, 2)):
            """The layer as a mistake would compute it (keys None: the cross-attention reads its own input)."""
            steps = [lambda y: self_attn(y, y, y, first_mask),
                     lambda y: src_attn(y, y if keys is None else keys, y if keys is None else keys, cross_mask)]
            y = x
            for index, step in zip(wrappers[:2], (steps[order[0]], steps[order[1]])):
                y = sublayer[index](y, step) if index is not None else step(y)
            return sublayer[wrappers[2]](y, feed_forward) if wrappers[2] is not None else feed_forward(y)

        def same_as(*args, **kwargs):
            return _close(output, layer(*args, **kwargs))

        if same_as(None):
            raise Wrong(f"{call}: self-attention sees later positions: give it target_mask")
        if same_as(target_mask, None):
            raise Wrong(f"{call}: encoder-decoder attention attends to the source's padding: give it source_mask")
        if same_as(target_mask, target_mask, None) or same_as(target_mask, None, None):
            raise Wrong(f"{call}: encoder-decoder attention must take its keys and values from memory, the "
                        "encoder's output (queries from x)")
        if same_as(target_mask, order=(1, 0)):
            raise Wrong(f"{call}: the sub-layers are in the wrong order: masked self-attention, then "
                        "encoder-decoder attention, then the feed-forward network")
        if same_as(target_mask, wrappers=(None, None, None)):
            raise Wrong(f"{call}: the sub-layers are not wrapped: pass each through its SublayerConnection, "
                        "self.sublayer[i](x, ...), which adds the residual and normalises")
        if same_as(target_mask, wrappers=(0, 0, 0)):
            raise Wrong(f"{call}: every sub-layer goes through sublayer[0]: each has its own, sublayer[0], [1] "
                        "and [2] (their LayerNorms differ)")
        raise Wrong(f"{call}: differs from the package's decoder layer by up to {(output - expected).abs().max():.3f}: "
                    "self-attention (target_mask), encoder-decoder attention (memory, source_mask), the feed-forward "
                    "network, each in its SublayerConnection")


NOAM_CASES = ((1000, 512, 4000), (4000, 512, 4000), (16000, 512, 4000), (50, 256, 100))  # (step, d_model, warmup)


def _noam_rate(answer: Callable) -> None:
    for step, d_model, warmup_steps in NOAM_CASES:
        call = f"noam_rate({step}, {d_model}, {warmup_steps})"
        value = answer(step, d_model, warmup_steps)
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise Wrong(f"{call} returned {value!r}, not a number") from None
        expected = noam_learning_rate(step, d_model, warmup_steps)
        if math.isclose(value, expected, rel_tol=1e-6):
            continue
        warming_up = step < warmup_steps
        decay, linear = d_model**-0.5 * step**-0.5, d_model**-0.5 * step * warmup_steps**-1.5
        if math.isclose(value, decay if warming_up else linear, rel_tol=1e-6):
            term = "step · warmup_steps^-1.5" if warming_up else "step^-0.5"
            phase = "during the warm-up" if warming_up else "after the warm-up"
            raise Wrong(f"{call} = {value:.4e}: {phase} the smaller term, which the min keeps, is {term}")
        if math.isclose(value, expected * d_model**0.5, rel_tol=1e-6):
            raise Wrong(f"{call} = {value:.4e}: the factor d_model^-0.5 is missing")
        raise Wrong(f"{call} = {value:.4e}, expected {expected:.4e} = d_model^-0.5 · min(step^-0.5, "
                    "step · warmup_steps^-1.5)")


class WalkInterface:
    """A package model behind the walk's interface (its `EncoderDecoder`): `decode(memory, src_mask, tgt, tgt_mask)`
    runs the decoder stack over the embedded `tgt` with exactly the masks given (booleans, True where a query may
    attend; None: every key), `generator(x)` projects onto the vocabulary. The check of `greedy_step` calls it."""

    def __init__(self, model):
        self.model = model

    def decode(self, memory, src_mask, tgt, tgt_mask):
        decoder = self.model.model.decoder
        if tgt_mask is None:  # no mask: every key
            tgt_mask = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool)
        if src_mask is None:
            src_mask = torch.ones(1, memory.shape[1], dtype=torch.bool)
        x = decoder.embeddings(tgt)
        for layer in decoder.layers:  # the package's layers, given the masks themselves (they make none)
            x = layer(x, tgt_mask.reshape((1,) * (4 - tgt_mask.dim()) + tuple(tgt_mask.shape)), memory,
                      encoder_attention_mask=src_mask.reshape((1,) * (4 - src_mask.dim()) + tuple(src_mask.shape)))
        return x if decoder.layer_norm is None else decoder.layer_norm(x)

    def generator(self, x):
        return self.model.lm_head(x)


@torch.no_grad()
def _greedy_step(answer: Callable) -> None:
    # Untied and Xavier-initialised: an untrained model whose next token is neither its input's last token (as a
    # fresh tied model's tends to be) nor its first position's prediction, and where seeing the later tokens (no
    # causal mask) or the source's padding changes it.
    model = WalkInterface(small_model(seed=2, tie_word_embeddings=False, init_scheme="xavier_uniform"))
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0]])
    src_mask = input_ids.ne(0)[:, None, None, :]  # (B, 1, 1, S)
    memory = model.model.get_encoder()(input_ids=input_ids, attention_mask=input_ids.ne(0).long()).last_hidden_state
    # Large values where the second source is padded: attended to, they change its next token.
    memory[1, 3:] = 30 * torch.randn(3, memory.shape[-1], generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[1, 17, 16, 12], [1, 39, 23, 30]])
    causal = torch.ones(4, 4, dtype=torch.bool).tril()

    def logits(source_mask=src_mask, target_mask=causal):
        return model.generator(model.decode(memory, source_mask, tokens, target_mask))

    expected = logits()[:, -1].argmax(dim=-1)
    call = "greedy_step(model, memory, src_mask, tokens)"
    next_tokens = answer(model, memory, src_mask, tokens)
    if isinstance(next_tokens, torch.Tensor) and next_tokens.shape == (2, 1):
        raise Wrong(f"{call} has shape (2, 1): return one token per sentence, shape (batch,) (squeeze the last axis)")
    next_tokens = _tensor(next_tokens, call, (2,))
    if torch.equal(next_tokens, expected):
        return
    if torch.equal(next_tokens, logits()[:, 0].argmax(dim=-1)):
        raise Wrong(f"{call} took the first position's prediction: the next token is predicted at the last one")
    if torch.equal(next_tokens, logits(target_mask=None)[:, -1].argmax(dim=-1)):
        raise Wrong(f"{call}: the decoder's self-attention sees every token: give model.decode the causal mask, "
                    "causal_mask(tokens.size(1))")
    if torch.equal(next_tokens, logits(source_mask=None)[:, -1].argmax(dim=-1)):
        raise Wrong(f"{call} attends to the source's padding: pass src_mask to model.decode")
    if torch.equal(next_tokens, logits()[:, -1].argmin(dim=-1)):
        raise Wrong(f"{call} took the least probable token: greedy takes the argmax")
    raise Wrong(f"{call} gave {next_tokens.tolist()}, expected {expected.tolist()}: the argmax over the vocabulary "
                "of model.generator(model.decode(memory, src_mask, tokens, causal_mask(...))) at the last position")


EXERCISES: dict[str, Callable[[Callable], None]] = {  # name -> the check, which raises Wrong; in the page's order
    "relative_position_rotation": _relative_position_rotation,
    "causal_mask": _causal_mask,
    "attention": _attention,
    "split_heads": _split_heads,
    "merge_heads": _merge_heads,
    "SublayerConnection": _sublayer_connection,
    "DecoderLayer": _decoder_layer,
    "noam_rate": _noam_rate,
    "smoothed_target": _smoothed_target,
    "greedy_step": _greedy_step,
}


def problem(name: str, answer: Callable) -> str | None:
    """What is wrong with `answer` to the exercise `name`, in one line; None when it is right."""
    if name not in EXERCISES:
        raise ValueError(f"unknown exercise {name!r}: choose from {', '.join(EXERCISES)}")
    if not callable(answer):
        return f"give the function itself, not {type(answer).__name__}: check({name!r}, {name})"
    try:
        EXERCISES[name](answer)
    except Wrong as wrong:
        return str(wrong)
    except NotImplementedError:
        return "replace the stub's `raise NotImplementedError` with your code"
    except Exception as error:  # the learner's code failed: say how, and let the notebook run on
        return f"it raised {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    return None


def check(name: str, answer: Callable) -> None:
    """Print `name: correct`, or `name: not yet: <what is wrong>`."""
    found = problem(name, answer)
    print(f"{name}: correct" if found is None else f"{name}: not yet: {found}")


def reference(name: str, answer: Callable | None = None) -> Callable:
    """The reference solution of exercise `name` (`solutions`); for a class, the learner's class `answer` with the
    reference's `forward` (its `__init__`, the stub's, builds the parts from the walk's own modules)."""
    if name not in EXERCISES:
        raise ValueError(f"unknown exercise {name!r}: choose from {', '.join(EXERCISES)}")
    solution = getattr(solutions, name)
    if not inspect.isclass(solution):
        return solution
    if not inspect.isclass(answer):
        raise TypeError(f"give your class {name} itself, not {type(answer).__name__}: its __init__ builds the parts "
                        f"the reference's forward uses: yours_or_reference({name!r}, {name})")
    return type(name, (answer,), {"forward": solution.forward, "__doc__": solution.__doc__,
                                  "__module__": answer.__module__})


def yours_or_reference(name: str, answer: Callable) -> Callable:
    """`answer` where its check passes, else the reference solution (`reference`), saying which in one printed line:
    what the walk builds from here on is the learner's code wherever that code is right."""
    found = problem(name, answer)
    if found is None:
        print(f"{name}: yours (its check passes)")
        return answer
    chosen = reference(name, answer)
    if problem(name, chosen) is not None:  # a class whose __init__ is no longer the stub's
        raise ValueError(f"{name}: the reference's forward does not run on your class ({problem(name, chosen)}): "
                         "give it back the stub's __init__")
    print(f"{name}: the reference solution (modeling/learning/solutions.py), as yours is not right yet: {found}")
    return chosen


def checked_values(name: str) -> tuple[float, ...]:
    """The numbers exercise `name`'s check compares an answer with, where they are few enough to be printed (the
    learning rates of `noam_rate`, the share of epsilon each other token gets from `smoothed_target`): a printout
    before the exercise's solution break must not show them (tools/annotated_page/giveaways.py)."""
    if name == "noam_rate":
        return tuple(noam_learning_rate(*case) for case in NOAM_CASES)
    if name == "smoothed_target":
        return tuple(epsilon / (vocab_size - 2) for _, vocab_size, epsilon in SMOOTHING_CASES)
    return ()


__all__ = ["EXERCISES", "WalkInterface", "Wrong", "check", "checked_values", "problem", "reference",
           "yours_or_reference"]
