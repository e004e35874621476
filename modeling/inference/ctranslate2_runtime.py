"""Translate with a CTranslate2 export (`scripts/export_ctranslate2.py`, `ctranslate2_export`): load its translator,
generate token ids as `model.generate` does, and translate texts with the folder's own tokenizer(s) and decoding
settings. CTranslate2 is an optional extra; `require_ctranslate2` says how to install it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from transformers import GenerationConfig

from ..tokenization import load_tokenizers

try:
    import ctranslate2
except ImportError:  # an optional extra
    ctranslate2 = None

CTRANSLATE2_MODEL_FILE = "model.bin"  # what marks a folder as a CTranslate2 export
INSTALL_HINT = "CTranslate2 is not installed: pip install ctranslate2 (or pip install -e '.[ctranslate2]')"


def require_ctranslate2():
    """The `ctranslate2` module, or ImportError with the one line that says how to install it."""
    if ctranslate2 is None:
        raise ImportError(INSTALL_HINT)
    return ctranslate2



def load_ctranslate2_translator(
    model_dir: str | os.PathLike, device: str | None = None, *, compute_type: str = "default", intra_threads: int = 0
):
    """A `ctranslate2.Translator` for an exported folder. `device`: cpu, cuda, cuda:1 (default: cuda when CTranslate2
    sees a GPU, else cpu); `compute_type`: default (the stored weight type), int8, float16, ...; `intra_threads`: CPU
    threads (0 = CTranslate2's default)."""
    ct2 = require_ctranslate2()
    if not (Path(model_dir) / CTRANSLATE2_MODEL_FILE).is_file():
        raise FileNotFoundError(
            f"{model_dir} holds no {CTRANSLATE2_MODEL_FILE}: export a model with scripts/export_ctranslate2.py"
        )
    if device is None:
        device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise ValueError(f"device {device!r} is not a CTranslate2 device; use cpu, cuda or cuda:<index>")
    return ct2.Translator(
        str(model_dir), device=kind, device_index=int(index or 0), compute_type=compute_type,
        intra_threads=intra_threads,
    )


def ctranslate2_generate(
    translator, source_ids: Sequence[Sequence[int]], tokenizer, target_tokenizer=None, *, num_beams: int = 1,
    max_new_tokens: int = 256, length_penalty: float = 1.0, batch_size: int = 32,
) -> list[list[int]]:
    """Target token ids (no decoder start token, no `</s>`) for source token ids (`</s>` included, as the tokenizer
    gives them): the ids `model.generate` produces between its start token and `</s>`."""
    target_tokenizer = target_tokenizer or tokenizer
    if num_beams < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"num_beams ({num_beams}), max_new_tokens ({max_new_tokens}) and batch_size ({batch_size}) must be >= 1"
        )
    if not source_ids:
        return []
    results = translator.translate_batch(
        [tokenizer.convert_ids_to_tokens(list(ids)) for ids in source_ids],
        max_batch_size=batch_size,
        beam_size=num_beams,
        length_penalty=length_penalty,
        max_decoding_length=max_new_tokens,
        min_decoding_length=0,  # generate() may end with </s> at once; CTranslate2's default (1) forbids it
        max_input_length=0,  # no silent truncation: a source beyond the position table is an error
    )
    return [target_tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


def translate_ctranslate2(
    texts: Iterable[str],
    model_dir: str | os.PathLike,
    tokenizer=None,
    target_tokenizer=None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    device: str | None = None,
    compute_type: str = "default",
    intra_threads: int = 0,
) -> list[str]:
    """Translate `texts` with a folder written by `export_ctranslate2`; one detokenized string per input, in order.

    Greedy with `num_beams=1`, beam search above (as `generate(early_stopping=True)`, see the module docstring).
    `num_beams`, `max_new_tokens` and the length penalty default to the folder's `generation_config.json` (the
    model's own decoding settings; its `max_length` counts the decoder start token), as
    `modeling.inference.translation.translate` does. The tokenizer(s) default to the ones saved in the folder.
    Whitespace-only texts translate to "" without reaching the model."""
    model_dir = Path(model_dir)
    if tokenizer is None:
        tokenizers = load_tokenizers(model_dir)
        tokenizer, target_tokenizer = tokenizers if isinstance(tokenizers, tuple) else (tokenizers, None)
    generation = GenerationConfig.from_pretrained(model_dir) if (model_dir / "generation_config.json").is_file() \
        else GenerationConfig()
    # Unset fields fall back to generate()'s defaults: greedy, 20 new tokens, length penalty 1.
    num_beams = num_beams or generation.num_beams or 1
    if max_new_tokens is None:
        max_new_tokens = generation.max_new_tokens or (generation.max_length - 1 if generation.max_length else 20)
    length_penalty = 1.0 if generation.length_penalty is None else generation.length_penalty
    translator = load_ctranslate2_translator(model_dir, device, compute_type=compute_type, intra_threads=intra_threads)
    texts = list(texts)
    to_translate = [index for index, text in enumerate(texts) if text.strip()]
    source_ids = tokenizer([texts[index] for index in to_translate])["input_ids"] if to_translate else []
    try:
        generated = ctranslate2_generate(
            translator, source_ids, tokenizer, target_tokenizer, num_beams=num_beams, max_new_tokens=max_new_tokens,
            length_penalty=length_penalty, batch_size=batch_size,
        )
    except RuntimeError as error:  # "No position encodings are defined for positions >= N": name the line
        if match := re.search(r"positions >= (\d+)", str(error)):
            positions = int(match[1])
            for index, ids in zip(to_translate, source_ids):
                if len(ids) > positions:
                    raise ValueError(
                        f"line {index + 1}: {len(ids)} tokens (</s> included) exceed the model's {positions} "
                        "positions, and CTranslate2 does not truncate: shorten it, or use the PyTorch engine (which "
                        "truncates)"
                    ) from None
        raise
    translations = [""] * len(texts)
    for index, ids in zip(to_translate, generated):
        translations[index] = (target_tokenizer or tokenizer).decode(ids, skip_special_tokens=True).strip()
    return translations




__all__ = [
    "CTRANSLATE2_MODEL_FILE",
    "ctranslate2_generate",
    "load_ctranslate2_translator",
    "require_ctranslate2",
    "translate_ctranslate2",
]
