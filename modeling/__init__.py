"""The encoder-decoder Transformer of "Attention Is All You Need" as a Hugging Face-native model package.

Importing this package registers the model with transformers' Auto classes (in this process) and marks the
classes for saving as custom code, so a saved folder loads with
`AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)` where this package is not installed. It also
registers the translation pipeline, which the model saves with it, so the folder translates with
`pipeline("translation", model=folder, trust_remote_code=True)` (transformers 5 has no translation pipeline of its own).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .configuration_annotated_transformer import PRESETS, AnnotatedTransformerConfig
from .modeling_annotated_transformer import (
    AnnotatedTransformerForConditionalGeneration,
    AnnotatedTransformerModel,
    AnnotatedTransformerPreTrainedModel,
)
from .pipeline_annotated_transformer import AnnotatedTransformerTranslationPipeline

AutoConfig.register(AnnotatedTransformerConfig.model_type, AnnotatedTransformerConfig, exist_ok=True)
AutoModel.register(AnnotatedTransformerConfig, AnnotatedTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration, exist_ok=True)

AnnotatedTransformerConfig.register_for_auto_class()
AnnotatedTransformerModel.register_for_auto_class("AutoModel")
AnnotatedTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
PIPELINE_REGISTRY.register_pipeline(
    "translation", pipeline_class=AnnotatedTransformerTranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
)

__all__ = [
    "PRESETS",
    "AnnotatedTransformerConfig",
    "AnnotatedTransformerPreTrainedModel",
    "AnnotatedTransformerModel",
    "AnnotatedTransformerForConditionalGeneration",
    "AnnotatedTransformerTranslationPipeline",
]
