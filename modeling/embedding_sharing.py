"""§3.4's one vocabulary and its embedding matrix: resized as one (`OneVocabulary`), and under FSDP2 held by one
module at one path (`embed_with_the_shared_module`), so that it is sharded once.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

from torch import nn


def embed_with_the_shared_module(model: nn.Module) -> None:
    """Tied: both stacks of `model` (an `AnnotatedTransformerModel`) embed with the module `shared` itself from now
    on, used but not registered in them, so that one module at one path holds the matrix (with the output
    projection). FSDP2 training (`fully_shard`) needs that: accelerate shards the input embedding and the output
    projection in one unit, and a stack's own module holding the same weight stayed in the root's unit, a second copy
    (torch < 2.13 trained the two apart and failed after an evaluation and a save; torch 2.13 refuses to shard); a
    module registered at three paths is one holder, but its state dict then names it three times and torch's
    full-state-dict load (the best checkpoint's, at the end) fails on the extra two. A state dict that names the
    stacks' embeddings (a model saved or loaded with its own modules) still loads: those copies of `shared.weight`
    are passed over (`pass_over_unregistered_embeddings`). Saved checkpoints are the same; `from_pretrained` builds
    the stacks' own modules again, and so do `set_input_embeddings` and `resize_token_embeddings`."""
    if not model.config.tie_word_embeddings or "embed_tokens" not in model.encoder.embeddings._modules:
        return
    for stack in (model.encoder, model.decoder):
        del stack.embeddings._modules["embed_tokens"]
        object.__setattr__(stack.embeddings, "embed_tokens", model.shared)


def pass_over_unregistered_embeddings(module, state_dict, prefix, *args) -> None:
    """`load_state_dict` pre-hook of a tied `AnnotatedTransformerModel`: a stack that embeds with `shared`
    unregistered (`embed_with_the_shared_module`) has no key of its own, so the state dict's copy under the stack's
    name is dropped."""
    for name in ("encoder", "decoder"):
        if "embed_tokens" not in getattr(module, name).embeddings._modules:
            state_dict.pop(f"{prefix}{name}.embeddings.embed_tokens.weight", None)


class OneVocabulary:
    """Mixed into the `PreTrainedModel` base: `resize_token_embeddings` resizes source and target embeddings (and the
    output projection) together."""

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """Resize the one vocabulary: source and target embeddings (and the output projection), tied or not. With
        separate source/target vocabularies (`src_vocab_size != vocab_size`) a single new size is ambiguous."""
        if self.config.src_vocab_size != self.config.vocab_size:
            raise NotImplementedError(
                f"`resize_token_embeddings` resizes one shared vocabulary, but this model has separate source "
                f"({self.config.src_vocab_size}) and target ({self.config.vocab_size}) vocabularies: resize the "
                "encoder's and the decoder's `embeddings.embed_tokens` (and `lm_head`) yourself."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self.config.src_vocab_size = self.config.vocab_size
        return embeddings

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        # transformers resizes the input (source) embeddings and `lm_head`; untied, the decoder's are another matrix.
        if not self.config.tie_word_embeddings:
            decoder = self.get_decoder()
            decoder.set_input_embeddings(self._get_resized_embeddings(
                decoder.get_input_embeddings(), new_num_tokens, pad_to_multiple_of, mean_resizing
            ))
        return super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)


def tied_weights_keys(prefix: str = "", with_output_projection: bool = False) -> dict[str, str]:
    """§3.4's ties, as transformers' `_tied_weights_keys`: each stack's embedding (and the output projection) pointing
    at the root parameter `{prefix}shared.weight` itself, since transformers does not resolve chains of ties."""
    root = f"{prefix}shared.weight"
    keys = {"lm_head.weight": root} if with_output_projection else {}
    return keys | {f"{prefix}{stack}.embeddings.embed_tokens.weight": root for stack in ("encoder", "decoder")}
