"""The run's safety checks, made before anything is written: which checkpoint `--resume_from_checkpoint` names (and
`last`, the newest complete one), refusals to resume with another architecture or optimizer or past the run's end,
warnings where the resumed batches or random states differ, and refusals to train into a folder that holds an
earlier run. Each refusal is a `ConfigurationError` of one line naming the value and what would be accepted."""

from __future__ import annotations

import logging
import math
import os
from fnmatch import fnmatchcase
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer

from ..common.run_folders import TRAINING_STATE_FILES
from ..inference.model_card import CARD_WRITING_PATTERN, MODEL_CARD_NAME
from ..pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR
from ..weight_files import CHECKSUMS_NAME, WEIGHTS_INDEX_NAME
from .arguments import ConfigurationError
from .callbacks import EpochBatches, TrainingClock
from .checkpoints import (
    ARCHITECTURE_FIELDS,
    AVERAGED_FROM_NAME,
    CHECKPOINT_PATTERN,
    TRAINER_STATE_NAME,
    architecture_value,
    callback_record,
    checkpoint_problem,
    checkpoint_step,
    holds_model,
    json_object,
    list_checkpoints,
)
from .run_lock import RUN_LOCK_NAME

logger = logging.getLogger(__name__)

# Settings that only some optimizers take: which of them a checkpoint's optimizer state holds tells its kind.
OPTIMIZER_KIND_KEYS = frozenset({
    "betas", "momentum", "dampening", "nesterov", "alpha", "centered", "lr_decay", "initial_accumulator_value",
    "scale_parameter", "relative_step", "warmup_init", "clip_threshold", "decay_rate", "beta1",
})

# What a training run writes at the top of its output_dir, the Trainer's files and ours (`evaluate.py`'s eval-*/
# included); besides these, the model's code files, named as in this package. `--overwrite_output_dir` deletes an
# earlier run only where the folder holds nothing else.
RUN_FILE_PATTERNS = (
    "config.json", "generation_config.json", "*.safetensors", WEIGHTS_INDEX_NAME, CHECKSUMS_NAME, MODEL_CARD_NAME,
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", TARGET_TOKENIZER_SUBDIR, "*_results.json",
    *TRAINING_STATE_FILES, "checkpoint-*", "runs", "eval-*", RUN_LOCK_NAME,
    AVERAGED_FROM_NAME,  # an averaged model's folder, trained into again
    "emissions.csv",  # --report_to codecarbon's tracker
    CARD_WRITING_PATTERN,  # a card's write that a killed process left
    ".DS_Store", "Thumbs.db", "desktop.ini",  # what file browsers leave in a folder
)


