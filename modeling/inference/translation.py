"""Translate with a trained model folder (or Hub id) through the Auto classes, as any transformers user would.

`translate` tokenizes every sentence once, sorts by source length, packs batches under a sentence cap
(`batch_size`) and/or a cap on padded source tokens (`max_tokens`, fairseq's `--max-tokens`) with the training
sampler (`modeling.data.batching.TokenBudgetBatchSampler`), and returns the translations in input order. Sorting only
cuts padding: with attention masks the result equals translating one sentence at a time.

`translate_with_ctranslate2` keeps the same contract for a CTranslate2 export (`scripts/export_ctranslate2.py`).

Also here: the model-folder and device checks that `scripts/translate.py` and `scripts/evaluate.py` run before they
load a model.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from ..data.batching import TokenBudgetBatchSampler
from ..pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR, load_target_tokenizer
from ..weight_files import WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from .ctranslate2_runtime import CTRANSLATE2_MODEL_FILE, require_ctranslate2, translate_ctranslate2

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 32  # sentences per batch when neither batch_size nor max_tokens is given
WEIGHTS_FILES = (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)  # one file, or the index of shards
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# generate()'s settings a saved generation_config.json may hold whose type transformers does not check on loading (a
# string or fraction there ends deep in generate() as a bare TypeError, or is used as it is)
GENERATION_INTEGERS = (
    "max_length", "max_new_tokens", "min_length", "min_new_tokens", "num_beams", "num_return_sequences", "top_k",
    "no_repeat_ngram_size", "bos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id",
)
GENERATION_NUMBERS = ("length_penalty", "temperature", "top_p", "repetition_penalty")
GENERATION_TOKEN_LISTS = ("eos_token_id", "forced_eos_token_id")  # an id or a list of ids
ENGINES = ("pytorch", "ctranslate2")  # what translates: the model through transformers, or its CTranslate2 export
# The German->English model committed with the repository (not in the wheel), relative to the checkout's root: what
# translate.py and demo.py use where no model is given (models/multi30k-de-en-cpu/README.md: how it was made)
SHIPPED_MODEL = "models/multi30k-de-en-cpu"


# --------------------------------------------------------------------------------------------------------------------
# Loading


def looks_local(model_name_or_path: str | os.PathLike) -> bool:
    """Whether a name that is not an existing folder still means one, never a Hub id: an absolute or relative path
    (`/`, `.`, `~`), one of more than two parts (a Hub id is `name` or `owner/name`), or one whose first part is a
    local folder (`outputs/copy-tiny` where `outputs/` exists), or written as the training runs' folders are
    (`outputs/...`, `runs/...`)."""
    name = str(model_name_or_path)
    parts = Path(name).parts
    return (Path(name).is_absolute() or name.startswith((".", "~")) or len(parts) > 2
            or (len(parts) == 2 and (Path(parts[0]).is_dir() or parts[0] in ("outputs", "runs"))))


def model_and_texts(words: list[str], default: str | os.PathLike) -> tuple[str, list[str]]:
    """A command line's positional words as (model, sentences): the first word is the model when it is a folder that
    exists, or a path or Hub id (`owner/name`: a "/" and no space); otherwise every word is a sentence and the model
    is `default`."""
    first = words[0] if words else ""
    if first and (Path(first).is_dir() or ("/" in first and not any(space.isspace() for space in first))):
        return first, words[1:]
    return str(default), list(words)


def check_model_folder(model_name_or_path: str | os.PathLike) -> None:
    """Raise FileNotFoundError, naming what is missing, unless a local folder holds a config, weights and a tokenizer
    (also in `target_tokenizer/` when there is one), and ValueError when its config.json or generation_config.json
    is no JSON object. A path that does not exist is left to the Hub."""
    path = Path(model_name_or_path)
    if not path.exists():
        if looks_local(model_name_or_path):
            raise FileNotFoundError(f"model folder {model_name_or_path} does not exist: give the output_dir of a "
                                    "finished scripts/train.py run (or a checkpoint-<step> folder inside it)")
        # Said before the Hub is asked, which without a network retries for a while
        logger.warning(f"{model_name_or_path} is not a local folder: loading it from the Hugging Face Hub")
        return
    if not path.is_dir():
        raise FileNotFoundError(f"{model_name_or_path} is a file: give a model folder (the output_dir of train.py)")
    hint = "give the output_dir of scripts/train.py (or a checkpoint-<step> folder inside it)"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{model_name_or_path} holds no config.json: {hint}")
    saved = {}
    for name in ("config.json", "generation_config.json"):  # transformers ignores a corrupt generation config
        if name == "config.json" or (path / name).is_file():
            try:
                saved[name] = json.loads((path / name).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                saved[name] = None
            if not isinstance(saved[name], dict):
                raise ValueError(f"{path / name} is not a JSON object of configuration values: the file is corrupt")
    if "generation_config.json" in saved:
        try:  # its values are checked when the model loads, where a wrong type is a bare TypeError
            check_generation_values(saved["generation_config.json"])
            GenerationConfig.from_pretrained(path)
        except (TypeError, ValueError) as error:
            message = f"{path / 'generation_config.json'} holds a value generate() cannot use: {error}"
            raise ValueError(message) from None
    if not any((path / name).is_file() for name in WEIGHTS_FILES):
        if (path / CTRANSLATE2_MODEL_FILE).is_file():
            hint = f"it holds a CTranslate2 export ({CTRANSLATE2_MODEL_FILE}): add --engine ctranslate2"
        raise FileNotFoundError(f"{model_name_or_path} holds no weights ({' or '.join(WEIGHTS_FILES)}): {hint}")
    _check_tokenizer_files(path, hint)


def check_generation_values(values: dict) -> None:
    """TypeError naming the first of generate()'s integer, number or token-id settings in `values` (a saved generation
    config) that has another type; None (unset) is allowed."""

    def is_integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    expected = {
        **dict.fromkeys(GENERATION_INTEGERS, ("an integer", is_integer)),
        **dict.fromkeys(GENERATION_NUMBERS, ("a number", lambda value: is_integer(value) or isinstance(value, float))),
        **dict.fromkeys(GENERATION_TOKEN_LISTS, ("a token id or a list of them", lambda value: is_integer(value) or (
            isinstance(value, list) and bool(value) and all(map(is_integer, value))))),
    }
    for name, (kind, valid) in expected.items():
        if values.get(name) is not None and not valid(values[name]):
            raise TypeError(f"{name} must be {kind}, got {values[name]!r}")


def check_ctranslate2_folder(model_dir: str | os.PathLike) -> None:
    """Raise FileNotFoundError, naming what is missing, unless `model_dir` is a folder written by
    `scripts/export_ctranslate2.py`: a CTranslate2 model and its tokenizer(s)."""
    path = Path(model_dir)
    hint = "give the output folder of scripts/export_ctranslate2.py"
    if not path.is_dir():
        problem = "is a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"model folder {model_dir} {problem}: {hint}")
    if not (path / CTRANSLATE2_MODEL_FILE).is_file():
        if any((path / name).is_file() for name in WEIGHTS_FILES):
            raise FileNotFoundError(
                f"{model_dir} holds a PyTorch model, not a CTranslate2 one ({CTRANSLATE2_MODEL_FILE}): export it with "
                f"scripts/export_ctranslate2.py {model_dir} OUTPUT_DIR, or translate it with the pytorch engine"
            )
        raise FileNotFoundError(f"{model_dir} holds no {CTRANSLATE2_MODEL_FILE} (a CTranslate2 model): {hint}")
    _check_tokenizer_files(path, hint)


def _check_tokenizer_files(path: Path, hint: str) -> None:
    """FileNotFoundError for a missing tokenizer file, ValueError for one that is JSON of another shape (which
    transformers meets with a KeyError or an AttributeError); JSON that does not parse is named when it loads."""
    for folder in (path, path / TARGET_TOKENIZER_SUBDIR):
        if not folder.is_dir():
            continue
        for name, what, keys in ((TOKENIZER_FILE, "the tokenizer", ("model", "added_tokens")),
                                 (TOKENIZER_CONFIG_FILE, "the tokenizer's special tokens and class", ())):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder} holds no {name} ({what}): {hint}")
            try:
                content = json.loads((folder / name).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(content, dict) or any(key not in content for key in keys):
                raise ValueError(f"{folder / name} is not {what} (a JSON object{' with ' if keys else ''}"
                                 f"{' and '.join(map(repr, keys))}): the file is corrupt")


def resolve_device(device: str | None = None) -> str:
    """`device`, checked, or "cuda" when a GPU is available, else "cpu"."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {device!r} is not a torch device; use cpu, cuda, cuda:1, ...") from None
    backend = getattr(torch, parsed.type, None)  # torch.cuda, torch.mps, torch.xpu, ...
    if parsed.type != "cpu" and hasattr(backend, "is_available"):
        if not backend.is_available():
            raise ValueError(f"device {device!r}: this machine has no {parsed.type} device; use cpu")
        if parsed.index is not None and parsed.index >= backend.device_count():
            raise ValueError(f"device {device!r}: there are only {backend.device_count()} {parsed.type} device(s)")
    return device


