"""The checks `train.py` makes before any data is loaded or file written (`validate_arguments`), beyond what each
argument dataclass checks of itself: the model's rules, by building its configuration (`model_config`, whose
`@strict` validation is the one place each rule lives), the data arguments against the model, the output folder, the
loggers, the optimizer and the Hub. A bad value raises `ConfigurationError`, naming the flag and what would be
accepted."""

from __future__ import annotations

import gc
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import Trainer
from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..data.corpus import MULTI30K_DOWNLOAD
from ..inference.evaluation import METRIC_NAMES
from ..tokenization import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, check_vocab_size, load_tokenizers
from .arguments import (
    CONFIG_FIELDS_OF_FLAG,
    ConfigurationError,
    DataArguments,
    ModelArguments,
    TransformerTrainingArguments,
)
from .schedule import NOAM

logger = logging.getLogger(__name__)


def model_config(model_args: ModelArguments, data_args: DataArguments, tokenizer=None) -> AnnotatedTransformerConfig:
    """The model's configuration: the preset, the flags that override it, and the tokenizer's vocabulary and special
    token ids (without a tokenizer: the one `--vocab_size` will train, whose ids `train_tokenizer` fixes).

    Its `@strict` validation checks every model rule; a violation raises `ConfigurationError` naming the flag(s)."""
    if tokenizer is None:
        vocabulary = dict(vocab_size=data_args.vocab_size, pad_token_id=PAD_TOKEN_ID, bos_token_id=BOS_TOKEN_ID,
                          eos_token_id=EOS_TOKEN_ID)
    else:
        vocabulary = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    try:
        return AnnotatedTransformerConfig.from_preset(
            model_args.preset, decoder_start_token_id=vocabulary["bos_token_id"], **vocabulary,
            **model_args.config_overrides(),
        )
    except (StrictDataclassError, ValueError, TypeError) as error:
        message = str(error.__cause__ or error)
        raise ConfigurationError(f"{_flags_behind(message, model_args, data_args, tokenizer)}: {message}") from None


def _flags_behind(message: str, model_args: ModelArguments, data_args: DataArguments, tokenizer) -> str:
    """The flags (with their values) that set the config fields a validation message names, e.g. "--d_model 66"."""
    fields = set(re.findall(r"[`'](\w+)[`']", message))
    flags = [
        f"--{flag} {getattr(model_args, flag)}"
        for flag, config_fields in CONFIG_FIELDS_OF_FLAG.items()
        if fields & set(config_fields) and getattr(model_args, flag) is not None
    ]
    if fields & {"vocab_size", "src_vocab_size", "pad_token_id", "bos_token_id", "eos_token_id",
                 "decoder_start_token_id"}:
        if tokenizer is not None:
            flags.append(f"--tokenizer_name_or_path {data_args.tokenizer_name_or_path}")
        else:
            flags.append(f"--vocab_size {data_args.vocab_size}")
    return " ".join(flags) or f"--preset {model_args.preset}"  # a value the preset gave, or the preset itself


def check_output_dir(path: str | os.PathLike, flag: str = "--output_dir") -> None:
    """Raise `ConfigurationError` unless `path` is a folder this process can write in, or one it can create."""
    path = Path(path)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigurationError(f"{flag} {path}: {existing} is a file, not a folder")
    try:  # a file made and removed again: os.access says yes to root and to folders like /proc that take no files
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ConfigurationError(f"{flag} {path}: {existing} is not writable ({error.strerror or error})") from None


def _logger_problem(name: str) -> str | None:
    """Why the `--report_to` logger `name` cannot run here (its package is missing), or None: its callback is built
    as the Trainer builds it, unless transformers already lists the logger as installed. A callback half built is
    collected at once, with what its `__del__` then raises kept off stderr."""
    if name in get_available_reporting_integrations():
        return None
    problem = None
    hook, sys.unraisablehook = sys.unraisablehook, lambda unraisable: None
    try:
        INTEGRATION_TO_CALLBACK[name]()
    except (ImportError, RuntimeError, ValueError) as error:
        problem = str(error)
    finally:
        gc.collect()
        sys.unraisablehook = hook
    return problem


