"""Every option of `scripts/train.py`, parsed and checked: the three argument dataclasses and their checks.

`parse_arguments` reads the command line with `HfArgumentParser` over `ModelArguments`, `DataArguments` and
`TransformerTrainingArguments`, with an optional YAML/JSON file (`--config`) whose values become the defaults that
command-line flags override. `validate_arguments` then checks everything that can be checked before any data is
loaded or any file written; the model's rules are checked by building its configuration (`model_config`), whose
`@strict` validation is the one place each rule lives. A bad value raises `ConfigurationError`, naming the flag.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import re
import signal
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from huggingface_hub.errors import StrictDataclassError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, Trainer, get_scheduler
from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations
from transformers.trainer_utils import IntervalStrategy, SchedulerType

from ..common.command_line import OneLineErrorParser
from ..configuration_annotated_transformer import INIT_SCHEMES, PRESETS, AnnotatedTransformerConfig
from ..data.corpus import SYNTHETIC_TASKS, is_synthetic_task
from ..inference.evaluation import METRIC_NAMES
from ..tokenization import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, check_vocab_size, load_tokenizers
from .schedule import NOAM

logger = logging.getLogger(__name__)

LR_SCHEDULERS = (NOAM, *(scheduler.value for scheduler in SchedulerType))


class ConfigurationError(ValueError):
    """A bad argument or unusable data, found before training starts; the message names the value."""


# ----------------------------------------------------------------------------------------------------------------------
# The arguments
# ----------------------------------------------------------------------------------------------------------------------

# The configuration field(s) each model flag sets.
CONFIG_FIELDS_OF_FLAG = {
    "d_model": ("d_model",),
    "encoder_layers": ("encoder_layers",),
    "decoder_layers": ("decoder_layers",),
    "attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "dropout": ("dropout",),
    "attention_dropout": ("attention_dropout",),
    "activation_dropout": ("activation_dropout",),
    "max_position_embeddings": ("max_position_embeddings",),
    "norm_first": ("norm_first",),
    "tie_word_embeddings": ("tie_word_embeddings",),
    "label_smoothing": ("label_smoothing",),
    "init_scheme": ("init_scheme",),
}


@dataclass
class ModelArguments:
    """The model: a size preset (Table 3) whose values explicit dimensions override."""

    preset: str = field(default="tiny", metadata={"help": f"Model size preset: one of {', '.join(PRESETS)}."})
    d_model: int | None = field(default=None, metadata={"help": "Model width (overrides the preset)."})
    encoder_layers: int | None = field(default=None, metadata={"help": "Encoder layers N (overrides the preset)."})
    decoder_layers: int | None = field(default=None, metadata={"help": "Decoder layers N (overrides the preset)."})
    attention_heads: int | None = field(
        default=None, metadata={"help": "Attention heads h of encoder and decoder (overrides the preset)."}
    )
    ffn_dim: int | None = field(
        default=None, metadata={"help": "Feed-forward inner size d_ff of encoder and decoder (overrides the preset)."}
    )
    dropout: float | None = field(default=None, metadata={"help": "P_drop of §5.4 (overrides the preset)."})
    attention_dropout: float | None = field(default=None, metadata={"help": "Dropout on attention weights."})
    activation_dropout: float | None = field(
        default=None, metadata={"help": "Dropout inside the feed-forward network, after its activation."}
    )
    max_position_embeddings: int | None = field(
        default=None, metadata={"help": "Longest sequence the positional encoding covers (overrides the preset)."}
    )
    norm_first: bool = field(
        default=False, metadata={"help": "Pre-norm x + Sublayer(LayerNorm(x)) instead of the paper's post-norm."}
    )
    tie_word_embeddings: bool = field(
        default=True, metadata={"help": "Share source/target embeddings and the output projection (§3.4)."}
    )
    label_smoothing: float = field(
        default=0.1,
        metadata={
            "help": "epsilon_ls of §5.4, applied by the model's loss (padding excluded). Set 0 to use "
            "--label_smoothing_factor (transformers' LabelSmoother) instead."
        },
    )

    init_scheme: str | None = field(
        default=None,
        metadata={
            "help": f"Weight initialisation: one of {', '.join(INIT_SCHEMES)} (default: "
            f"{AnnotatedTransformerConfig.init_scheme})."
        },
    )

    def config_overrides(self) -> dict:
        """Config fields set explicitly (None = keep the preset's value)."""
        return {
            config_field: getattr(self, flag)
            for flag, config_fields in CONFIG_FIELDS_OF_FLAG.items()
            for config_field in config_fields
            if getattr(self, flag) is not None
        }


@dataclass
class DataArguments:
    """The corpus, its tokenizer and the length filter. With neither --data_dir nor --dataset_name: the copy task."""

    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A local parallel corpus: a directory of {split}.{lang}[.gz] files (e.g. data/multi30k), "
            "of {split}.tsv/.jsonl files, or a DatasetDict saved with save_to_disk."
        },
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": f"A `datasets` name (e.g. wmt14), or a synthetic task: {', '.join(SYNTHETIC_TASKS)}."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset configuration (e.g. de-en)."})
    source_lang: str | None = field(default=None, metadata={"help": "Source language code (e.g. de)."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code (e.g. en)."})
    source_column: str | None = field(default=None, metadata={"help": "Source text column, when not inferable."})
    target_column: str | None = field(default=None, metadata={"help": "Target text column, when not inferable."})
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A tokenizer folder (tokenizer.json); default: train a BPE tokenizer on the training split."},
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of the tokenizer trained here."})
    max_length: int = field(
        default=128, metadata={"help": "Pairs with a side longer than this many tokens are removed (and counted)."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})

    @property
    def synthetic_task(self) -> str | None:
        """The synthetic task trained on (copy without --data_dir or --dataset_name), None for a corpus."""
        if self.data_dir is None and (self.dataset_name is None or is_synthetic_task(self.dataset_name)):
            return self.dataset_name or "copy"
        return None


# Training arguments given as floats: NaN and inf are refused (NaN passes every range check).
FINITE_FLOATS = ("learning_rate", "warmup_steps", "adam_epsilon", "adam_beta1", "adam_beta2", "weight_decay",
                 "max_grad_norm", "num_train_epochs", "label_smoothing_factor")


def check_schedule_arguments(name: str, scheduler_kwargs: dict | None, learning_rate: float) -> None:
    """Build transformers' schedule `name` on a stand-in optimizer with the run's rate, so that one needing arguments
    (cosine_with_min_lr: min_lr; warmup_stable_decay: num_decay_steps) or given bad ones (polynomial: an lr_end above
    the rate) is refused now, not after the data and the tokenizer are ready."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=learning_rate)
    try:
        with warnings.catch_warnings():  # the schedule's own notes are for the run, not for this check
            warnings.simplefilter("ignore")
            get_scheduler(name, optimizer, num_warmup_steps=1, num_training_steps=2,
                          scheduler_specific_kwargs=scheduler_kwargs or {})
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"--lr_scheduler {name}: {error} (give its arguments as JSON: --lr_scheduler_kwargs '{{\"name\": value}}')."
        ) from None


# --torch_compile pads batches to a multiple of this length unless --pad_to_multiple_of says otherwise: torch.compile
# compiles a graph for the first shape and one with dynamic shapes for the second (Inductor one more, past a size its
# kernels specialise on), and the lengths stay few.
COMPILED_LENGTH_MULTIPLE = 8

# What clusters send before they kill a job, and Ctrl-C (`--stop_signals`).
STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")


def stop_signal_names(names) -> list[str]:
    """--stop_signals as signal names ("none" alone: none), checked: each a signal this system has that a process may
    catch (SIGKILL and SIGSTOP cannot be)."""
    names = [names] if isinstance(names, str) else list(names or [])
    if [name.lower() for name in names] == ["none"]:
        return []
    checked = []
    for name in names:
        upper = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
        if upper not in signal.Signals.__members__ or upper in ("SIGKILL", "SIGSTOP"):
            catchable = sorted(s.name for s in signal.Signals if s.name not in ("SIGKILL", "SIGSTOP"))
            raise ValueError(f"--stop_signals: {name!r} is not a signal a process can catch here; give names such as "
                             f"SIGTERM SIGUSR1 SIGINT (here: {', '.join(catchable)}), or none.")
        checked.append(upper)
    return list(dict.fromkeys(checked))


@dataclass
class TransformerTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` plus the schedule choice and token budget, with the paper's defaults (§5.3):
    Adam with beta2 = 0.98 and epsilon = 1e-9, no weight decay, the Noam schedule with 4000 warm-up steps and
    `learning_rate` as its factor (1.0); and this project's: evaluation with `generate` (beam search), the best
    checkpoint chosen on validation BLEU, TensorBoard logging, CPU DDP when there is no GPU.
    """

    lr_scheduler: str = field(
        default=NOAM,
        metadata={
            "help": "The learning-rate schedule: 'noam' (§5.3: lr = learning_rate * d_model^-0.5 * "
            "min(step^-0.5, step * warmup_steps^-1.5), so learning_rate is the Noam factor) or one of "
            "transformers' schedules (then learning_rate is the peak rate): " + ", ".join(LR_SCHEDULERS[1:])
        },
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token-budget batching (§5.1): each process's training batch holds at most this many padded "
            "source tokens and as many padded target tokens (per_device_train_batch_size is then unused)."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None, metadata={"help": "Pad batches to a multiple of this length (8 suits tensor cores; 8 by default "
                                "with --torch_compile, so that few lengths are compiled)."}
    )
    stop_time_hours: float | None = field(
        default=None,
        metadata={
            "help": "Stop training once the run has trained this long, in hours (0.25: 15 minutes), its evaluations "
            "and saves included and counted across resumptions, as fairseq's --stop-time-hours does: checked every "
            "--logging_steps steps and at each epoch end, where training then ends as at its planned end "
            "(--max_steps, or --num_train_epochs): its last step saved and evaluated (one its save interval saved at "
            "an epoch's end stays as saved), the time that stopped it recorded in that checkpoint."
        },
    )
    stop_signals: list[str] = field(
        default_factory=lambda: list(STOP_SIGNALS),
        metadata={
            "help": "Signals that stop training politely (default: SIGTERM SIGUSR1 SIGINT; none: no handler): what "
            "SLURM, Kubernetes and spot instances send before they kill a job, and Ctrl-C. The optimizer step under "
            "way is finished, a complete checkpoint of that step is saved on every process, and the run exits with "
            "status 75 (resume with --resume_from_checkpoint last); a second Ctrl-C aborts at once."
        },
    )
    learning_rate: float = field(
        default=1.0, metadata={"help": "With lr_scheduler=noam the Noam factor (paper: 1.0), otherwise the peak rate."}
    )
    warmup_steps: float = field(
        default=4000, metadata={"help": "Warm-up optimizer steps (a value < 1 is a fraction of the training steps)."}
    )
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (paper: 0.98)."})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (paper: 1e-9)."})
    output_dir: str | None = field(
        default="outputs/transformer", metadata={"help": "Where checkpoints, logs and the final model folder go."}
    )
    eval_strategy: str = field(default="steps", metadata={"help": "When to evaluate: no, steps or epoch."})
    predict_with_generate: bool = field(
        default=True, metadata={"help": "Evaluate by generating translations (BLEU, chrF, exact match)."}
    )
    load_best_model_at_end: bool = field(
        default=True, metadata={"help": "Save the checkpoint with the best --metric_for_best_model as the model."}
    )
    metric_for_best_model: str | None = field(default="bleu", metadata={"help": "Metric that picks the best model."})
    report_to: None | str | list[str] = field(
        default="tensorboard", metadata={"help": "Loggers: tensorboard (logs in output_dir/runs), none, ..."}
    )
    ddp_find_unused_parameters: bool | None = field(
        default=False, metadata={"help": "Every parameter gets a gradient, so DDP need not search for unused ones."}
    )
    cpu_threads: int | None = field(
        default=None,
        metadata={
            "help": "Threads per process when training on a CPU. By default the CPU cores are shared out among this "
            "machine's processes, as `accelerate launch --cpu` does (without --cpu it gives every process 1 thread)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an output_dir that holds an earlier run: once every check has passed, the whole "
            "earlier run is deleted (checkpoints, logs, evaluations), so nothing of it mixes with this run's. A "
            "folder holding no run, or anything a run does not write besides it (notes, a corpus), is refused. "
            "Without it a folder holding a run is refused, unless "
            "--resume_from_checkpoint continues that run."
        },
    )
    auto_mixed_precision: bool = field(
        default=True,
        metadata={
            "help": "On a CUDA GPU, train in bf16 (fp16 where bf16 is missing) unless --bf16/--fp16 (true or false) or "
            "accelerate's --mixed_precision bf16/fp16 chose a precision; on a CPU train in fp32 (--bf16 works there, "
            "--fp16 does not)."
        },
    )
    bf16: bool | None = field(
        default=None,
        metadata={"help": "Train in bf16 mixed precision (true) or not (false); unset: see --auto_mixed_precision."},
    )
    fp16: bool | None = field(
        default=None,
        metadata={"help": "Train in fp16 mixed precision, GPU only (true) or not (false); unset: see "
                  "--auto_mixed_precision."},
    )

    def __post_init__(self):
        if SchedulerType(self.lr_scheduler_type) != SchedulerType.LINEAR:  # transformers' flag, not read here
            raise ValueError(
                f"--lr_scheduler_type {self.lr_scheduler_type} is not read here: choose the schedule with "
                f"--lr_scheduler (noam, the default, or one of transformers': {', '.join(LR_SCHEDULERS[1:])})."
            )
        if not self.predict_with_generate:
            raise ValueError(
                "--predict_with_generate false is not supported: evaluation scores generated translations (BLEU, "
                "chrF), and the best checkpoint is chosen on them; use --eval_strategy no to train without it."
            )
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(f"Unknown --lr_scheduler {self.lr_scheduler!r}; choose one of {list(LR_SCHEDULERS)}.")
        for name in FINITE_FLOATS:  # NaN passes every comparison below; inf fails only mid-training
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"--{name} must be a finite number, got {getattr(self, name)}.")
        if self.lr_scheduler != NOAM:
            self.lr_scheduler_type = self.lr_scheduler
        elif self.warmup_steps <= 0:
            raise ValueError(
                f"--lr_scheduler noam needs --warmup_steps > 0 (the paper uses 4000), got {self.warmup_steps}."
            )
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(
                f"--max_steps must be a positive number of optimizer steps (or -1: train for --num_train_epochs), "
                f"got {self.max_steps}."
            )
        if self.max_steps == -1 and self.num_train_epochs <= 0:
            raise ValueError(
                f"--num_train_epochs must be > 0 when --max_steps is not set, got {self.num_train_epochs}."
            )
        if self.stop_time_hours is not None and not (math.isfinite(self.stop_time_hours) and self.stop_time_hours > 0):
            raise ValueError(f"--stop_time_hours must be a finite number of hours > 0, got {self.stop_time_hours}.")
        self.stop_signals = stop_signal_names(self.stop_signals)
        compiling = self.torch_compile or self.torch_compile_backend is not None or self.torch_compile_mode is not None
        if compiling and self.pad_to_multiple_of is None:
            self.pad_to_multiple_of = COMPILED_LENGTH_MULTIPLE  # a few padded lengths: a few compilations
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"--max_tokens must be a positive number of tokens, got {self.max_tokens}.")
        minimums = {"pad_to_multiple_of": 1, "generation_num_beams": 1, "per_device_eval_batch_size": 1,
                    "gradient_accumulation_steps": 1, "seed": 0,
                    "generation_max_length": 2}  # the decoder start token and one generated token
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if value is not None and value < minimum:
                raise ValueError(f"--{name} must be at least {minimum}, got {value}.")
        for name in ("logging_steps", "save_steps", "eval_steps"):  # steps, or below 1 a fraction of the run
            value, zero = getattr(self, name), name == "eval_steps"  # --eval_steps 0: every --logging_steps
            if value is not None and not (math.isfinite(value) and (value > 0 or zero and value == 0)):
                raise ValueError(
                    f"--{name} must be a finite number {'>=' if zero else '>'} 0 (steps, or below 1 a fraction of the "
                    f"training steps{'; 0: every --logging_steps' if zero else ''}), got {value:g}."
                )
        if self.seed >= 2**32:
            raise ValueError(f"--seed must be below 2**32, got {self.seed}.")
        strategies = [strategy.value for strategy in IntervalStrategy]
        if self.eval_strategy not in strategies:
            raise ValueError(f"Unknown --eval_strategy {self.eval_strategy!r}; choose one of {strategies}.")
        if self.learning_rate < 0:
            raise ValueError(f"--learning_rate must be >= 0, got {self.learning_rate}.")
        for name in ("adam_beta1", "adam_beta2", "label_smoothing_factor"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"--{name} must be in [0, 1), got {getattr(self, name)}.")
        if self.neftune_noise_alpha is not None and not (math.isfinite(self.neftune_noise_alpha)
                                                         and self.neftune_noise_alpha > 0):
            raise ValueError(f"--neftune_noise_alpha must be a finite number > 0, got {self.neftune_noise_alpha}.")
        if self.adam_epsilon < 0:
            raise ValueError(f"--adam_epsilon must be >= 0, got {self.adam_epsilon}.")
        if IntervalStrategy(self.eval_strategy) == IntervalStrategy.NO:
            self.load_best_model_at_end = False  # nothing to choose from without evaluations
        if self.disable_tqdm is None:
            self.disable_tqdm = not sys.stderr.isatty()  # progress bars only for a person at a terminal
        has_gpu = torch.cuda.is_available()
        if not has_gpu and not self.use_cpu:
            # Without it `accelerate launch --num_processes 2` on a CPU machine runs two independent trainings.
            self.use_cpu = True
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"--cpu_threads must be at least 1, got {self.cpu_threads}.")
        launcher_precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if self.use_cpu and (self.fp16 or (launcher_precision == "fp16" and not self.bf16)):
            # accelerate has no fp16 autocast on a CPU: it would train in fp32 while the run claims fp16.
            raise ValueError(
                "fp16 mixed precision needs a GPU (--fp16 or accelerate's --mixed_precision fp16); on a CPU use "
                "--bf16 true or leave the precision out (fp32)."
            )
        automatic = self.auto_mixed_precision and has_gpu and not self.use_cpu
        self.bf16, self.fp16 = mixed_precision(self.bf16, self.fp16, launcher_precision, automatic)
        super().__post_init__()
        if self.lr_scheduler != NOAM:  # after transformers has read --lr_scheduler_kwargs' JSON
            check_schedule_arguments(self.lr_scheduler, self.lr_scheduler_kwargs, self.learning_rate)


