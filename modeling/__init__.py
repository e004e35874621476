"""The encoder-decoder Transformer of "Attention Is All You Need" as a Hugging Face-native model package.

Importing this package registers the model with transformers' Auto classes (in this process) and marks the
classes for saving as custom code, so a saved folder loads with
`AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)` where this package is not installed.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_annotated_transformer import PRESETS, AnnotatedTransformerConfig
from .modeling_annotated_transformer import (
    AnnotatedTransformerForConditionalGeneration,
    AnnotatedTransformerModel,
    AnnotatedTransformerPreTrainedModel,
)

AutoConfig.register(AnnotatedTransformerConfig.model_type, AnnotatedTransformerConfig, exist_ok=True)
AutoModel.register(AnnotatedTransformerConfig, AnnotatedTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration, exist_ok=True)

AnnotatedTransformerConfig.register_for_auto_class()
AnnotatedTransformerModel.register_for_auto_class("AutoModel")
AnnotatedTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "PRESETS",
    "AnnotatedTransformerConfig",
    "AnnotatedTransformerPreTrainedModel",
    "AnnotatedTransformerModel",
    "AnnotatedTransformerForConditionalGeneration",
]