def validate_arguments(
    model_args: ModelArguments, data_args: DataArguments, training_args: TransformerTrainingArguments
) -> AnnotatedTransformerConfig:
    """Check every argument before any data is loaded or file written, naming the bad value and what would be
    accepted. Returns the model configuration built from the arguments (with the vocabulary the run will have)."""
    if data_args.data_dir is not None and data_args.dataset_name is not None:
        raise ConfigurationError(
            "give either --data_dir (a local corpus) or --dataset_name (a datasets name), not both"
        )
    if training_args.save_on_each_node and training_args.world_size > 1:
        # transformers 5's save_pretrained writes a model's files on rank 0 only, whatever the Trainer asks
        raise ConfigurationError(
            "--save_on_each_node is not supported: transformers writes a model's weights from rank 0 only, so the "
            "other machines' folders would hold checkpoints without weights; give every machine one shared folder "
            "(a network file system) as --output_dir"
        )
    if data_args.data_dir is not None and not Path(data_args.data_dir).exists():
        raise ConfigurationError(
            f"--data_dir {data_args.data_dir} does not exist (from {Path.cwd()}); get Multi30k into data/multi30k "
            f"with: {MULTI30K_DOWNLOAD} (other corpora: docs/data.md), or leave --data_dir out to train on the copy "
            "task"
        )
    languages = [f"--{name} {value}" for name in ("source_lang", "target_lang")
                 if (value := getattr(data_args, name)) is not None]
    if data_args.synthetic_task and languages:
        raise ConfigurationError(
            f"{' '.join(languages)}: the synthetic {data_args.synthetic_task} task has no languages; give the corpus "
            "with --data_dir or --dataset_name"
        )
    tokenizer = None
    if data_args.tokenizer_name_or_path is not None:
        tokenizer = _given_tokenizer(data_args.tokenizer_name_or_path)
    else:
        try:
            check_vocab_size(data_args.vocab_size, "--vocab_size")
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
    config = model_config(model_args, data_args, tokenizer)
    if data_args.max_length < 1:
        raise ConfigurationError(f"--max_length must be >= 1 token, got {data_args.max_length}")
    if data_args.preprocessing_num_workers is not None and data_args.preprocessing_num_workers < 1:
        raise ConfigurationError(
            f"--preprocessing_num_workers must be at least 1 process, got {data_args.preprocessing_num_workers}")
    if data_args.max_length + 1 > config.max_position_embeddings:
        raise ConfigurationError(
            f"--max_length {data_args.max_length} (+1 for the decoder start token) exceeds the "
            f"{config.max_position_embeddings} positions of the model; lower --max_length or raise "
            "--max_position_embeddings"
        )
    multiple = training_args.pad_to_multiple_of
    if multiple is not None and -(-data_args.max_length // multiple) * multiple > config.max_position_embeddings:
        raise ConfigurationError(
            f"--pad_to_multiple_of {multiple} pads a pair of --max_length {data_args.max_length} tokens to "
            f"{-(-data_args.max_length // multiple) * multiple}, beyond the {config.max_position_embeddings} positions "
            "of the model (the first batch holding such a pair would fail); lower --max_length or "
            "--pad_to_multiple_of, or raise --max_position_embeddings"
        )
    if (training_args.generation_max_length or 0) > config.max_position_embeddings:
        raise ConfigurationError(
            f"--generation_max_length {training_args.generation_max_length} (the decoder start token included) "
            f"exceeds the {config.max_position_embeddings} positions of the model; lower it or raise "
            "--max_position_embeddings"
        )
    for name in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        value = getattr(data_args, name)
        if value is not None and value < 1:
            raise ConfigurationError(f"--{name} must be at least 1 pair, got {value}")
    if training_args.restore_callback_states_from_checkpoint:
        raise ConfigurationError(
            "--restore_callback_states_from_checkpoint: a resumed run always restores its callbacks from the "
            "checkpoint, checking each record; transformers' restoring would rebuild them from their records "
            "unchecked, so leave it out"
        )
    if model_args.label_smoothing > 0 and training_args.label_smoothing_factor > 0:
        raise ConfigurationError(
            f"label smoothing is set twice: --label_smoothing {model_args.label_smoothing} (the model's loss) and "
            f"--label_smoothing_factor {training_args.label_smoothing_factor} (transformers'); set one of them to 0"
        )
    metric = training_args.metric_for_best_model
    if metric is not None and metric.removeprefix("eval_") not in ("loss", *METRIC_NAMES):
        raise ConfigurationError(
            f"--metric_for_best_model {metric} is not an evaluation metric; choose one of {['loss', *METRIC_NAMES]}"
        )
    loggers = training_args.report_to  # a list after transformers' own checks; a string or None before some versions
    loggers = [loggers] if isinstance(loggers, str) else loggers or []
    unknown = [name for name in loggers if name not in ("all", "none", *INTEGRATION_TO_CALLBACK)]
    if unknown:
        raise ConfigurationError(
            f"--report_to {' '.join(unknown)}: not a logger transformers knows; choose from none, all, "
            f"{', '.join(INTEGRATION_TO_CALLBACK)}"
        )
    if len(loggers) > 1 and {"all", "none"} & set(loggers):  # transformers takes either only alone
        raise ConfigurationError(f"--report_to {' '.join(loggers)}: 'all' and 'none' stand alone, not in a list")
    for name in loggers:
        if name not in ("all", "none") and (problem := _logger_problem(name)) is not None:
            raise ConfigurationError(f"--report_to {name}: {problem}")
    try:  # the optimizer's class, as the Trainer picks it: one from a package not installed raises
        Trainer.get_optimizer_cls_and_kwargs(training_args)
    except (ImportError, ValueError) as error:
        if "pass a model" not in str(error) and "pass a `model`" not in str(error):  # GaLore, LOMO: the Trainer's
            optim = getattr(training_args.optim, "value", training_args.optim)  # an OptimizerNames member
            raise ConfigurationError(f"--optim {optim}: {error}") from None
    if training_args.push_to_hub and not training_args.hub_model_id:
        raise ConfigurationError("--push_to_hub needs --hub_model_id (e.g. your-name/transformer-multi30k-de-en)")
    if training_args.push_to_hub:
        try:
            validate_repo_id(training_args.hub_model_id)
        except HFValidationError as error:
            raise ConfigurationError(f"--hub_model_id {training_args.hub_model_id!r}: {error}") from None
    check_output_dir(training_args.output_dir)
    if training_args.lr_scheduler_type != NOAM and training_args.learning_rate > 0.05:
        logger.warning(
            "--learning_rate %s with --lr_scheduler_type %s: that is the Noam factor default; transformers' schedules "
            "take the peak rate (e.g. 5e-4)", training_args.learning_rate, training_args.lr_scheduler_type,
        )
    return config


def _given_tokenizer(path: str):
    if not (Path(path) / "tokenizer.json").is_file():
        raise ConfigurationError(
            f"--tokenizer_name_or_path {path} is not a directory with a tokenizer.json; "
            "leave it out to train a tokenizer on the training data"
        )
    try:
        tokenizer = load_tokenizers(path)
    except Exception as error:  # a damaged tokenizer.json: tokenizers raises a bare Exception
        raise ConfigurationError(f"--tokenizer_name_or_path {path}: cannot load the tokenizer: {error}") from None
    if isinstance(tokenizer, tuple):
        raise ConfigurationError(
            f"--tokenizer_name_or_path {path} holds separate source/target tokenizers, which scripts/train.py does "
            "not support; give a joint tokenizer"
        )
    missing = [name for name in ("pad_token", "bos_token", "eos_token") if getattr(tokenizer, name) is None]
    if missing:
        raise ConfigurationError(
            f"--tokenizer_name_or_path {path} has no {', '.join(missing)}: translation needs padding, a decoder start "
            "token and an end of sentence (scripts/train_tokenizer.py makes such a tokenizer)"
        )
    if tokenizer("a")["input_ids"][-1:] != [tokenizer.eos_token_id]:
        raise ConfigurationError(
            f"--tokenizer_name_or_path {path} does not end encoded text with {tokenizer.eos_token} (its post-processor "
            "adds none): the model would never learn to stop (scripts/train_tokenizer.py makes such a tokenizer)"
        )
    return tokenizer


__all__ = ["check_output_dir", "model_config", "validate_arguments"]