def invalid_config(model_name_or_path, error: StrictDataclassError) -> ValueError:
    """The one-line error for a config.json value of the wrong type or outside its range."""
    reason = " ".join(line.strip() for line in str(error.__cause__ or error).splitlines())
    return ValueError(f"{model_name_or_path}: its config.json does not describe a valid model: {reason}")


def load_config(model_name_or_path: str | os.PathLike):
    """The model's configuration (custom code allowed), a ValueError naming config.json where a value is of the
    wrong type or outside its range."""
    try:
        return AutoConfig.from_pretrained(model_name_or_path, trust_remote_code=True)
    except StrictDataclassError as error:
        raise invalid_config(model_name_or_path, error) from None


def load_translation_model(model_name_or_path: str | os.PathLike, device: str | None = None):
    """(model, source tokenizer, target tokenizer) from a folder written by `scripts/train.py` (custom code included).

    The target tokenizer is the source one unless the folder has a separate `target_tokenizer/`. `device` defaults
    to cuda when available, else cpu.
    """
    check_model_folder(model_name_or_path)
    device = resolve_device(device)
    path = Path(model_name_or_path)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, trust_remote_code=True)
            target_tokenizer = load_target_tokenizer(model_name_or_path) or tokenizer  # a folder's or a Hub repo's
        except Exception as error:  # damaged tokenizer files: JSON errors, or tokenizers' bare Exception
            if not isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)) and type(error) is not Exception:
                raise
            raise ValueError(f"{model_name_or_path}: its tokenizer files (tokenizer.json, tokenizer_config.json) "
                             f"cannot be read: {error}") from None
        model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, trust_remote_code=True, dtype=torch.float32)
    except OSError as error:
        if path.exists():
            raise
        raise FileNotFoundError(
            f"{model_name_or_path} is not a local model folder, and loading it as a Hub id failed ({error})"
        ) from None
    except StrictDataclassError as error:  # a value of the wrong type or outside its range in config.json
        raise invalid_config(model_name_or_path, error) from None
    except RuntimeError as error:
        if "ignore_mismatched_sizes" not in str(error):
            raise
        raise ValueError(f"{model_name_or_path}: its weights do not have the shapes its config.json describes (the "
                         "report above lists them): was config.json edited?") from None
    return model.to(device).eval(), tokenizer, target_tokenizer


