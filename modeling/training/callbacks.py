"""The training run's callbacks: the sampler's epoch (`_SetSamplerEpoch`), the records every checkpoint keeps and a
resumed run goes on from (`TrainingClock`, `CheckpointSchedule`, `EpochBatches`, `LaunchHistory`) and the stop-time
limit (`StopTime`)."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy, SaveStrategy

from ..common.file_writes import replace_text
from ..data.batching import TokenBudgetBatchSampler, lengths_digest, token_lengths
from .arguments import TransformerTrainingArguments
from .checkpoints import TRAINER_STATE_NAME, callback_record, json_object


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


class RecordedInCheckpoints(TrainerCallback, ExportableState):
    """A callback whose `state()` every checkpoint keeps in its trainer_state.json (`stateful_callbacks`), and that a
    resumed run builds again from that record (`from_checkpoint`, each subclass's own)."""

    @classmethod
    def saved_args(cls, checkpoint: str | os.PathLike | None) -> dict:
        """The arguments `checkpoint` recorded for this callback ({} without a checkpoint or a record in it)."""
        if checkpoint is None:
            return {}
        return callback_record(json_object(Path(checkpoint) / TRAINER_STATE_NAME), cls.__name__)

    def on_step_end(self, args, state, control, **kwargs):
        # A checkpoint saved before this callback existed has no record of it, and the Trainer's save looks one up
        # (a KeyError) in the state it loaded from there, which replaces the state on_train_begin saw.
        if type(self).__name__ not in state.stateful_callbacks:
            state.stateful_callbacks[type(self).__name__] = self.state()


class TrainingClock(RecordedInCheckpoints):
    """The training time of a run across its resumptions: the Trainer's `train_runtime` covers only the current
    launch. Every checkpoint records the seconds trained up to its save, and a resumed run starts from them; time
    spent after a checkpoint that a crash discarded is not counted, as its steps are trained again."""

    def __init__(self, seconds_before: float = 0.0):
        self.seconds_before = seconds_before  # trained before this launch
        self._started = time.time()  # reset when training begins

    @classmethod
    def from_checkpoint(cls, checkpoint: str | os.PathLike | None) -> "TrainingClock":
        """A clock going on from `checkpoint`'s record (from 0 without a checkpoint or a record in it)."""
        seconds = cls.saved_args(checkpoint).get("seconds_before")
        return cls(float(seconds) if isinstance(seconds, (int, float)) else 0.0)

    def on_train_begin(self, args, state, control, **kwargs):
        self._started = time.time()

    def on_train_end(self, args, state, control, **kwargs):
        # The run's own trainer_state.json, saved after training, records the whole time trained, not its newest
        # checkpoint's (saving only the best, a run --stop_time_hours stopped may have saved none at its end).
        state.stateful_callbacks[type(self).__name__] = self.state()

    def seconds(self) -> float:
        """The run's training time so far, this launch's included."""
        return self.seconds_before + time.time() - self._started

    def state(self) -> dict:
        return {"args": {"seconds_before": self.seconds()}, "attributes": {}}


def first_process_flag(flag: bool) -> bool:
    """The first process's `flag` on every process (each process reads its own clock: were they to stop at different
    steps, the others would wait for it in their next collective, for ever)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else "cpu"
    decision = torch.tensor([int(flag)], device=device)
    torch.distributed.broadcast(decision, src=0)
    return bool(decision.item())


class StopTime(TrainerCallback):
    """--stop_time_hours: training ends once the run's training time (`TrainingClock`, across resumptions) reaches
    the limit. Checked every `logging_steps` steps, where the Trainer reads the loss back anyway when it logs by
    steps (on a GPU, a check at every step would wait for each step to finish), and at each epoch end. Training then
    ends as at its planned end: saving by steps, the step is saved and, evaluating by steps, evaluated (a step its
    save interval saved at an epoch's end stays as saved); at epoch ends, the Trainer's own end of the epoch saves and
    evaluates the part trained. The last checkpoint records the time that stopped the run."""

    def __init__(self, clock: TrainingClock, hours: float):
        self.clock, self.seconds = clock, hours * 3600

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % max(1, state.logging_steps) == 0:
            self._stop_if_due(args, state, control, step_done=False)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._stop_if_due(args, state, control, step_done=True)

    def _stop_if_due(self, args, state, control, step_done: bool) -> None:
        """`step_done`: the step was already saved and evaluated where its intervals said so (at an epoch end)."""
        if control.should_training_stop or not first_process_flag(self.clock.seconds() >= self.seconds):
            return
        control.should_training_stop = True
        saving_by_steps = args.save_strategy == SaveStrategy.STEPS
        # Saved already by its interval: left as saved, but for its record of the time, which stops the run (not
        # saved again over itself, the newest complete checkpoint; the run's own scores follow training anyway).
        # Every process does as the first process's rewrite went: a save is a step they all take.
        if saving_by_steps and step_done and state.global_step % state.save_steps == 0 and first_process_flag(
            self._record_stop_in_checkpoint(args, state)
        ):
            return
        if saving_by_steps:
            control.should_save = True
        if (args.eval_strategy == IntervalStrategy.STEPS and args.eval_delay <= state.global_step
                and not (step_done and state.global_step % state.eval_steps == 0)):
            control.should_evaluate = True

    def _record_stop_in_checkpoint(self, args, state) -> bool:
        """Give the step's checkpoint, saved before the limit was found, the training time that stopped the run (so
        a run killed before its card is finished from it, not trained on): its trainer_state.json alone is
        rewritten, whole or not at all, rather than the checkpoint saved again. False where that cannot be done
        (the checkpoint is to be saved again instead); True on the processes that do not save."""
        if not args.should_save:
            return True
        path = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}" / TRAINER_STATE_NAME
        try:
            saved = json_object(path)
            records = saved.get("stateful_callbacks")
            if not (isinstance(records, dict) and isinstance(records.get(TrainingClock.__name__), dict)):
                return False
            records[TrainingClock.__name__] = self.clock.state()
            replace_text(path, json.dumps(saved, indent=2, sort_keys=True) + "\n")
            return True
        except (OSError, ValueError):
            return False


class CheckpointSchedule(RecordedInCheckpoints):
    """How the launch that saved a checkpoint saves them (its --save_strategy), which the Trainer's own record does
    not keep: `average_checkpoints --last N` reads it to tell whether a save was lost between two checkpoints."""

    def __init__(self, save_strategy: str = "steps"):
        self.save_strategy = save_strategy

    def state(self) -> dict:
        return {"args": {"save_strategy": self.save_strategy}, "attributes": {}}


class EpochBatches(RecordedInCheckpoints):
    """What decides an epoch's batches and optimizer steps: the training pairs' token lengths (a digest), the data
    seed, the batch size or token budget, accumulation and the number of processes. A resumed Trainer counts the
    checkpoint's steps off the batches this launch makes; where any of these differ, those are other batches, and
    `differences` names them."""

    def __init__(self, settings: dict | None = None):
        self.settings = dict(settings or {})

    @classmethod
    def of(cls, train_dataset, args: TransformerTrainingArguments, sampler=None) -> "EpochBatches":
        """The record of this launch's batches; `sampler`: the launch's batch sampler, whose `lengths_digest` (kept
        with cached batches) spares reading every pair's length again."""
        digest = getattr(sampler, "lengths_digest", None) or lengths_digest(token_lengths(train_dataset))
        settings = {
            "training pairs": digest,
            "seed": args.data_seed if args.data_seed is not None else args.seed,
            "processes": args.world_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
        }
        if getattr(args, "max_tokens", None) is not None:
            settings.update(max_tokens=args.max_tokens, pad_to_multiple_of=args.pad_to_multiple_of,
                            packing=bool(getattr(args, "packing", False)))
        else:
            settings.update(per_device_train_batch_size=args.per_device_train_batch_size,
                            train_sampling_strategy=str(args.train_sampling_strategy),
                            dataloader_drop_last=args.dataloader_drop_last)
        return cls(settings)

    def differences(self, saved: dict) -> list[str]:
        """This launch's settings that differ from `saved` (a checkpoint's record: `saved_args(checkpoint)`), each
        as "--flag value (the checkpoint's: value)"; none where the checkpoint has no record."""
        recorded = saved.get("settings")
        if not isinstance(recorded, dict) or not recorded:
            return []
        differences = []
        if ("max_tokens" in self.settings) != ("max_tokens" in recorded):  # token budgets against fixed sizes

            def rule(settings):
                if "max_tokens" in settings:
                    return f"--max_tokens {settings['max_tokens']}"
                return f"--per_device_train_batch_size {settings.get('per_device_train_batch_size')}"

            differences.append(f"{rule(self.settings)} (the checkpoint's: {rule(recorded)})")
        for key in sorted(set(recorded) & set(self.settings)):
            ours, theirs = self.settings[key], recorded[key]
            if ours == theirs:
                continue
            if key == "training pairs":
                differences.append("other training pairs (their token lengths differ)")
            elif key == "processes":
                differences.append(f"{ours} process(es) (the checkpoint's: {theirs})")
            else:
                flag = "--data_seed/--seed" if key == "seed" else f"--{key}"
                differences.append(f"{flag} {ours} (the checkpoint's: {theirs})")
        return differences

    def state(self) -> dict:
        return {"args": {"settings": self.settings}, "attributes": {}}


class LaunchHistory(RecordedInCheckpoints):
    """The command of each launch of a run, for its model card: every checkpoint records the launches up to its
    save, and a resumed launch adds its own to its checkpoint's record (a launch none of whose checkpoints was
    resumed from is not part of the run)."""

    def __init__(self, launches: list[dict] | tuple = (), complete: bool = True):
        self.launches = [dict(launch) for launch in launches]  # {"command": str, "resumed_from": str | None}
        self.complete = complete  # False: resumed from a checkpoint saved before launches were recorded

    @classmethod
    def from_checkpoint(cls, checkpoint: str | os.PathLike | None, command: str) -> "LaunchHistory":
        """The launches `checkpoint` recorded (none without a checkpoint), then this one, `command`."""
        saved = cls.saved_args(checkpoint)
        launches = saved.get("launches")
        recorded = isinstance(launches, list) and bool(launches) and all(
            isinstance(launch, dict) and set(launch) == {"command", "resumed_from"}
            and isinstance(launch["command"], str) and isinstance(launch["resumed_from"], (str, type(None)))
            for launch in launches
        )
        history = cls(launches if recorded else (),
                      complete=checkpoint is None or (recorded and saved.get("complete") is not False))
        history.launches.append({"command": command, "resumed_from": None if checkpoint is None else str(checkpoint)})
        return history

    def card_text(self) -> str:
        """The commands as the model card shows them: a run of one launch as its command, several each under a
        comment naming the checkpoint it resumed from."""
        if self.complete and len(self.launches) == 1:
            return self.launches[0]["command"]
        lines = []
        if not self.complete:
            lines.append(f"# the launches up to {self.launches[0]['resumed_from']} are not recorded there")
        for number, launch in enumerate(self.launches, 1):
            start = f"resumed from {launch['resumed_from']}" if launch["resumed_from"] else "started the run"
            lines += [f"# launch {number}: {start}" if self.complete else f"# {start}", launch["command"]]
        return "\n".join(lines)

    def state(self) -> dict:
        return {"args": {"launches": self.launches, "complete": self.complete}, "attributes": {}}


def any_process_flag(flag: bool) -> bool:
    """Whether `flag` holds on any process, on every process: each process notes the signals it gets, and all must
    stop at the same step (the others would wait for a process that stopped in their next collective, for ever)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else "cpu"
    raised = torch.tensor([int(flag)], device=device)
    torch.distributed.all_reduce(raised, op=torch.distributed.ReduceOp.MAX)
    return bool(raised.item())


class StopSignals(RecordedInCheckpoints):
    """--stop_signals: training stops politely on what a cluster sends before it kills a job (SLURM's SIGTERM, or
    SIGUSR1 minutes ahead with `--signal`; Kubernetes' and spot instances' SIGTERM) and on Ctrl-C. The signal is
    noted; the optimizer step under way is finished, and so are the evaluation and the save under way or due at that
    step; then a complete checkpoint of that step is saved and training ends (`stopping`), on every process at the
    same step. A second Ctrl-C aborts at once.

    The stop's checkpoint is off the save schedule (unless its step is on it): it rotates no earlier checkpoint out,
    and the launch that resumes it removes it before its own first save rotates any, so the run's folder ends with
    the checkpoints of an uninterrupted run. Its trainer_state.json records the stop (`state`), which is how the
    resumed launch knows it (`resumed_stop`, the step of that checkpoint).

    The run is not over: the Trainer's end of training must neither load the best checkpoint (the stop keeps the
    step's own weights) nor delete any (with save_total_limit 1 it keeps only the best). The stop turns both off in
    the arguments the Trainer reads (`load_best_model_at_end`, `save_total_limit`) for the rest of the launch, which
    ends with the stop."""

    def __init__(self, names=(), resumed_stop: int | None = None):
        self.signals = [signal.Signals[name] for name in names]
        self.resumed_stop = resumed_stop
        self.received: str | None = None  # the first signal this process got
        self.stopping = False  # every process agreed to stop at this step
        self.off_schedule = False  # the stop's checkpoint is not one the save schedule makes
        self.step: int | None = None  # the step training stops at
        self.saved_step: int | None = None  # the step of this launch's newest save
        self._previous = {}

    @classmethod
    def from_checkpoint(cls, checkpoint, names) -> "StopSignals":
        """Handling `names` in a launch that resumes `checkpoint` (None: none), which may be a stop's."""
        step = cls.saved_args(checkpoint).get("off_schedule_stop_step")
        return cls(names, resumed_stop=step if isinstance(step, int) and not isinstance(step, bool) else None)

    def _note(self, number, frame) -> None:
        if self.received is not None and number == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C
        self.received = self.received or signal.Signals(number).name

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._note)

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()

    def restore(self) -> None:
        """The handlers the signals had before training (also where training ended in an exception)."""
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _stop_if_signalled(self, args, state, control) -> None:
        if not self.stopping and any_process_flag(self.received is not None):
            self.stopping, self.step = True, state.global_step
            self.off_schedule = not (args.save_strategy == SaveStrategy.STEPS and state.global_step > 0
                                     and state.global_step % state.save_steps == 0)
            args.load_best_model_at_end = False
            if self.off_schedule:
                args.save_total_limit = None  # the stop's save rotates no checkpoint out
        if self.stopping:
            control.should_save = True
            control.should_training_stop = True

    def on_step_end(self, args, state, control, **kwargs):
        super().on_step_end(args, state, control, **kwargs)
        self._stop_if_signalled(args, state, control)

    def on_evaluate(self, args, state, control, **kwargs):
        self._stop_if_signalled(args, state, control)  # a signal during an evaluation: the step's save follows

    def on_save(self, args, state, control, **kwargs):
        self.saved_step = state.global_step  # on every process, after the Trainer's save
        self._stop_if_signalled(args, state, control)  # a signal during a save: that checkpoint is the stop's
        if self.stopping:
            args.save_total_limit = None  # the stop's step is saved: the end of training removes no checkpoint

    def state(self) -> dict:
        step = self.step if self.stopping and self.off_schedule else None
        return {"args": {"off_schedule_stop_step": step}, "attributes": {}}


class CompileTime(TrainerCallback):
    """--torch_compile: the time of the training steps in which torch.compile compiled a graph (the first batch, the
    first batch of another length, the backward), which the run reports apart from training (`seconds`, `graphs`)."""

    def __init__(self):
        self.seconds, self.graphs, self._started, self._before = 0.0, 0, 0.0, 0

    @staticmethod
    def _compiled_graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def on_step_begin(self, args, state, control, **kwargs):
        self._started, self._before = time.perf_counter(), self._compiled_graphs()

    def on_step_end(self, args, state, control, **kwargs):
        if (graphs := self._compiled_graphs() - self._before) > 0:
            self.seconds += time.perf_counter() - self._started
            self.graphs += graphs


__all__ = [
    "CheckpointSchedule",
    "CompileTime",
    "EpochBatches",
    "LaunchHistory",
    "RecordedInCheckpoints",
    "StopSignals",
    "StopTime",
    "TrainingClock",
    "any_process_flag",
    "first_process_flag",
]
