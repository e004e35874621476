"""Every option of `scripts/train.py`: the three argument dataclasses, each checking what it alone can of itself.

`ModelArguments` (the size preset and the dimensions that override it), `DataArguments` (the corpus, its tokenizer
and the length filter) and `TransformerTrainingArguments` (transformers' `Seq2SeqTrainingArguments` with the paper's
defaults, the schedule, the token budget, the time limit and the stop signals). The command line and config files
are read by `argument_parsing`; the checks that need more than one dataclass, the model's rules or the file system
are in `argument_checks`. A bad value raises ValueError naming the flag (`ConfigurationError` once parsed).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import warnings
from dataclasses import dataclass, field
from datetime import timedelta

import torch
from transformers import Seq2SeqTrainingArguments, get_scheduler
from transformers.trainer_utils import IntervalStrategy, SchedulerType

from ..configuration_annotated_transformer import INIT_SCHEMES, POSITION_EMBEDDING_TYPES, PRESETS, AnnotatedTransformerConfig
from ..data.corpus import SYNTHETIC_TASKS, is_synthetic_task
from .schedule import NOAM

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
    "d_k": ("d_k",),
    "d_v": ("d_v",),
    "position_embedding_type": ("position_embedding_type",),
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
    d_k: int | None = field(
        default=None, metadata={"help": "Each head's query and key size d_k (§3.2.2; default d_model / heads)."}
    )
    d_v: int | None = field(
        default=None, metadata={"help": "Each head's value size d_v (§3.2.2; default d_model / heads)."}
    )
    position_embedding_type: str | None = field(
        default=None,
        metadata={"help": f"Positions: one of {', '.join(POSITION_EMBEDDING_TYPES)} (default: "
                  f"{AnnotatedTransformerConfig.position_embedding_type}; learned: Table 3's row (E))."},
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
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={"help": "Processes that tokenize the corpus (datasets' map with num_proc; default: the training "
                  "process alone). Each writes its share to the datasets cache, as one process does."},
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
            f"--lr_scheduler_type {name}: {error} (give its arguments as JSON: --lr_scheduler_kwargs "
            "'{\"name\": value}')."
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
    """`Seq2SeqTrainingArguments` plus the token budget, the time limit and the stop signals, with the paper's
    defaults (§5.3): Adam with beta2 = 0.98 and epsilon = 1e-9, no weight decay, the Noam schedule (one more name
    for `lr_scheduler_type`) with 4000 warm-up steps and `learning_rate` as its factor (1.0); and this project's:
    evaluation with `generate` (beam search), the best checkpoint chosen on validation BLEU, TensorBoard logging,
    CPU DDP when there is no GPU. What transformers checks of its own fields it checks; only the rest is checked
    here.
    """

    lr_scheduler_type: str = field(
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
            "source tokens and as many padded target tokens. Either this or --per_device_train_batch_size; on the "
            "command line either replaces the other from a config file."
        },
    )
    per_device_train_batch_size: int | None = field(
        default=None,
        metadata={"help": "Batches of this many pairs per process (default 8 without --max_tokens)."},
    )
    packing: bool = field(
        default=False,
        metadata={
            "help": "Packed training batches (with --max_tokens): whole pairs end to end in rows of one fixed grid "
            "per side (max_tokens / row length rows, each as long as the longest pair), attention kept within each "
            "pair: one batch shape for the whole run, so --torch_compile compiles one graph, and no padding between "
            "pairs. Evaluation batches stay padded."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None, metadata={"help": "Pad batches to a multiple of this length (8 suits tensor cores; 8 by default "
                                "with --torch_compile, so that few lengths are compiled)."}
    )
    stop_time_hours: float | None = field(
        default=None,
        metadata={
            "help": "Stop training once the run has trained this long, in hours (0.25 for a quarter of an hour), its evaluations "
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
        default=1.0,
        metadata={"help": "With lr_scheduler_type noam the Noam factor (paper: 1.0), otherwise the peak rate."}
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
    ddp_timeout: int = field(
        default=600,
        metadata={
            "help": "Seconds a collective of several processes waits for the others (transformers' default: 1800): a "
            "process that stops answering without dying (a frozen machine) stops the run after this long, with a "
            "line naming it. Waits for the first process's data preparation and final writes are not bound by it."
        },
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

    def _start_cpu_process_group(self) -> None:
        """Several processes on CPUs: start gloo's process group with --ddp_timeout. transformers hands the timeout to
        accelerate for GPUs only, and on CPUs a collective then waited torch's default of 30 minutes for a process
        that stopped answering, whatever --ddp_timeout said; accelerate uses a group that already exists."""
        several = int(os.environ.get("WORLD_SIZE", "1")) > 1 and "MASTER_ADDR" in os.environ
        if not (self.use_cpu and several and torch.distributed.is_available()) or torch.distributed.is_initialized():
            return
        if self.ddp_backend not in (None, "gloo"):
            return  # ccl, mpi: accelerate's to start
        torch.distributed.init_process_group("gloo", timeout=timedelta(seconds=self.ddp_timeout))

    def __post_init__(self):
        if not self.predict_with_generate:
            raise ValueError(
                "--predict_with_generate false is not supported: evaluation scores generated translations (BLEU, "
                "chrF), and the best checkpoint is chosen on them; use --eval_strategy no to train without it."
            )
        schedule = getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)
        if schedule not in LR_SCHEDULERS:
            raise ValueError(f"Unknown --lr_scheduler_type {schedule!r}; choose one of {list(LR_SCHEDULERS)}.")
        if self.per_device_train_batch_size is not None and self.max_tokens is not None:
            raise ValueError(
                "--per_device_train_batch_size and --max_tokens both set the training batch; token-budget batches "
                "(--max_tokens) ignore a batch size: give one of them"
            )
        if self.packing and self.max_tokens is None:
            raise ValueError("--packing fills a token budget with pairs: give --max_tokens (a config's value is "
                             "replaced by --per_device_train_batch_size on the command line).")
        if self.per_device_train_batch_size is None:
            self.per_device_train_batch_size = 8  # transformers' default, unused under a token budget
        for name in FINITE_FLOATS:  # NaN passes every comparison below; inf fails only mid-training
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"--{name} must be a finite number, got {getattr(self, name)}.")
        if schedule == NOAM and self.warmup_steps <= 0:
            raise ValueError(
                f"--lr_scheduler_type noam needs --warmup_steps > 0 (the paper uses 4000), got {self.warmup_steps}."
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
        if self.eval_strategy == IntervalStrategy.NO:
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
        if not (isinstance(self.ddp_timeout, int) and self.ddp_timeout > 0):
            raise ValueError(f"--ddp_timeout must be a positive number of seconds, got {self.ddp_timeout}.")
        self._start_cpu_process_group()
        if schedule == NOAM:  # not one of transformers' names: it checks a schedule that needs nothing instead
            self.lr_scheduler_type = SchedulerType.CONSTANT
        super().__post_init__()
        if schedule == NOAM:
            self.lr_scheduler_type = NOAM  # built by `TransformerSeq2SeqTrainer.create_scheduler`
        else:  # after transformers has read --lr_scheduler_kwargs' JSON
            check_schedule_arguments(schedule, self.lr_scheduler_kwargs, self.learning_rate)


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


__all__ = [
    "ARGUMENT_CLASSES",
    "CONFIG_FIELDS_OF_FLAG",
    "LR_SCHEDULERS",
    "ConfigurationError",
    "DataArguments",
    "ModelArguments",
    "TransformerTrainingArguments",
    "mixed_precision",
]
