"""How a model folder is saved and loaded: as custom code that opens with the Auto classes and the translation pipeline
where this package is not installed, with the weights' SHA-256 digests written on save and checked on load, from
safetensors only, and as the class the model was built as even when FSDP2 has sharded it.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import os

import torch

from .weight_files import verify_weights, write_checksums


def unsharded_class(cls: type) -> type:
    """`cls`, or the class FSDP2's `fully_shard` built it from where `cls` is the `FSDP<name>` class (made in torch)
    that it gives a sharded module."""
    if not torch.distributed.is_available():
        return cls
    from torch.distributed.fsdp import FSDPModule

    return next(base for base in cls.__mro__ if not issubclass(base, FSDPModule))


class SavedAsCustomCode:
    """Mixed into the `PreTrainedModel` base: `save_pretrained` and `from_pretrained` as transformers does them, plus
    the above."""

    def save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        """Save as transformers does, plus the weights' SHA-256 digests (`checksums.sha256`) that loading checks."""
        # FSDP2's `fully_shard` gives a sharded model a class of its own, `FSDP<name>`, defined in torch: transformers
        # would save that class's file and its relative imports (torch's FSDP sources) as the model code and name
        # the class in `auto_map`, a folder that fails to load. Saved as the class it was built as, it does not.
        sharded_class = type(self)
        try:
            self.__class__ = unsharded_class(sharded_class)
            return self._save_pretrained(save_directory, is_main_process, *args, **kwargs)
        finally:
            self.__class__ = sharded_class

    def _save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        # Saved as custom code (`register_for_auto_class`), the folder should also open with `AutoModel`, not only
        # with the Auto class of the saved object, so both models go into `auto_map`.
        if self._auto_class is not None:
            module = self.__class__.__module__.split(".")[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.AnnotatedTransformerModel",
                "AutoModelForSeq2SeqLM": f"{module}.AnnotatedTransformerForConditionalGeneration",
            }
            # The translation pipeline travels too (transformers 5 has none): this relative import makes transformers
            # copy its file with the model code, and `custom_pipelines` is what `pipeline(model=folder,
            # trust_remote_code=True)` looks up. Unregistered (loaded as remote code), the loaded config keeps its own.
            from .pipeline_annotated_transformer import AnnotatedTransformerTranslationPipeline

            if custom_pipelines := AnnotatedTransformerTranslationPipeline.custom_pipelines():
                self.config.custom_pipelines = custom_pipelines
        result = super().save_pretrained(save_directory, is_main_process, *args, **kwargs)
        if is_main_process:
            write_checksums(save_directory)
        return result

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """Load as transformers does, from safetensors only (never a pickle), after checking that a local folder's
        weights files are complete and match their saved digests: a corrupt file is named in the error instead of
        failing deep inside safetensors, or loading silently with a flipped bit."""
        kwargs.setdefault("use_safetensors", True)
        folder = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if os.path.isdir(folder):
            verify_weights(folder)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
