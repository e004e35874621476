"""Parameter counts of the model presets (the paper's Table 3 reports base ~65M, big ~213M)."""

import torch

from ..configuration_annotated_transformer import PRESETS, AnnotatedTransformerConfig
from ..modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration


def count_parameters(config: AnnotatedTransformerConfig) -> int:
    """Trainable parameters, each tied matrix counted once; built on the meta device, so no memory is used."""
    with torch.device("meta"):
        model = AnnotatedTransformerForConditionalGeneration(config)
    return model.num_parameters()


def preset_parameter_counts(vocab_size: int = 37000, tie_word_embeddings: bool = True) -> dict[str, int]:
    return {
        name: count_parameters(
            AnnotatedTransformerConfig.from_preset(name, vocab_size=vocab_size, tie_word_embeddings=tie_word_embeddings)
        )
        for name in PRESETS
    }