# --------------------------------------------------------------------------------------------------------------------
# Translation


def _check_at_least_one(**values) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1 (or None), got {value}")


def length_sorted_batches(lengths: Sequence[int], *, batch_size: int | None = None,
                          max_tokens: int | None = None) -> list[list[int]]:
    """Indices of `lengths` sorted by length (ties in input order), packed into batches of at most `batch_size`
    sentences and `max_tokens` padded tokens (n * longest). Without either cap, batches of DEFAULT_BATCH_SIZE."""
    _check_at_least_one(batch_size=batch_size, max_tokens=max_tokens)
    if not lengths:
        return []
    if batch_size is None and max_tokens is None:
        batch_size = DEFAULT_BATCH_SIZE
    if max_tokens is not None and max(lengths) > max_tokens:
        raise ValueError(
            f"max_tokens={max_tokens} is less than the longest sentence's {max(lengths)} tokens (</s> included): "
            f"raise max_tokens to at least {max(lengths)}"
        )
    sampler = TokenBudgetBatchSampler(
        lengths, None, max_tokens if max_tokens is not None else max(lengths) * batch_size, shuffle=False,
        max_sentences=batch_size,
    )
    return [list(batch) for batch in sampler]


def encode_sources(texts: Sequence[str], tokenizer, max_positions: int | None) -> list[list[int]]:
    """Token ids (`</s>` included) of each text; a text longer than `max_positions` is truncated to fit (the
    tokenizer keeps its `</s>`), with a warning naming its 1-based line number."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), verbose=False)["input_ids"]  # verbose=False: no model_max_length warning
    if max_positions is None:
        return encoded
    for index, ids in enumerate(encoded):
        if len(ids) > max_positions:
            logger.warning(
                "line %d: %d tokens (</s> included) exceed the model's %d positions; translating its first %d tokens",
                index + 1, len(ids), max_positions, max_positions - 1,
            )
            encoded[index] = tokenizer(texts[index], truncation=True, max_length=max_positions)["input_ids"]
    return encoded


@torch.no_grad()
def corpus_perplexity(sources: Sequence[str], references: Sequence[str], model, tokenizer, target_tokenizer=None, *,
                      max_tokens: int = 4096) -> float:
    """exp of the mean negative log-likelihood of each reference's tokens (`</s>` included) given its source, with
    teacher forcing and no label smoothing: the perplexity per target token (per BPE token, as the paper's Table 3
    reports it per wordpiece). Pairs are batched by source length under `max_tokens` padded source tokens; sides
    longer than the model's positions are truncated (as `translate` does), an empty reference counts its `</s>`."""
    target_tokenizer = target_tokenizer or tokenizer
    max_positions = getattr(model.config, "max_position_embeddings", None)
    sources_ids = encode_sources(list(sources), tokenizer, max_positions)
    targets_ids = [ids[:max_positions] if max_positions else ids
                   for ids in target_tokenizer(list(references), verbose=False)["input_ids"]]
    if len(sources_ids) != len(targets_ids) or not sources_ids:
        raise ValueError(f"perplexity needs pairs: {len(sources_ids)} sources, {len(targets_ids)} references")
    total, count = 0.0, 0
    for batch in length_sorted_batches([len(ids) for ids in sources_ids], max_tokens=max_tokens):
        inputs = tokenizer.pad({"input_ids": [sources_ids[i] for i in batch]}, return_tensors="pt").to(model.device)
        longest = max(len(targets_ids[i]) for i in batch)
        labels = torch.tensor([targets_ids[i] + [-100] * (longest - len(targets_ids[i])) for i in batch],
                              device=model.device)
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
        logits = model(**inputs, decoder_input_ids=decoder_input_ids).logits.float()
        kept = labels != -100
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        total -= log_probs[kept].double().sum().item()
        count += int(kept.sum())
    return math.exp(total / count)