def resolve_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint` as a path: a checkpoint folder, or 'last'/'true' for the newest complete one in
    output_dir. Checkpoints whose save was cut short (no trainer_state.json, a truncated weights file, a process's
    random state missing) are skipped with a warning naming them; an explicit one is refused."""
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("last", "latest", "true"):
        output_dir = Path(training_args.output_dir)
        checkpoints = list_checkpoints(output_dir) if output_dir.is_dir() else []
        for checkpoint in reversed(checkpoints):
            problem = checkpoint_problem(checkpoint)
            if problem is None:
                return str(checkpoint)
            logger.warning("Skipping the incomplete checkpoint %s: %s", checkpoint, problem)
        raise ConfigurationError(
            f"--resume_from_checkpoint {value}: no complete checkpoint-* folder in {output_dir}"
            + (f" (incomplete: {', '.join(path.name for path in checkpoints)})" if checkpoints else "")
            + ("; start the run again with --overwrite_output_dir or in a new folder"
               if output_dir.is_dir() and holds_run(output_dir) and not holds_model(output_dir) else "")
        )
    problem = checkpoint_problem(value)
    if problem is not None:
        raise ConfigurationError(f"--resume_from_checkpoint {value} cannot be resumed from: {problem}")
    return str(value)


def refuse_other_architecture(checkpoint: str, config) -> None:
    """Refuse to resume a checkpoint whose model has other sizes than the arguments ask for (its weights would not
    fit; the Trainer failed with a size-mismatch traceback)."""
    saved = json_object(Path(checkpoint) / "config.json")
    here = config.to_dict()

    def differs(name: str) -> bool:
        if name in ("d_k", "d_v") and saved.get(name) is None and here.get(name) is None:
            return False  # both d_model / heads: a difference of those is named by them
        return architecture_value(saved, name) != architecture_value(here, name)

    differences = [f"{name} {architecture_value(saved, name)} there, {architecture_value(here, name)} here"
                   for name in ARCHITECTURE_FIELDS if differs(name)]
    if differences:
        raise ConfigurationError(
            f"--resume_from_checkpoint {checkpoint} holds another architecture ({'; '.join(differences)}): resume "
            "with the run's own arguments (its config file) or start a new run"
        )


def plateau_difference(schedule: dict, learning_rate: float) -> str | None:
    """Where a reduce_lr_on_plateau schedule's state cannot have started from `learning_rate`, what differs. It keeps
    no base rate, only its current one: the start times its `factor` once per reduction, of which its steps allow
    at most 1 + (steps - patience - 1) // (cooldown + patience + 1), or its floor (`min_lrs`, which hides the
    start). None where it could have, is no such state (`mode_worse` marks one) or its start cannot be told."""
    current, factor, floor = (schedule.get("_last_lr") or [None])[0], schedule.get("factor"), schedule.get("min_lrs")
    steps, patience, cooldown = (schedule.get(key) for key in ("last_epoch", "patience", "cooldown"))
    if "mode_worse" not in schedule or not all(
            isinstance(value, (int, float)) for value in (current, factor, learning_rate, steps, patience, cooldown)) \
            or not 0 < factor < 1 or current <= 0 or learning_rate <= 0:
        return None
    if floor and isinstance(floor[0], (int, float)) and math.isclose(current, floor[0], rel_tol=1e-6):
        return None
    most = 0 if steps <= patience else 1 + (steps - patience - 1) // (cooldown + patience + 1)
    if any(math.isclose(current, learning_rate * factor ** reductions, rel_tol=1e-6)
           for reductions in range(int(most) + 1)):
        return None
    return (f"--learning_rate {learning_rate:g} here, but its reduce_lr_on_plateau rate is {current:g}, not "
            f"{learning_rate:g} reduced by its factor {factor:g} up to {int(most)} time(s), as its {int(steps)} "
            "evaluation(s) allow")


def refuse_other_optimization(checkpoint: str, training_args) -> None:
    """Refuse to resume with another optimizer or other optimizer settings than the checkpoint's: its optimizer and
    schedule state (`optimizer.pt`, or `optimizer.bin` under FSDP, and `scheduler.pt`) bring back their own, so the
    arguments given would be silently ignored (and the model card would report them), and another optimizer's state
    fails at the first step. Compared: the learning rate (a schedule's base rate; for reduce_lr_on_plateau, which
    keeps none, whether its current rate can be the one given after its reductions), the weight decay, the kind of
    optimizer, and every setting the Trainer hands it (Adam's betas and epsilon, `--optim_args`). Read
    memory-mapped: only the settings are loaded."""
    checkpoint = Path(checkpoint)
    optim = getattr(training_args.optim, "value", training_args.optim)
    try:
        optimizer_class, passed = Trainer.get_optimizer_cls_and_kwargs(training_args)
    except ValueError:  # GaLore, APOLLO, LOMO: built from the model; their settings are the Trainer's to check
        optimizer_class, passed = None, {}
    saved, given, differences = {}, {}, []
    if (checkpoint / "scheduler.pt").is_file():
        schedule = torch.load(checkpoint / "scheduler.pt", map_location="cpu", weights_only=True)
        if base_rates := schedule.get("base_lrs") or schedule.get("_init_lrs"):  # _init_lrs: transformers' greedy
            saved["--learning_rate"], given["--learning_rate"] = base_rates[0], training_args.learning_rate
        elif plateau := plateau_difference(schedule, training_args.learning_rate):
            differences.append(plateau)
    optimizer_file = next((checkpoint / name for name in ("optimizer.pt", "optimizer.bin")
                           if (checkpoint / name).is_file()), None)
    groups = (torch.load(optimizer_file, map_location="cpu", weights_only=True, mmap=True).get("param_groups") or []
              if optimizer_file is not None else [])
    if not groups:
        return
    if optimizer_class is not None:
        try:
            kind = set(optimizer_class([nn.Parameter(torch.zeros(1))], **passed).param_groups[0]) & OPTIMIZER_KIND_KEYS
        except Exception:  # noqa: BLE001 - an optimizer that cannot be built on a stand-in: its kind is not compared
            kind = None
        if kind is not None and kind != set(groups[0]) & OPTIMIZER_KIND_KEYS:
            raise ConfigurationError(
                f"--resume_from_checkpoint {checkpoint}: it was trained with another optimizer than --optim {optim} "
                f"(its settings: {', '.join(sorted(set(groups[0]) - {'params'}))}), whose state this one cannot "
                "continue; resume with the run's own --optim"
            )
    # The flag each value came from: Adam's from --adam_*, others from --optim_args (spaces dropped, as transformers
    # reads it); the learning rate and weight decay are compared below (the Trainer sets both per parameter group).
    optim_args = {item.split("=", 1)[0] for item in (training_args.optim_args or "").replace(" ", "").split(",")
                  if "=" in item}
    adam_flags = {
        "betas": ((training_args.adam_beta1, training_args.adam_beta2), ("--adam_beta1", "--adam_beta2")),
        "eps": ((training_args.adam_epsilon,), ("--adam_epsilon",)),
    }
    for key, value in passed.items():
        theirs = groups[0].get(key)
        if key in ("lr", "weight_decay") or theirs is None or isinstance(value, bool) \
                or not isinstance(value, (int, float, tuple)):
            continue
        ours, theirs = (value, theirs) if isinstance(value, tuple) else ((value,), (theirs,))
        if key in adam_flags and tuple(ours) == adam_flags[key][0]:
            flags = adam_flags[key][1]
        else:
            source = f"--optim_args {key}" if key in optim_args else f"--optim {optim}'s {key}"
            flags = [source + (f"[{index}]" if len(ours) > 1 else "") for index in range(len(ours))]
        for flag, mine, saved_value in zip(flags, ours, theirs):
            if isinstance(mine, (int, float)) and isinstance(saved_value, (int, float)):
                saved[flag], given[flag] = saved_value, mine
    if all("weight_decay" in group for group in groups):  # decayed weights, then biases and norms at 0
        saved["--weight_decay"] = max(group["weight_decay"] for group in groups)
        given["--weight_decay"] = training_args.weight_decay
    differences += [f"{flag} {saved[flag]:g} there, {given[flag]:g} here" for flag in saved
                    if not math.isclose(saved[flag], given[flag], rel_tol=1e-6, abs_tol=1e-12)]
    if differences:
        raise ConfigurationError(
            f"--resume_from_checkpoint {checkpoint}: its optimizer and schedule continue with their own settings "
            f"({'; '.join(differences)}), so the ones given would be ignored; resume with the run's own values"
        )


def end_reached(state: dict, training_args) -> tuple[str, str] | None:
    """(how, the flags to raise) where a trainer state already reached an end this run asks for: --max_steps, else
    --num_train_epochs, and --stop_time_hours by the training time it records; each end reached is named. None
    where it reached none."""
    step, epoch = state.get("global_step", 0), state.get("epoch") or 0
    ends = []
    if training_args.max_steps > 0:
        if step >= training_args.max_steps:
            ends.append((f"step {step}, and --max_steps is {training_args.max_steps}", "--max_steps"))
    elif epoch >= training_args.num_train_epochs:
        ends.append((f"epoch {epoch:g}, and --num_train_epochs is {training_args.num_train_epochs:g}",
                     "--num_train_epochs"))
    seconds = callback_record(state, TrainingClock.__name__).get("seconds_before")
    if (hours := training_args.stop_time_hours) and isinstance(seconds, (int, float)) and seconds >= hours * 3600:
        ends.append((f"{seconds / 3600:.4g} hours of training, and --stop_time_hours is {hours:g}",
                     "--stop_time_hours"))
    if not ends:
        return None
    return " and ".join(how for how, _ in ends), " and ".join(flag for _, flag in ends)


def refuse_finished_run(checkpoint: str, training_args) -> bool:
    """Refuse to resume from a checkpoint that already reached the end this run asks for where the run finished:
    the Trainer would take one more step anyway and replace the run's final model. Refuse `last` too where the run
    finished after its newest checkpoint left (with save_total_limit 1 the Trainer keeps only the best one at the
    end): it would train the steps after it again. True where the run stopped after the checkpoint at its end
    without finishing (in its final evaluation, say): `train` then writes its final model, evaluations and card from
    the checkpoint, without training."""
    run_dir = Path(checkpoint).parent
    reached = end_reached(json_object(Path(checkpoint) / TRAINER_STATE_NAME), training_args)
    if reached is None:
        newest = str(training_args.resume_from_checkpoint).lower() in ("last", "latest", "true")
        if newest and finished_at(run_dir, checkpoint):
            top = json_object(run_dir / TRAINER_STATE_NAME)
            finish = end_reached(top, training_args)
            # Only steps trained after the checkpoint are at stake: a run that ended at its step (and whose own state
            # passed a time limit the checkpoint had not, loading its best model after it, say) goes on from it.
            if finish is not None and top.get("global_step", 0) > checkpoint_step(Path(checkpoint)):
                raise ConfigurationError(
                    f"--resume_from_checkpoint {training_args.resume_from_checkpoint}: the run in {run_dir} is "
                    f"finished, at {finish[0]}, after its newest checkpoint left ({Path(checkpoint).name}), whose "
                    "steps after it would be trained again and its final model replaced; to train again from that "
                    "checkpoint, name it"
                )
        return False
    if not finished_at(run_dir, checkpoint):
        return True
    at, flags = reached
    raise ConfigurationError(
        f"--resume_from_checkpoint: {checkpoint} is at {at}: that run is finished (its final model stays as it is); "
        f"raise {flags} to train it further"
    )


def finished_at(run_dir: str | os.PathLike, checkpoint: str | os.PathLike) -> bool:
    """Whether the run in `run_dir` finished at `checkpoint` or after it: its card is there, and its top-level
    trainer_state.json, which `train` saves last (runs saved before that order saved it before their evaluations,
    hence the card too), goes on from the checkpoint's (its log begins with the checkpoint's log). A launch that
    resumed an earlier checkpoint and stopped before finishing left a top-level state of another history."""
    state_file = Path(run_dir) / TRAINER_STATE_NAME
    if not (Path(run_dir) / MODEL_CARD_NAME).is_file() or not state_file.is_file():
        return False
    try:
        state, saved = json_object(state_file), json_object(Path(checkpoint) / TRAINER_STATE_NAME)
    except ValueError:  # a damaged state: the run did not finish writing it
        return False
    history, saved_history = state.get("log_history"), saved.get("log_history")
    return (isinstance(state.get("global_step"), int) and state["global_step"] >= saved.get("global_step", 0)
            and isinstance(history, list) and isinstance(saved_history, list)
            and history[:len(saved_history)] == saved_history)


def warn_of_later_checkpoints(checkpoint: str) -> None:
    """Resuming an older checkpoint of a run (after a loss spike, say) is allowed, but its later checkpoints are
    replaced as training passes their steps: say so before they go."""
    checkpoint = Path(checkpoint)
    if not CHECKPOINT_PATTERN.match(checkpoint.name):
        return
    step = checkpoint_step(checkpoint)
    later = [path.name for path in list_checkpoints(checkpoint.parent) if checkpoint_step(path) > step]
    if later:
        logger.warning("Resuming from %s, older than %s in the same run: those are replaced as training reaches their "
                       "steps, and the run's final model too", checkpoint.name, ", ".join(later))


def warn_of_missing_random_state(checkpoint: str, training_args) -> None:
    """A process whose random generators' state the checkpoint lacks (it was saved by another number of processes,
    or the file is lost) resumes without it, and the Trainer logs that only at info level: say so. (Which files a
    checkpoint must hold depends on the run: each node keeps only its own processes' with save_on_each_node.)"""
    world_size, rank = training_args.world_size, training_args.process_index
    name = "rng_state.pth" if world_size <= 1 else f"rng_state_{rank}.pth"  # as the Trainer saves and loads it
    if not (Path(checkpoint) / name).is_file():
        logger.warning("%s holds no %s (this run has %d process(es): it was saved by another number, or the file is "
                       "lost): process %d resumes without its random generators' states, so training goes on, but "
                       "not as the uninterrupted run would", checkpoint, name, world_size, rank)


def warn_of_other_batches(checkpoint: str, batches: EpochBatches) -> None:
    """Resuming with other data or batch settings than the checkpoint's run goes on, as a user may mean it to (on
    another machine, with more data), but not as that run would: the Trainer counts the checkpoint's steps off this
    launch's batches to find the epoch and the batches to skip. Say so, naming the settings."""
    differences = batches.differences(EpochBatches.saved_args(checkpoint))
    if differences:
        logger.warning("--resume_from_checkpoint %s: this launch batches the data otherwise than the run it resumes "
                       "(%s); the Trainer counts the checkpoint's steps off the new batches to find where to go on, "
                       "so the rest of the run repeats or leaves out pairs of the epoch it resumes in and is not what "
                       "the uninterrupted run would train; resume with the run's own settings to go on exactly",
                       checkpoint, "; ".join(differences))


def holds_run(directory: Path) -> bool:
    """Whether `directory` holds a training run: its model, its trainer state, its checkpoints, or the lock file a
    run writes first (`RunLock`; a run stopped before its first checkpoint)."""
    return (holds_model(directory) or (directory / TRAINER_STATE_NAME).is_file() or bool(list_checkpoints(directory))
            or (directory / RUN_LOCK_NAME).is_file())


def not_run_files(directory: Path) -> list[str]:
    """The entries at the top of `directory` that no training run writes (`RUN_FILE_PATTERNS`, the code files),
    sorted."""
    code_files = {path.name for path in Path(__file__).resolve().parents[1].glob("*.py")}  # the model's, as saved
    return sorted(
        path.name for path in directory.iterdir()
        if path.name not in code_files and not any(fnmatchcase(path.name, pattern) for pattern in RUN_FILE_PATTERNS)
    )


def continues_in_place(training_args, checkpoint: str | None) -> bool:
    """Whether the run resumes one of output_dir's own checkpoints (the run goes on in its folder)."""
    return checkpoint is not None and Path(checkpoint).resolve().parent == Path(training_args.output_dir).resolve()


def refuse_earlier_run(training_args, checkpoint: str | None) -> None:
    """Refuse to train into a folder that holds an earlier run or anything else (its checkpoints would mix with this
    run's, `--resume_from_checkpoint last` could pick one of them, its files would be replaced), unless resuming a
    checkpoint of that folder or --overwrite_output_dir (whose deletion of the earlier run waits until every check
    has passed; a folder holding no run, or anything besides the run's own files, is refused). A checkpoint from
    elsewhere continues into an empty or new folder only."""
    output_dir = Path(training_args.output_dir)
    entries = sorted(path.name for path in output_dir.iterdir() if path.name != RUN_LOCK_NAME) if output_dir.is_dir() \
        else []
    continuing = continues_in_place(training_args, checkpoint)
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    if training_args.overwrite_output_dir and entries and not continuing and not holds_run(output_dir):
        raise ConfigurationError(
            f"--overwrite_output_dir replaces a training run, but --output_dir {output_dir} holds none (no "
            f"model, {TRAINER_STATE_NAME} or checkpoint-*; it holds {shown}); choose another folder"
        )
    inside = checkpoint is not None and output_dir.resolve() in Path(checkpoint).resolve().parents
    if training_args.overwrite_output_dir and inside and not continuing:
        raise ConfigurationError(
            f"--resume_from_checkpoint {checkpoint} lies inside --output_dir {output_dir}, which "
            "--overwrite_output_dir would delete first; copy the checkpoint out, or drop --overwrite_output_dir"
        )
    if training_args.overwrite_output_dir and entries and not continuing and (others := not_run_files(output_dir)):
        raise ConfigurationError(
            f"--overwrite_output_dir would delete the earlier run in --output_dir {output_dir}, but the folder also "
            f"holds what no training run writes ({', '.join(others[:5])}{', ...' if len(others) > 5 else ''}); move "
            "that out first, or choose another folder"
        )
    if continuing or not entries or training_args.overwrite_output_dir:
        return
    if checkpoint is not None:
        raise ConfigurationError(
            f"--output_dir {output_dir} already holds other files ({shown}), and --resume_from_checkpoint {checkpoint} "
            "is not one of its checkpoints: continue that run into a new folder, or into its own"
        )
    if not holds_run(output_dir):
        raise ConfigurationError(f"--output_dir {output_dir} holds other files ({shown}); choose a new or empty folder")
    if not list_checkpoints(output_dir):
        raise ConfigurationError(
            f"--output_dir {output_dir} already holds an earlier run with no checkpoint to continue from ({shown}); "
            "choose a new folder, or replace it with --overwrite_output_dir"
        )
    raise ConfigurationError(
        f"--output_dir {output_dir} already holds an earlier run ({shown}); choose a new folder, continue it with "
        "--resume_from_checkpoint last, or replace it with --overwrite_output_dir"
    )
