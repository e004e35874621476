"""`Seq2SeqTrainer` with the paper's training choices: the Noam schedule (§5.3) and token-budget batches (§5.1).

Everything else (optimizer, DDP/FSDP through accelerate, mixed precision, gradient accumulation, checkpoints,
resume, evaluation with `generate`, logging) is the Trainer's own.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import partial

import psutil
import torch
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_utils import IntervalStrategy, SchedulerType, seed_worker

from .batching import TokenBudgetBatchSampler, token_lengths
from .schedule import NOAM, get_noam_schedule

LR_SCHEDULERS = (NOAM, *(scheduler.value for scheduler in SchedulerType))


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
        default=None, metadata={"help": "Pad batches to a multiple of this length (8 suits tensor cores)."}
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
            "help": "Train into an output_dir that holds an earlier run: its checkpoint-* folders are deleted first "
            "(they would mix with this run's), its other files replaced. Without it such a folder is refused, "
            "unless --resume_from_checkpoint continues that run."
        },
    )
    auto_mixed_precision: bool = field(
        default=True,
        metadata={
            "help": "On a CUDA GPU, train in bf16 (fp16 where bf16 is missing) unless --bf16/--fp16 or accelerate's "
            "--mixed_precision chose a precision; on a CPU train in fp32 (--bf16 works there, --fp16 does not)."
        },
    )

    def __post_init__(self):
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(f"Unknown --lr_scheduler {self.lr_scheduler!r}; choose one of {list(LR_SCHEDULERS)}.")
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
            raise ValueError(f"--num_train_epochs must be > 0 when --max_steps is not set, got {self.num_train_epochs}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"--max_tokens must be a positive number of tokens, got {self.max_tokens}.")
        if IntervalStrategy(self.eval_strategy) == IntervalStrategy.NO:
            self.load_best_model_at_end = False  # nothing to choose from without evaluations
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
        precision_chosen = self.bf16 or self.fp16 or launcher_precision != "no"
        if self.auto_mixed_precision and has_gpu and not self.use_cpu and not precision_chosen:
            if torch.cuda.is_bf16_supported():
                self.bf16 = True
            else:
                self.fp16 = True
        super().__post_init__()


def cpu_threads_per_process() -> int:
    """The CPU cores this process may use divided by the processes on this machine (what `accelerate launch --cpu`
    sets) where `accelerate launch` left its default of 1 thread (OMP_NUM_THREADS=1, as it sets without --cpu);
    otherwise the threads torch has now (its default, or the OMP_NUM_THREADS a user chose)."""
    launched_by_accelerate = "ACCELERATE_MIXED_PRECISION" in os.environ
    if not launched_by_accelerate or os.environ.get("OMP_NUM_THREADS") != "1":
        return torch.get_num_threads()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cores = min(psutil.cpu_count(logical=False) or usable, usable)
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


class _SetSamplerEpoch(TrainerCallback):
    """Give the token-budget sampler the epoch before the Trainer iterates it.

    The Trainer sets the epoch on the sampler itself, except in the epoch it resumes in, where it wraps the
    dataloader to skip the batches already seen and the wrapper does not pass `set_epoch` on. Without this the
    resumed epoch would replay epoch 0's batch order.
    """

    def __init__(self, sampler: TokenBudgetBatchSampler):
        self.sampler = sampler

    def on_epoch_begin(self, args, state, control, **kwargs):
        # At an epoch's start `state.epoch` is the number of epochs done, plus the fraction of the resumed one.
        self.sampler.set_epoch(math.floor(state.epoch or 0))


class TransformerSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` that builds the Noam schedule when `args.lr_scheduler == "noam"` and, when `args.max_tokens`
    is set, batches the training set by token budget with `TokenBudgetBatchSampler`."""

    args: TransformerTrainingArguments

    @property
    def precision(self) -> str:
        """What the training steps compute in, as accelerate set it up (--bf16/--fp16 or accelerate's config)."""
        return {"no": "fp32"}.get(self.accelerator.mixed_precision, self.accelerator.mixed_precision)

    @property
    def run_description(self) -> str:
        """How this run computes, e.g. "2 process(es) on cpu (MULTI_CPU, fp32, 1 thread(s))"."""
        details = [self.accelerator.distributed_type.value, self.precision]
        if self.args.use_cpu:
            details.append(f"{torch.get_num_threads()} thread(s)")
        return f"{self.args.world_size} process(es) on {self.args.device.type} ({', '.join(details)})"

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if getattr(self.args, "lr_scheduler", None) != NOAM:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            warmup_steps = self.args.get_warmup_steps(num_training_steps)
            self.lr_scheduler = get_noam_schedule(
                optimizer if optimizer is not None else self.optimizer,
                d_model=self.accelerator.unwrap_model(self.model).config.d_model,
                warmup_steps=warmup_steps,
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def token_budget_sampler(self, dataset) -> TokenBudgetBatchSampler:
        """The training batches of every process; accelerate hands batch i to process i % num_processes."""
        source_lengths, target_lengths = token_lengths(dataset)
        return TokenBudgetBatchSampler(
            source_lengths,
            target_lengths,
            self.args.max_tokens,
            shuffle=True,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=self.args.world_size,
            rank=None,
            pad_to_multiple_of=self.args.pad_to_multiple_of,
        )

    def get_train_dataloader(self) -> DataLoader:
        if getattr(self.args, "max_tokens", None) is None:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        sampler = self.token_budget_sampler(dataset)
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, _SetSamplerEpoch):
                callback.sampler = sampler
                break
        else:
            self.add_callback(_SetSamplerEpoch(sampler))
        dataloader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0,
            prefetch_factor=self.args.dataloader_prefetch_factor,
            worker_init_fn=partial(
                seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
            ),
        )
        # accelerate wraps the batch sampler in `BatchSamplerShard`: batch i goes to process i % num_processes,
        # and the sampler made the batch count a multiple of the number of processes, so none is duplicated.
        return self.accelerator.prepare(dataloader)


__all__ = ["LR_SCHEDULERS", "cpu_threads_per_process", "TransformerSeq2SeqTrainer", "TransformerTrainingArguments"]