def mixed_precision(
    bf16: bool | None, fp16: bool | None, launcher_precision: str, automatic: bool
) -> tuple[bool, bool]:
    """(bf16, fp16) for a run: as --bf16/--fp16 say when either is given (true or false) or accelerate's
    --mixed_precision chose bf16/fp16 (`launcher_precision`); otherwise, when `automatic` (a CUDA GPU and
    --auto_mixed_precision), bf16, or fp16 on a GPU without bf16; otherwise neither (fp32)."""
    if bf16 is not None or fp16 is not None or launcher_precision != "no" or not automatic:
        return bool(bf16), bool(fp16)
    return (True, False) if torch.cuda.is_bf16_supported() else (False, True)


ARGUMENT_CLASSES = (ModelArguments, DataArguments, TransformerTrainingArguments)


# ----------------------------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------------------------


class TrainingArgumentParser(OneLineErrorParser, HfArgumentParser):
    """`HfArgumentParser` over `ARGUMENT_CLASSES` whose own errors (an unknown flag, a value of the wrong type) are
    one line, `train.py: error: ...`, with exit status 2."""


def build_parser() -> TrainingArgumentParser:
    # allow_abbrev=False: a flag is spelled out, so that `_choose_batching` sees which ones the command line gives
    parser = TrainingArgumentParser(ARGUMENT_CLASSES, prog="train.py", allow_abbrev=False)
    parser.add_argument(
        "--config",
        default=None,
        help="A YAML or JSON file of arguments (names as on the command line, without --); flags given on the "
        "command line override its values.",
    )
    return parser


