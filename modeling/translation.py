"""Translate with a trained model folder (or Hub id) through the Auto classes, as any transformers user would."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from .tokenization import TARGET_TOKENIZER_SUBDIR


def load_translation_model(model_name_or_path: str | os.PathLike, device: str | None = None):
    """(model, source tokenizer, target tokenizer) from a folder written by `scripts/train.py` (custom code included).

    The target tokenizer is the source one unless the folder has a separate `target_tokenizer/`.
    """
    path = Path(model_name_or_path)
    if path.is_dir() and not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_name_or_path} holds no config.json: give the output_dir of scripts/train.py "
            "(or a checkpoint-<step> folder inside it)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, trust_remote_code=True)
    except OSError as error:
        if path.exists():
            raise
        raise FileNotFoundError(
            f"{model_name_or_path} is not a local model folder, and loading it as a Hub id failed ({error})"
        ) from None
    target_tokenizer = tokenizer
    if (path / TARGET_TOKENIZER_SUBDIR).is_dir():
        target_tokenizer = AutoTokenizer.from_pretrained(path / TARGET_TOKENIZER_SUBDIR)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, trust_remote_code=True, dtype=torch.float32)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer, target_tokenizer


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@torch.no_grad()
def translate(
    texts: Iterable[str],
    model,
    tokenizer,
    target_tokenizer=None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` in batches with `model.generate` (beam search with `num_beams`, default: the model's
    generation config). Returns one detokenized string per input, in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    target_tokenizer = target_tokenizer or tokenizer
    texts = list(texts)
    if num_beams is not None:
        generate_kwargs["num_beams"] = num_beams
    if max_new_tokens is not None:
        generate_kwargs["max_new_tokens"] = max_new_tokens
        generate_kwargs.setdefault("max_length", None)  # the saved generation config may carry a max_length
    translations = []
    for batch in _batches(texts, batch_size):
        inputs = tokenizer(list(batch), return_tensors="pt", padding=True).to(model.device)
        inputs.pop("token_type_ids", None)
        generated = model.generate(**inputs, **generate_kwargs)
        translations += [text.strip() for text in target_tokenizer.batch_decode(generated, skip_special_tokens=True)]
    return translations


__all__ = ["load_translation_model", "translate"]
