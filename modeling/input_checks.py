"""Input checks of the model's forward: token ids the embeddings can look up, labels shaped like the decoder inputs,
2-D attention masks covering their tokens, and a warning where the Trainer would count padding in the loss.

Each check names the bad value and what would be accepted, instead of a bare "index out of range" (or a device-side
assert on a GPU) deep in the model. Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import contextlib
import contextvars

import torch
from transformers.utils import logging

from .packed_batches import check_packed_inputs

logger = logging.get_logger(__name__)

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


def check_labels(model, labels: torch.Tensor, decoder_tokens: torch.Tensor | None, num_items_in_batch) -> None:
    """`labels` shaped like the decoder inputs given, and, the first time the Trainer counts the batch's items
    (`num_items_in_batch`), a warning if they are padded with the pad id (`warn_if_counted_padding`). Not while
    compiling: the flag noted on `model`, set in the graph, would fail its guard at the next step (a second graph)."""
    check_labels_fit_decoder_inputs(labels, decoder_tokens)
    if num_items_in_batch is not None and not torch.compiler.is_compiling():
        if not getattr(model, "_checked_counted_padding", False):
            model._checked_counted_padding = True
            warn_if_counted_padding(labels, model.config.pad_token_id)


def forward_token_ids_checked(config, labels, input_ids, decoder_input_ids):
    """With labels (training), the ids of both stacks are checked with the labels, in one device sync, for the whole
    forward call (`token_ids_checked`); otherwise, and while compiling, each stack checks its own."""
    if labels is None or torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return token_ids_checked(
        (labels.masked_fill(labels == -100, 0), config.vocab_size, "labels"),
        (input_ids, config.src_vocab_size, "input_ids"),
        (decoder_input_ids, config.vocab_size, "decoder_input_ids"),
    )


def check_tokens_given(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> None:
    """Exactly one of `input_ids` and `inputs_embeds`, holding at least one token per row (an empty input failed later,
    reshaping the attention heads)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Specify exactly one of `input_ids` / `inputs_embeds` (or their decoder_ counterparts).")
    shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape[:2])
    if 0 in shape:
        raise ValueError(f"Empty input: (batch, length) = {shape}; give at least one token.")


def check_attention_mask(attention_mask: torch.Tensor | None, shape: tuple[int, int], name: str) -> None:
    """A 2-D mask must cover exactly the (batch, length) of the tokens it masks; anything else would be broadcast
    or ignored. (4-D masks are taken as given.)"""
    if attention_mask is not None and attention_mask.dim() == 2 and tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(
            f"`{name}` has shape {tuple(attention_mask.shape)}, but the tokens it masks are (batch, length) = "
            f"{tuple(shape)}"
        )


def check_encoder_inputs(config, input_ids, inputs_embeds, attention_mask, position_ids, pair_ids) -> None:
    """The encoder's inputs: ids inside the source vocabulary, a packed batch's ids and positions covering them."""
    check_token_ids((input_ids, config.src_vocab_size, "input_ids"))
    check_packed_inputs(input_ids if input_ids is not None else inputs_embeds, pair_ids, position_ids, attention_mask)


def check_decoder_inputs(config, input_ids, inputs_embeds, attention_mask, position_ids, pair_ids,
                         encoder_hidden_states, past_length) -> None:
    """The decoder's inputs: the encoder's output to attend to, ids inside the target vocabulary (at the first step:
    later generation steps feed back ids the model itself chose, and a compiled step checks nothing on the host), a
    packed batch's ids and positions covering them."""
    if encoder_hidden_states is None:  # a decoder layer would run its encoder-decoder attention on itself
        raise ValueError("The decoder needs `encoder_hidden_states`: each of its layers attends to the encoder's "
                         "output (§3.2.3); run the encoder first or call the whole model.")
    if not torch.compiler.is_compiling() and past_length == 0:
        check_token_ids((input_ids, config.vocab_size, "decoder_input_ids"))
    check_packed_inputs(input_ids if input_ids is not None else inputs_embeds, pair_ids, position_ids,
                        attention_mask, "decoder_")