def read_config_file(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"--config {path}: the file does not exist")
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:  # UnicodeDecodeError is a ValueError
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigurationError(f"--config {path} is not valid {kind}: {' '.join(str(error).split())}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigurationError(
            f"--config {path} must hold a mapping of argument names to values, got a {type(values).__name__}"
        )
    return values


def config_value(name: str, value, action: argparse.Action, config_path: Path):
    """A config file's `value` for the flag `name` (parsed by `action`) checked as the command line checks it
    (set_defaults does not): a number for an int or float flag (YAML reads 1e-9 without a dot as a string; 5.5 is no
    integer; true is no number), text for a text flag or one of named choices. Lists and mappings go to the
    dataclasses' own checks."""
    converter = action.type
    if value is None or isinstance(value, (list, dict)):
        return value
    takes_text = converter is str or (action.choices is not None
                                      and all(isinstance(choice, str) for choice in action.choices))
    if takes_text and isinstance(value, bool):  # YAML 1.1: unquoted no/yes/off/on/false/true
        raise ConfigurationError(
            f"{name}: {value!r} in {config_path} is YAML's boolean (from an unquoted no, yes, off, on, false or "
            f"true), but {name} takes text: write the text you meant in quotes"
        )
    if converter is str:
        return value if isinstance(value, str) else str(value)
    if converter not in (int, float):
        return value
    kind = "an integer" if converter is int else "a number"
    if isinstance(value, bool) or (converter is int and isinstance(value, float) and not value.is_integer()):
        raise ConfigurationError(f"{name}: {value!r} in {config_path} is not {kind}")
    try:
        return converter(value)
    except ValueError:
        raise ConfigurationError(f"{name}: {value!r} in {config_path} is not {kind}") from None