def single_line(text: str) -> str:
    """`text` stripped, its line breaks turned into spaces: one input line gives one output line."""
    return " ".join(text.strip().splitlines())


@torch.no_grad()
def translate(
    texts: Iterable[str],
    model,
    tokenizer,
    target_tokenizer=None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    progress: bool = False,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` with `model.generate`; one detokenized, single-line string per input, in input order.

    Args:
        num_beams: beam size (default: the model's generation config, as trained).
        max_new_tokens: longest translation in tokens (default: the generation config's max_length); capped to the
            decoder's positions.
        batch_size, max_tokens: caps on sentences and on padded source tokens per batch (see
            `length_sorted_batches`); default: batches of DEFAULT_BATCH_SIZE sentences.
        progress: show a tqdm bar over sentences.
        generate_kwargs: passed to `model.generate` (one sequence per text: `num_return_sequences` other than 1
            is refused, and a saved generation config's is not used).

    Whitespace-only texts translate to "" without reaching the model. A text longer than the model's
    `max_position_embeddings` tokens is truncated, with a logged warning naming its line (see `encode_sources`).
    """
    _check_at_least_one(num_beams=num_beams, max_new_tokens=max_new_tokens)
    if isinstance(texts, str):
        raise TypeError("translate() takes a list of texts; a single string would be translated character by character")
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise ValueError(f"num_return_sequences={generate_kwargs['num_return_sequences']}: translate() gives one "
                         "translation per text; for several, use the translation pipeline or model.generate")
    # one row of token ids per text, whatever the saved generation config asks for
    generate_kwargs.update(num_return_sequences=1, return_dict_in_generate=False)
    target_tokenizer = target_tokenizer or tokenizer
    texts = list(texts)
    max_positions = getattr(model.config, "max_position_embeddings", None)
    if num_beams is not None:
        generate_kwargs["num_beams"] = num_beams
    if max_new_tokens is not None:
        if max_positions is not None and max_new_tokens > max_positions - 1:
            logger.warning(
                "max_new_tokens=%d: the decoder has %d positions, one for its start token; generating at most %d",
                max_new_tokens, max_positions, max_positions - 1,
            )
            max_new_tokens = max_positions - 1
        generate_kwargs["max_new_tokens"] = max_new_tokens
        generate_kwargs.setdefault("max_length", None)  # the saved generation config may carry a max_length
    translations = [""] * len(texts)
    to_translate = [index for index, text in enumerate(texts) if text.strip()]
    encoded = encode_sources(texts, tokenizer, max_positions)  # all texts, so warnings name the input's lines
    encoded = [encoded[index] for index in to_translate]
    batches = length_sorted_batches([len(ids) for ids in encoded], batch_size=batch_size, max_tokens=max_tokens)
    with tqdm(total=len(texts), disable=not progress, unit="sentence", desc="Translating") as bar:
        bar.update(len(texts) - len(to_translate))
        for batch in batches:
            inputs = tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, return_tensors="pt").to(model.device)
            generated = model.generate(**inputs, **generate_kwargs)
            for i, text in zip(batch, target_tokenizer.batch_decode(generated, skip_special_tokens=True)):
                translations[to_translate[i]] = single_line(text)
            bar.update(len(batch))
    return translations


def check_compute_type(compute_type: str) -> None:
    """Raise ValueError unless `compute_type` names a CTranslate2 compute type (ImportError, with the pip command,
    without CTranslate2). Whether the device supports it is known only when the model loads."""

    require_ctranslate2()
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    accepted = ("default", "auto", *ACCEPTED_MODEL_TYPES)
    if compute_type not in accepted:
        raise ValueError(
            f"quantization {compute_type!r} is not a CTranslate2 compute type; use one of {', '.join(accepted)}"
        )


def translate_with_ctranslate2(
    texts: Iterable[str],
    model_dir: str | os.PathLike,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    compute_type: str = "default",
) -> list[str]:
    """`translate` with the CTranslate2 export in `model_dir` (see `modeling.inference.ctranslate2_export`): one single-line
    string per text, in input order; whitespace-only texts give "". Defaults come from the folder's generation config;
    `batch_size` caps sentences per batch (CTranslate2 sorts them by length), default DEFAULT_BATCH_SIZE;
    `compute_type` is CTranslate2's (default: the stored weights' type; int8, float16, ...).

    Unlike `translate`, a text longer than the model's positions is an error (the export keeps no position count
    to truncate to), naming its line; CTranslate2's other RuntimeErrors come back as ValueErrors."""

    _check_at_least_one(num_beams=num_beams, max_new_tokens=max_new_tokens, batch_size=batch_size)
    try:
        translations = translate_ctranslate2(
            texts, model_dir, num_beams=num_beams, max_new_tokens=max_new_tokens,
            batch_size=batch_size or DEFAULT_BATCH_SIZE, device=device, compute_type=compute_type,
        )
    except RuntimeError as error:  # CTranslate2 reports bad inputs and devices so
        raise ValueError(f"CTranslate2 could not translate: {error}") from error
    return [single_line(text) for text in translations]


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ENGINES",
    "check_compute_type",
    "check_ctranslate2_folder",
    "check_model_folder",
    "encode_sources",
    "length_sorted_batches",
    "load_config",
    "load_translation_model",
    "resolve_device",
    "single_line",
    "translate",
    "translate_with_ctranslate2",
]
