"""A "translation" pipeline for the model, saved with it: transformers 5 removed its own `translation` and
`text2text-generation` pipelines, but still looks a model folder's custom pipelines up first.

    from transformers import pipeline
    translator = pipeline("translation", model="outputs/multi30k", trust_remote_code=True)  # or pipeline(model=...)
    translator(["Ein Hund läuft.", "Zwei Männer."], batch_size=32, num_beams=4, max_new_tokens=64)
    # [{'translation_text': 'A dog runs.'}, {'translation_text': 'Two men.'}]

It returns what transformers 4's `TranslationPipeline` returned: one `{"translation_text": ...}` per input for a
list of texts, a list holding one such dict for a single text (a list of `num_return_sequences` dicts per input when
that is above 1), `{"translation_token_ids": ...}` instead with `return_tensors=True`. Generation arguments given to
`pipeline(...)` or to the call go to `generate`; unset ones come from the model's `generation_config.json` (the beam
size and length it was trained to decode with). Texts are not truncated unless `truncation=True`.

A model with a separate target vocabulary decodes with the tokenizer in the folder's `target_tokenizer/`.

This file travels to the Hub with the modeling code (the model's `save_pretrained` copies it and sets
`config.custom_pipelines`), so it imports only transformers and the standard library.
"""

import enum
import os

from transformers import AutoTokenizer
from transformers.pipelines.base import Pipeline
from transformers.utils import cached_file

# The subfolder of a model folder holding the target-side tokenizer when source and target vocabularies differ.
TARGET_TOKENIZER_SUBDIR = "target_tokenizer"


class ReturnType(enum.Enum):
    TENSORS = 0
    TEXT = 1


def load_target_tokenizer(model_name_or_path: str | os.PathLike):
    """The tokenizer in `target_tokenizer/` of a model folder or Hub repo, or None when it has none."""
    found = cached_file(
        model_name_or_path, f"{TARGET_TOKENIZER_SUBDIR}/tokenizer_config.json",
        _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False,
    )
    if found is None:
        return None
    return AutoTokenizer.from_pretrained(model_name_or_path, subfolder=TARGET_TOKENIZER_SUBDIR)


class AnnotatedTransformerTranslationPipeline(Pipeline):
    """Translate texts with `model.generate`: transformers 4's `TranslationPipeline`, for this encoder-decoder model.

    Args (beyond `Pipeline`'s):
        target_tokenizer: decodes the translations (default: the model folder's `target_tokenizer/` if it has one,
            else `tokenizer`).

    Call arguments: `return_tensors`, `return_text`, `clean_up_tokenization_spaces` (default False), `truncation`
    (default False: a text longer than the model's positions is an error), `batch_size`, and any `generate` argument
    (`num_beams`, `max_new_tokens`, `num_return_sequences`, `generation_config`, ...).
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    return_name = "translation"  # the outputs' keys: translation_text, translation_token_ids

    def __init__(self, *args, target_tokenizer=None, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tokenizer is None:  # given a model object, transformers does not look for its tokenizer
            raise ValueError("the translation pipeline needs the model's tokenizer: pass tokenizer=...")
        if target_tokenizer is None and self.model.name_or_path:
            target_tokenizer = load_target_tokenizer(self.model.name_or_path)
        self.target_tokenizer = target_tokenizer or self.tokenizer

    def _sanitize_parameters(self, return_tensors=None, return_text=None, clean_up_tokenization_spaces=None,
                             truncation=None, **generate_kwargs):
        preprocess_params = {} if truncation is None else {"truncation": truncation}
        postprocess_params = {}
        if return_tensors is not None or return_text is not None:  # as in transformers 4, return_tensors wins
            tensors = bool(return_tensors) if return_tensors is not None else not return_text
            postprocess_params["return_type"] = ReturnType.TENSORS if tensors else ReturnType.TEXT
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, inputs, **kwargs):
        """Translate a text (-> a list of dicts) or a list of texts (-> one dict per text when each has one
        translation, else one list per text)."""
        if isinstance(inputs, list) and not inputs:
            return []  # Pipeline.__call__ would look at inputs[0]
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(records) == 1 for records in result):
            return [records[0] for records in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise TypeError(f"the pipeline translates strings, got {type(text).__name__}: {text!r}")
        prefix = self.prefix or ""
        # truncated to what the encoder has positions for, whatever the tokenizer's model_max_length says
        max_length = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)
        return self.tokenizer(prefix + text, truncation=truncation, max_length=max_length if truncation else None,
                              return_tensors="pt", return_token_type_ids=False)

    def _forward(self, model_inputs, **generate_kwargs):
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **self._call_generate_kwargs(generate_kwargs))
        # (batch * num_return_sequences, length) -> (batch, num_return_sequences, length)
        return {"output_ids": output_ids.reshape(batch_size, -1, *output_ids.shape[1:])}

    def _call_generate_kwargs(self, generate_kwargs: dict) -> dict:
        """This call's `generate` arguments on top of the pipeline's: transformers' own merge where it has one, else
        (older 5.x releases, such as 5.17) as their pipelines did: the pipeline's `generation_config`, which holds
        the arguments given to `pipeline(...)`, unless the call passes its own."""
        if hasattr(Pipeline, "_prepare_generate_kwargs"):
            return self._prepare_generate_kwargs(generate_kwargs)
        return {"generation_config": self.generation_config, **generate_kwargs}

    def postprocess(self, model_outputs, return_type=ReturnType.TEXT, clean_up_tokenization_spaces=False):
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            if return_type == ReturnType.TENSORS:
                records.append({f"{self.return_name}_token_ids": output_ids})
            else:
                text = self.target_tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({f"{self.return_name}_text": text})
        return records

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs):
        """Save as `Pipeline.save_pretrained` does, plus a separate target tokenizer in `target_tokenizer/`."""
        super().save_pretrained(save_directory, **kwargs)
        if self.target_tokenizer is not self.tokenizer:
            self.target_tokenizer.save_pretrained(os.path.join(save_directory, TARGET_TOKENIZER_SUBDIR), **kwargs)

    @classmethod
    def custom_pipelines(cls) -> dict:
        """`config.custom_pipelines` for this class as registered with `PIPELINE_REGISTRY.register_pipeline`, written
        as `Pipeline.save_pretrained` writes it (class names, not classes); empty when it is not registered."""
        return {
            task: {**info, "impl": f"{cls.__module__.split('.')[-1]}.{cls.__name__}",
                   "pt": tuple(model_class.__name__ for model_class in info["pt"])}
            for task, info in getattr(cls, "_registered_impl", {}).items()
            if info["impl"] is cls
        }