def parse_arguments(
    argv: Sequence[str] | None = None, default_config: str | os.PathLike | None = None
) -> tuple[ModelArguments, DataArguments, TransformerTrainingArguments, Path | None]:
    """Parse `argv` (default: sys.argv[1:]) with the values of `--config` (else `default_config`) as defaults.

    Returns the three argument dataclasses and the config file used (None if none). A bad value in the file or a
    check of the dataclasses raises `ConfigurationError`; argparse's own errors exit with status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", default=None)
    known, _ = config_parser.parse_known_args(argv)
    config_path = Path(known.config) if known.config else (Path(default_config) if default_config else None)
    if config_path is not None:
        values = read_config_file(config_path)
        actions = {action.dest: action for action in parser._actions}
        if "config" in values:
            raise ConfigurationError(
                f"config: {values['config']!r} in {config_path}: a config file cannot name another; give the one "
                "to use with --config"
            )
        unknown = sorted(set(values) - set(actions))
        if unknown:
            raise ConfigurationError(
                f"unknown argument(s) {unknown} in {config_path}; arguments are the command-line flags without "
                "'--' (see scripts/train.py --help)"
            )
        for name, value in values.items():
            values[name] = config_value(name, value, actions[name], config_path)
        parser.set_defaults(**values)
    try:
        *outputs, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ValueError as error:  # raised by the dataclasses' __post_init__ checks
        raise ConfigurationError(str(error)) from error
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    model_args, data_args, training_args = outputs[:3]
    _choose_batching(training_args, argv, values if config_path is not None else {})
    return model_args, data_args, training_args, config_path


def given_values(argv: Sequence[str], *names: str) -> dict:
    """The values the command line gives the flags of these argument names ({name: value}, without the ones it
    leaves out), under any spelling the parser takes (`--data_dir`, `--data-dir`, `--data_dir=...`)."""
    spellings = {action.dest: action.option_strings for action in build_parser()._actions if action.dest in names}
    parser = _QuietParser(add_help=False, allow_abbrev=False)
    for name in names:
        parser.add_argument(*spellings[name], dest=name, default=None)
    try:
        given, _ = parser.parse_known_args(list(argv))
    except ValueError:  # a flag without its value: the full parser says so in its one line (or shows --help)
        return {}
    return {name: value for name, value in vars(given).items() if value is not None}


class _QuietParser(argparse.ArgumentParser):
    """A parser that raises its errors (ValueError) instead of printing them and exiting."""

    def error(self, message):
        raise ValueError(message)


def defaults_file(argv: Sequence[str], copy_task_config: str | os.PathLike) -> Path | None:
    """The file whose values are a run's defaults where it gives no --config: the copy task's for a run on a
    synthetic task (no corpus named), none for a run on a corpus (--data_dir, or a --dataset_name that is not a
    synthetic task), which takes the flags' own defaults (`--help --data_dir DIR` shows them), not the copy task's
    270-entry vocabulary, 32-token --max_length and tiny preset."""
    given = given_values(argv, "data_dir", "dataset_name")
    corpus = "data_dir" in given or ("dataset_name" in given and not is_synthetic_task(given["dataset_name"]))
    return None if corpus else Path(copy_task_config)


def _choose_batching(training_args, argv: Sequence[str], config_values: dict) -> None:
    """One training batch rule: token budgets (--max_tokens) or a fixed number of pairs (--per_device_train_batch_size).
    Either on the command line overrides the other from a config file, as every flag overrides the file; both given
    in one place (the command line, or the file without the command line's choice) are refused: the batch size would
    be ignored."""
    given = given_values(argv, "per_device_train_batch_size", "max_tokens")
    batch_size = "--per_device_train_batch_size"
    if "per_device_train_batch_size" in given and "max_tokens" not in given:
        training_args.max_tokens = None
    elif "per_device_train_batch_size" in given or (
        "per_device_train_batch_size" in config_values and config_values.get("max_tokens") is not None
        and "max_tokens" not in given
    ):
        raise ConfigurationError(
            f"{batch_size} and --max_tokens both set the training batch; token-budget batches (--max_tokens) ignore "
            "a batch size: give one of them"
        )


# ----------------------------------------------------------------------------------------------------------------------
# Checks that run before anything is loaded or written
# ----------------------------------------------------------------------------------------------------------------------


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
    if data_args.data_dir is not None and not Path(data_args.data_dir).exists():
        raise ConfigurationError(
            f"--data_dir {data_args.data_dir} does not exist (from {Path.cwd()}); give a directory of "
            "{split}.{lang} files such as data/multi30k, or leave it out to train on the copy task"
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
    if training_args.lr_scheduler != NOAM and training_args.learning_rate > 0.05:
        logger.warning(
            "--learning_rate %s with --lr_scheduler %s: that is the Noam factor default; transformers' schedules "
            "take the peak rate (e.g. 5e-4)", training_args.learning_rate, training_args.lr_scheduler,
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


__all__ = [
    "ARGUMENT_CLASSES",
    "LR_SCHEDULERS",
    "ConfigurationError",
    "DataArguments",
    "ModelArguments",
    "TransformerTrainingArguments",
    "build_parser",
    "check_output_dir",
    "defaults_file",
    "mixed_precision",
    "model_config",
    "parse_arguments",
    "read_config_file",
    "validate_arguments",
]
