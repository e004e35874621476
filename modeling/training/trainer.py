"""`Seq2SeqTrainer` with the paper's training choices: the Noam schedule (§5.3) and token-budget batches (§5.1),
padded or packed (`--packing`).

Everything else (optimizer, DDP/FSDP through accelerate, mixed precision, gradient accumulation, checkpoints,
resume, evaluation with `generate`, logging) is the Trainer's own. Its arguments are `TransformerTrainingArguments`
(in `modeling.training.arguments`).
"""

from __future__ import annotations

import contextlib
import copy
import random
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints, seed_worker

from ..common.hardware import describe_run
from ..data.batch_cache import cached_token_budget_sampler
from ..data.batching import TokenBudgetBatchSampler, token_lengths
from ..data.packing import DataCollatorForPackedSeq2Seq, PackedBatchSampler
from ..input_checks import check_token_ids
from .arguments import TransformerTrainingArguments
from .callbacks import StopSignals, _SetSamplerEpoch
from .checkpoints import checkpoint_problem
from .schedule import NOAM, get_noam_schedule
from .world import World, lost_peer_error_in


def token_budget_sampler(dataset, args: TransformerTrainingArguments) -> TokenBudgetBatchSampler:
    """The training batches of every process under `args.max_tokens`, padded or, with `args.packing`, packed
    (accelerate hands batch i to process i % num_processes). Raises ValueError when a pair alone exceeds the budget."""
    settings = dict(shuffle=True, seed=args.data_seed if args.data_seed is not None else args.seed,
                    num_replicas=args.world_size, rank=None, pad_to_multiple_of=args.pad_to_multiple_of)
    if args.packing:
        return PackedBatchSampler(*token_lengths(dataset), args.max_tokens, **settings)
    return cached_token_budget_sampler(dataset, args.max_tokens, **settings)  # kept beside the tokens in their cache


@contextlib.contextmanager
def random_states_kept():
    """Within: draw from Python's, numpy's, torch's CPU and the current CUDA device's global generators as you like;
    on exit each is back where it was. Evaluation runs inside, so it never changes training's random stream: not
    the draw every DataLoader iteration makes for its workers' seeds, nor a draw only a process's first evaluation
    makes (a lazily loaded metric, a one-time probe), which a resumed process would make at another step than the
    uninterrupted run, and training with or without evaluation, or evaluating more often, gives the same weights."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the optimizer step."""


class TokenIdsChecked:
    """A data collator whose batches' token ids are checked where they are made, on the host (one line naming the
    bad id, as the model's own check does): a compiled model checks nothing inside its graph, which would cost a
    device sync, or a graph break, per batch (`input_checks.check_token_ids`)."""

    def __init__(self, collator, config):
        self.collator, self.config = collator, config

    def __call__(self, features):
        batch = self.collator(features)
        labels = batch.get("labels")
        check_token_ids(
            (batch.get("input_ids"), self.config.src_vocab_size, "input_ids"),
            (None if labels is None else labels.masked_fill(labels == -100, 0), self.config.vocab_size, "labels"),
            (batch.get("decoder_input_ids"), self.config.vocab_size, "decoder_input_ids"),
        )
        return batch


class CheckpointSaveError(RuntimeError):
    """Saving a checkpoint failed; the message names the folder and the error."""


class TransformerSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` that builds the Noam schedule when `args.lr_scheduler_type == "noam"` and, when
    `args.max_tokens` is set, batches the training set by token budget with `TokenBudgetBatchSampler` (with
    `args.packing`, packed with `PackedBatchSampler` and `DataCollatorForPackedSeq2Seq`)."""

    args: TransformerTrainingArguments

    def __init__(self, *args, train_batch_sampler: TokenBudgetBatchSampler | None = None, **kwargs):
        """`train_batch_sampler`: the batches of `train_dataset` under --max_tokens, when the caller built them
        already (`token_budget_sampler`; a large corpus takes seconds to index); otherwise they are built here."""
        super().__init__(*args, **kwargs)
        self.train_batch_sampler = train_batch_sampler
        base = getattr(self.accelerator.unwrap_model(self.model), "model", None)
        if self.is_fsdp_enabled and hasattr(base, "embed_with_the_shared_module"):
            base.embed_with_the_shared_module()  # one module holds the tied embedding matrix: FSDP2 shards it once

    @property
    def precision(self) -> str:
        """What the training steps compute in, as accelerate set it up (--bf16/--fp16 or accelerate's config)."""
        return {"no": "fp32"}.get(self.accelerator.mixed_precision, self.accelerator.mixed_precision)

    @property
    def run_description(self) -> str:
        """How this run computes, in a user's words, e.g. "2 processes on the CPU (DDP, fp32, 1 thread each)"."""
        return describe_run(self.args.world_size, self.args.device.type, self.accelerator.distributed_type.value,
                            self.precision, torch.get_num_threads() if self.args.use_cpu else None,
                            World.from_environment().machines)

    @property
    def stop_signals(self) -> StopSignals | None:
        """The run's `--stop_signals` handler, if it has one."""
        return next((callback for callback in self.callback_handler.callbacks if isinstance(callback, StopSignals)),
                    None)

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's save (a private method: transformers has no hook before a save, nor one for a save that
        failed; docs/architecture.md lists it, and a test pins its signature), with what a resumed stop and a failed
        write need:
        - the launch that resumed a stop's checkpoint off the save schedule removes it before its first save
          rotates any, so the folder keeps the checkpoints of an uninterrupted run (`StopSignals`);
        - a save that fails (a full disk, a failing write) raises `CheckpointSaveError`, one line naming the folder
          and the error, after removing what it wrote: the earlier checkpoints are left as they were, and
          `--resume_from_checkpoint last` takes the newest of them; one that fails because another process was
          lost raises that failure, which the run reports (`ProcessLost`), and leaves the folder as it is (another
          process may still be writing it; the next launch skips it while it is incomplete);
        - with several processes, old checkpoints are rotated only once every process has written its part of the
          new one and it is complete, so `save_total_limit` never leaves the run without a complete checkpoint."""
        stop = self.stop_signals
        folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if stop is not None and stop.resumed_stop is not None and self.args.should_save:
            stopped_at = folder.with_name(f"{PREFIX_CHECKPOINT_DIR}-{stop.resumed_stop}")
            if stop.resumed_stop < self.state.global_step and stopped_at.is_dir():
                shutil.rmtree(stopped_at)
            stop.resumed_stop = None
        existed = folder.exists()
        # With several processes the Trainer would rotate old checkpoints on rank 0 as soon as its own part is
        # written, before the others' random states: a loss in that window could leave no complete checkpoint. So
        # it rotates here instead, once every process has written its part and the new checkpoint is complete.
        limit, several = self.args.save_total_limit, self.args.world_size > 1
        try:
            if several:
                self.args.save_total_limit = None
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self.args.save_total_limit = limit
            if several and limit:
                torch.distributed.barrier()  # every process's part written (bounded by --ddp_timeout)
                if self.args.should_save and checkpoint_problem(folder) is None:
                    rotate_checkpoints(output_dir=str(folder.parent), save_total_limit=limit,
                                       best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
        except Exception as error:
            if lost_peer_error_in(error) is not None:  # another process was lost during the save: the run says so,
                raise  # and leaves the folder, which a live process may still write, for the next launch to judge
            if self.args.should_save and not existed and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
            raise CheckpointSaveError(
                f"saving {folder} failed ({type(error).__name__}: {' '.join(str(error).split())}); the run stopped "
                "there, its earlier checkpoints as they were: make room, then resume with --resume_from_checkpoint "
                "last"
            ) from error

    def training_step(self, model, inputs, num_items_in_batch=None):
        """One forward/backward; a NaN or infinite loss stops the run before the optimizer applies its gradients, so
        no checkpoint ever holds NaN weights. (The Trainer itself reads each step's loss too, for its NaN filter.)"""
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"the training loss is {loss.item()} at optimizer step {self.state.global_step + 1}: training stopped "
                "before that update, so the saved checkpoints hold finite weights; lower --learning_rate, raise "
                "--warmup_steps or train in fp32, then resume with --resume_from_checkpoint last"
            )
        return loss

    def evaluate(self, *args, **kwargs):
        """The Trainer's evaluation, leaving every global random generator as it found it (`random_states_kept`)."""
        with random_states_kept():
            return super().evaluate(*args, **kwargs)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        """Seq2SeqTrainer's step, without its side effect on the model: it fills every unset generation setting
        with a default (max_length 20, ...), which the next save would write, and a saved max_length makes every
        later `generate(max_new_tokens=...)` warn that both are set."""
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.args.lr_scheduler_type != NOAM:
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

    def get_total_train_batch_size(self, args) -> int:
        """Pairs per optimizer step, for the Trainer's samples/s: under --max_tokens a batch holds the pairs that fit
        the budget (their mean over an epoch's batches), not --per_device_train_batch_size."""
        sampler = getattr(self, "_token_budget_sampler", None)  # set by get_train_dataloader, which runs first
        if getattr(args, "max_tokens", None) is None or sampler is None:
            return super().get_total_train_batch_size(args)
        pairs_per_batch = len(sampler.padded_source_lengths) / len(sampler.batches)
        return max(1, round(pairs_per_batch * args.gradient_accumulation_steps * args.world_size))

    def packed_collator(self, sampler: PackedBatchSampler):
        """The training batches' collator under --packing: the sampler's grid, the model's pad and decoder start
        ids; its ids checked on the host where the run's collator checks them (--torch_compile)."""
        config = self.accelerator.unwrap_model(self.model).config
        collator = DataCollatorForPackedSeq2Seq(sampler.rows, sampler.row_length, config.pad_token_id,
                                                config.decoder_start_token_id)
        return TokenIdsChecked(collator, config) if isinstance(self.data_collator, TokenIdsChecked) else collator

    # called with each training batch made, in the training process (`world.Heartbeats.batch_made`: a process stuck
    # before its next batch, in a read, stays behind there while its heartbeat goes on)
    batch_made = None

    def get_train_dataloader(self) -> DataLoader:
        if getattr(self.args, "max_tokens", None) is None:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        sampler = self.train_batch_sampler or token_budget_sampler(dataset, self.args)
        self._token_budget_sampler = sampler
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, _SetSamplerEpoch):
                callback.sampler = sampler
                break
        else:
            self.add_callback(_SetSamplerEpoch(sampler))
        packed = isinstance(sampler, PackedBatchSampler)
        collate = self.packed_collator(sampler) if packed else self.data_collator
        if self.batch_made is not None and self.args.dataloader_num_workers == 0:
            collate = _Counted(collate, self.batch_made)
        dataloader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
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


class _Counted:
    """A collator that calls `made()` after each batch it makes."""

    def __init__(self, collate, made):
        self.collate, self.made = collate, made

    def __call__(self, features):
        batch = self.collate(features)
        self.made()
        return batch


__all__ = [
    "CheckpointSaveError",
    "TokenIdsChecked",
    "NonFiniteLossError",
    "TransformerSeq2SeqTrainer",
    "random_states_kept",
    "token_budget_sampler",
]
