"""The walk's exercises, each checked against the package's own code: `check(name, answer)` prints whether the
learner's function is right and, when it is not, what is wrong, in one line; `problem(name, answer)` returns that
line (None when the answer is right), for tests. A check never raises: a notebook runs on past an unfinished
exercise.

    causal_mask(size)                               §3.1: the decoder's (size, size) mask, True where i may see j
    relative_position_rotation(d_model, k)          §3.5: M_k with PE(pos + k) = M_k PE(pos)
    smoothed_target(gold_ids, vocab_size, epsilon)  §5.4: label smoothing's target distribution q
    noam_rate(step, d_model, warmup_steps)          §5.3: the learning rate at one step
    greedy_step(model, encoder_outputs, attention_mask, tokens)   §3: the next token of each sentence
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..modeling_annotated_transformer import sinusoidal_positional_encoding
from ..training.schedule import noam_learning_rate
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


def _smoothed_target(answer: Callable) -> None:
    for gold, vocab_size, epsilon in (([4, 6, 2], 8, 0.1), ([5, 1], 12, 0.4)):
        call = f"smoothed_target({gold}, {vocab_size}, {epsilon})"
        target = _tensor(answer(gold, vocab_size, epsilon), call, (len(gold), vocab_size)).double()
        expected = smoothed_targets(gold, vocab_size, epsilon)  # read back from the package's loss
        if torch.allclose(target, expected, atol=1e-6):
            continue
        if not torch.allclose(target.sum(-1), torch.ones(len(gold), dtype=torch.float64), atol=1e-6):
            raise Wrong(f"{call}: a row sums to {target.sum(-1).tolist()[0]:.4f}, not 1: q is a distribution")
        if target[:, 0].abs().max() > 1e-6:
            raise Wrong(f"{call}: <pad> (id 0) gets {target[0, 0]:.4f}; it must get 0, the model never predicts it")
        gold_values = target[range(len(gold)), gold]
        if not torch.allclose(gold_values, torch.full_like(gold_values, 1 - epsilon), atol=1e-6):
            raise Wrong(f"{call}: the gold token gets {gold_values[0]:.4f}, expected 1 - epsilon = {1 - epsilon:.4f}")
        raise Wrong(f"{call}: the other tokens should each get epsilon / (V - 2) = {epsilon / (vocab_size - 2):.4f} "
                    "(all but the gold token and <pad> share epsilon)")


def _noam_rate(answer: Callable) -> None:
    for step, d_model, warmup_steps in ((1000, 512, 4000), (4000, 512, 4000), (16000, 512, 4000), (50, 256, 100)):
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


@torch.no_grad()
def _greedy_step(answer: Callable) -> None:
    # Untied and Xavier-initialised: an untrained model whose next token is neither its input's last token (as a
    # fresh tied model's tends to be) nor its first position's prediction.
    model = small_model(seed=2, tie_word_embeddings=False, init_scheme="xavier_uniform")
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0]])
    attention_mask = input_ids.ne(0).long()
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    # Large values where the second source is padded: attended to, they change its next token.
    encoder_outputs.last_hidden_state[1, 3:] = 30 * torch.randn(3, model.config.d_model,
                                                                generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[1, 12, 30, 7], [1, 25, 4, 19]])

    def logits(mask):
        return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens).logits

    expected = logits(attention_mask)[:, -1].argmax(dim=-1)
    call = "greedy_step(model, encoder_outputs, attention_mask, tokens)"
    next_tokens = answer(model, encoder_outputs, attention_mask, tokens)
    if isinstance(next_tokens, torch.Tensor) and next_tokens.shape == (2, 1):
        raise Wrong(f"{call} has shape (2, 1): return one token per sentence, shape (batch,) (squeeze the last axis)")
    next_tokens = _tensor(next_tokens, call, (2,))
    if torch.equal(next_tokens, expected):
        return
    if torch.equal(next_tokens, logits(attention_mask)[:, 0].argmax(dim=-1)):
        raise Wrong(f"{call} took the first position's prediction: the next token is predicted at the last one")
    if torch.equal(next_tokens, logits(None)[:, -1].argmax(dim=-1)):
        raise Wrong(f"{call} attends to the source's padding: pass attention_mask to the model")
    if torch.equal(next_tokens, logits(attention_mask)[:, -1].argmin(dim=-1)):
        raise Wrong(f"{call} took the least probable token: greedy takes the argmax")
    raise Wrong(f"{call} gave {next_tokens.tolist()}, expected {expected.tolist()}: the argmax over the vocabulary "
                "of the logits at the last position")


EXERCISES: dict[str, Callable[[Callable], None]] = {  # name -> the check, which raises Wrong
    "causal_mask": _causal_mask,
    "relative_position_rotation": _relative_position_rotation,
    "smoothed_target": _smoothed_target,
    "noam_rate": _noam_rate,
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


__all__ = ["EXERCISES", "Wrong", "check", "problem"]
