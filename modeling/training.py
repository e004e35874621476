"""The run behind `scripts/train.py`: data, tokenizer, model, `TransformerSeq2SeqTrainer`, outputs.

text -> tokenizer (trained on the training split unless given) -> filtered, tokenized pairs -> token-budget batches
-> model with the paper's label-smoothed loss -> `TransformerSeq2SeqTrainer` (Noam schedule, evaluation with
`generate`, sacreBLEU/chrF, best checkpoint on BLEU) -> model folder with custom code, tokenizer and model card.

The arguments and their checks are in `modeling.arguments`; `setup_training` calls those checks first, then checks
the data, and writes nothing into output_dir until every check has passed: a bad argument or unusable data raises
`ConfigurationError` and leaves no folder behind.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import datasets
import psutil
import torch
from torch import nn
from transformers import DataCollatorForSeq2Seq, Trainer, TrainerState, set_seed

from .arguments import (
    ConfigurationError,
    DataArguments,
    ModelArguments,
    TransformerTrainingArguments,
    model_config,
    validate_arguments,
)
from .batching import PairsOverBudgetError
from .checkpoints import (
    ARCHITECTURE_FIELDS,
    AVERAGED_FROM_NAME,
    CHECKPOINT_PATTERN,
    TRAINER_STATE_NAME,
    TRAINING_STATE_FILES,
    callback_record,
    checkpoint_problem,
    checkpoint_step,
    holds_model,
    json_object,
    list_checkpoints,
)
from .data import load_parallel_corpus, prepare_pairs
from .evaluation import build_compute_metrics
from .hub import push_folder_to_hub
from .model_card import CARD_WRITING_PATTERN, MODEL_CARD_NAME, model_card_context, write_model_card
from .modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration
from .pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR
from .run_lock import RUN_LOCK_NAME, RunLock
from .tokenization import dataset_texts, load_tokenizers, same_vocabulary, train_tokenizer
from .trainer import (
    CheckpointSchedule,
    EpochBatches,
    LaunchHistory,
    StopTime,
    TrainingClock,
    TransformerSeq2SeqTrainer,
    token_budget_sampler,
)
from .weight_files import CHECKSUMS_NAME, WEIGHTS_INDEX_NAME

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------------
# Checks of the run folder and the data, before anything is written
# ----------------------------------------------------------------------------------------------------------------------


def resolve_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint` as a path: a checkpoint folder, or 'last'/'true' for the newest complete one in
    output_dir. Checkpoints whose save was cut short (no trainer_state.json, a truncated weights file) are skipped
    with a warning naming them; an explicit one is refused."""
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
    differences = [f"{name} {saved.get(name)} there, {getattr(config, name)} here" for name in ARCHITECTURE_FIELDS
                   if saved.get(name) != getattr(config, name)]
    if differences:
        raise ConfigurationError(
            f"--resume_from_checkpoint {checkpoint} holds another architecture ({'; '.join(differences)}): resume "
            "with the run's own arguments (its config file) or start a new run"
        )


# Settings that only some optimizers take: which of them a checkpoint's optimizer state holds tells its kind.
OPTIMIZER_KIND_KEYS = frozenset({
    "betas", "momentum", "dampening", "nesterov", "alpha", "centered", "lr_decay", "initial_accumulator_value",
    "scale_parameter", "relative_step", "warmup_init", "clip_threshold", "decay_rate", "beta1",
})


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


def finish_from_checkpoint(trainer, checkpoint: str) -> None:
    """Leave `trainer` as `trainer.train()` leaves it when `checkpoint` is the run's last step: the checkpoint's
    state, and its weights (the best checkpoint's with --load_best_model_at_end, as the Trainer loads them)."""
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
    best = trainer.state.best_model_checkpoint
    if best is not None:  # beside the checkpoint first (the run's folder may have moved), else where recorded
        found = next((path for path in (Path(checkpoint).parent / Path(best).name, Path(best)) if path.is_dir()), None)
        if found is None:  # as the Trainer treats it when resuming
            logger.warning("The best checkpoint %s recorded in %s does not exist anymore: the run's final model is "
                           "%s", best, checkpoint, checkpoint)
        trainer.state.best_model_checkpoint = best = None if found is None else str(found)
    source = best if trainer.args.load_best_model_at_end and best is not None else checkpoint
    model = trainer.model
    saved = type(model).from_pretrained(source, dtype=model.dtype)
    model.load_state_dict(saved.state_dict())


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


def not_run_files(directory: Path) -> list[str]:
    """The entries at the top of `directory` that no training run writes (`RUN_FILE_PATTERNS`, the code files),
    sorted."""
    code_files = {path.name for path in Path(__file__).parent.glob("*.py")}
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


def check_token_budget(train_dataset, training_args, train_texts) -> None:
    """Build the token-budget batches as the Trainer will, so a pair longer than --max_tokens fails before training.
    The message quotes the first such pair's source from `train_texts` (the kept pairs as text, row for row): its
    index counts the pairs kept after filtering, no line of the files."""
    try:
        token_budget_sampler(train_dataset, training_args)
    except ValueError as error:
        quoted = ""
        if isinstance(error, PairsOverBudgetError):
            source = train_texts[error.indices[0]]["source"]
            quoted = f" (indices count the pairs kept after filtering; index {error.indices[0]} is the pair " \
                     f"{source[:60] + '...' if len(source) > 60 else source!r})"
        raise ConfigurationError(
            f"--max_tokens {training_args.max_tokens} is too small for the training data: {error}{quoted}; raise "
            "--max_tokens, or lower --max_length (longer pairs are filtered out)"
        ) from None


# ----------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# ----------------------------------------------------------------------------------------------------------------------


def load_corpus(data_args: DataArguments):
    """The corpus of --data_dir or --dataset_name, each split cut to its --max_*_samples, and each split's size before
    that cut: (corpus, {split: pairs in the corpus})."""
    flag, data = ("--data_dir", data_args.data_dir) if data_args.data_dir is not None else (
        "--dataset_name", data_args.dataset_name)
    try:
        corpus = load_parallel_corpus(
            data, data_args.source_lang, data_args.target_lang, dataset_config=data_args.dataset_config,
            source_column=data_args.source_column, target_column=data_args.target_column,
        )
    except (ValueError, KeyError, OSError, datasets.exceptions.DatasetsError) as error:
        cause = f" ({error.__cause__})" if error.__cause__ is not None else ""  # datasets' own message is generic
        raise ConfigurationError(f"{flag} {data}: cannot load the corpus: {error}{cause}") from error
    if "train" not in corpus:
        raise ConfigurationError(f"{flag} {data}: the corpus has no train split (it has {list(corpus)})")
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples}
    sizes = {split: len(corpus[split]) for split in corpus}
    for split in corpus:  # every other split is a test set (test, or test_2016 and test_2017, ...)
        limit = limits.get(split, data_args.max_test_samples)
        if limit is not None and len(corpus[split]) > limit:
            corpus[split] = corpus[split].select(range(limit))
    return corpus, sizes


def get_tokenizer(
    data_args: DataArguments, corpus, checkpoint: str | None, model_max_length: int, *, train_here: bool,
    tokenizer_dir: Path,
):
    """The given tokenizer, the checkpoint's when resuming, else one trained on the training split (`train_here`:
    by this process, which saves it once the data checks pass), else the one that process saved in tokenizer_dir
    (so every process has the same vocabulary)."""
    if data_args.tokenizer_name_or_path is not None:
        tokenizer = load_tokenizers(data_args.tokenizer_name_or_path)
        if checkpoint is not None and not same_vocabulary(tokenizer, load_tokenizers(checkpoint)):
            raise ConfigurationError(
                f"--tokenizer_name_or_path {data_args.tokenizer_name_or_path} is not the tokenizer of "
                f"--resume_from_checkpoint {checkpoint} (other vocabulary: its model's token ids would mean other "
                "tokens); leave --tokenizer_name_or_path out to resume with the checkpoint's own"
            )
        for each in tokenizer if isinstance(tokenizer, tuple) else (tokenizer,):  # saved with the model: its limit
            each.model_max_length = min(each.model_max_length, model_max_length)
        return tokenizer
    if checkpoint is not None:
        return load_tokenizers(checkpoint)
    if train_here:
        return train_tokenizer(
            dataset_texts(corpus["train"]), vocab_size=data_args.vocab_size, model_max_length=model_max_length
        )
    if not (tokenizer_dir / "tokenizer.json").is_file():  # that process stopped on a check and reported why
        raise ConfigurationError(f"no tokenizer in {tokenizer_dir}: the process training it stopped on an error")
    return load_tokenizers(tokenizer_dir)


def build_model(
    model_args: ModelArguments, data_args: DataArguments, tokenizer, training_args
) -> AnnotatedTransformerForConditionalGeneration:
    model = AnnotatedTransformerForConditionalGeneration(model_config(model_args, data_args, tokenizer))
    generation = model.generation_config
    generation.num_beams = training_args.generation_num_beams
    # A length in new tokens, not `max_length`: a saved max_length makes every `generate(max_new_tokens=...)` call
    # warn that both are set. Targets were filtered to --max_length tokens.
    generation.max_new_tokens = (
        training_args.generation_max_length - 1 if training_args.generation_max_length else data_args.max_length
    )
    generation.decoder_start_token_id = tokenizer.bos_token_id
    generation.bos_token_id = tokenizer.bos_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    return model


def _default_generation_settings(training_args, data_args: DataArguments) -> None:
    if training_args.generation_num_beams is None:
        training_args.generation_num_beams = 4


# ----------------------------------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------------------------------


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


class RefusedByAnotherProcess(ConfigurationError):
    """The refusal another process of the run made and printed; this process stops with it, without printing it
    again."""


def first_process_then_others(training_args, first: bool, work):
    """`work()` on the first process (`first`; one per node where the nodes do not share output_dir), then on the
    others, which read what it wrote. A `ConfigurationError` raised by any process stops every process, the others
    with `RefusedByAnotherProcess`: the others no longer go on alone (reading an earlier run's tokenizer from a
    folder the first refused) into training, to fail there with a traceback."""
    if training_args.world_size <= 1:
        return work()
    result = None
    for turn in (True, False):  # the first process's turn, then the others'
        refusal = None
        if first is turn:
            try:
                result = work()
            except ConfigurationError as error:
                refusal = error
        refusals = [None] * training_args.world_size  # all_gather_object is also each turn's barrier
        torch.distributed.all_gather_object(refusals, None if refusal is None else str(refusal))
        if refusal is not None:
            raise refusal
        if (message := next((text for text in refusals if text is not None), None)) is not None:
            raise RefusedByAnotherProcess(message)
    return result


def launch_command(argv: Sequence[str], world_size: int, distributed_type: str) -> str:
    """The command line of this run, for the model card: accelerate's flags as its launcher hands them to the script
    (the environment) where they change the run, i.e. the processes and mixed precision (accelerate's config file, if
    any, is not visible here)."""
    launcher = "accelerate launch"
    if distributed_type == "FSDP":
        launcher += f" --use_fsdp --num_processes {world_size}"
    elif world_size > 1:
        launcher += f" --multi_gpu --num_processes {world_size}"
    if (precision := os.environ.get("ACCELERATE_MIXED_PRECISION", "no")) != "no":
        launcher += f" --mixed_precision {precision}"
    return f"{launcher} scripts/train.py {shlex.join(argv)}".strip()


@dataclass
class TrainingSetup:
    """Everything `train` runs, built and checked by `setup_training` before any training step."""

    trainer: TransformerSeq2SeqTrainer
    tokenizer: object
    corpus: object  # DatasetDict of raw text pairs (after filtering)
    tokenized: object  # the same pairs as token ids
    filter_report: dict
    checkpoint: str | None
    push_to_hub: bool
    run_lock: RunLock | None = None  # held by the process that writes output_dir (`RunLock`); released by `train`
    finishing: bool = False  # the checkpoint is the run's last step: no training, the rest is written from it


def setup_training(
    model_args: ModelArguments, data_args: DataArguments, training_args: TransformerTrainingArguments
) -> TrainingSetup:
    """Check the arguments, load and filter the corpus, get the tokenizer, tokenize, build the model and the trainer.

    Every problem with the arguments or the data raises `ConfigurationError` here, before training, and before
    anything is written into output_dir.
    """
    config = validate_arguments(model_args, data_args, training_args)
    checkpoint = resolve_checkpoint(training_args)
    resuming = checkpoint is not None
    finishing = resuming and refuse_finished_run(checkpoint, training_args)
    if resuming:
        refuse_other_architecture(checkpoint, config)
        refuse_other_optimization(checkpoint, training_args)
        warn_of_later_checkpoints(checkpoint)
        warn_of_missing_random_state(checkpoint, training_args)
    refuse_earlier_run(training_args, checkpoint)
    if training_args.distributed_state is not None:
        training_args.distributed_state.wait_for_everyone()  # every process checked the folder before any writes
    _default_generation_settings(training_args, data_args)
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False  # pushed once, after saving
    set_seed(training_args.seed)
    if training_args.use_cpu:
        torch.set_num_threads(training_args.cpu_threads or cpu_threads_per_process())
    if training_args.disable_tqdm:
        datasets.disable_progress_bars()  # `datasets`' own bars (map, filter) too, not only the Trainer's

    corpus, corpus_sizes = load_corpus(data_args)
    has_validation = "validation" in corpus
    if training_args.eval_strategy != "no" and not has_validation:
        raise ConfigurationError(
            f"evaluation needs a validation split, but the corpus has {list(corpus)}; add one or set --eval_strategy no"
        )
    if not has_validation:
        training_args.load_best_model_at_end = False

    # The first process (on each node, when the nodes do not share output_dir) trains the tokenizer and checks the
    # data, and only then writes into output_dir; the others follow with the tokenizer it saved.
    output_dir, per_node = Path(training_args.output_dir), training_args.save_on_each_node
    first = (training_args.local_process_index if per_node else training_args.process_index) == 0
    locks = []  # the run lock, once the first process holds it

    def prepare():
        tokenizer = get_tokenizer(
            data_args, corpus, checkpoint, config.max_position_embeddings - 1, train_here=first,
            tokenizer_dir=output_dir,
        )
        if isinstance(tokenizer, tuple):
            raise ConfigurationError(
                f"--resume_from_checkpoint {checkpoint} holds separate source/target tokenizers, which "
                "scripts/train.py does not support"
            )
        kept, tokenized, filter_report = prepare_pairs(corpus, tokenizer, max_length=data_args.max_length)
        for split, report in filter_report.items():  # "total": the pairs filtered, after any --max_*_samples cut
            report["in_corpus"] = corpus_sizes[split]
        for split in kept:
            if len(kept[split]) == 0:
                too_long = filter_report[split].get("too_long", 0) > 0
                raise ConfigurationError(
                    f"--max_length {data_args.max_length}: no {split} pairs are left after filtering "
                    f"({filter_report[split]}); raise --max_length" if too_long else
                    f"no {split} pairs are left after filtering ({filter_report[split]}): the {split} data holds no "
                    "pair with text on both sides"
                )
        if training_args.max_tokens is not None:
            check_token_budget(tokenized["train"], training_args, kept["train"])
        if first:  # every check passed: now the run may write, once no other run writes into output_dir
            run_lock = RunLock(output_dir)
            run_lock.acquire()
            locks.append(run_lock)
            replacing = training_args.overwrite_output_dir and not continues_in_place(training_args, checkpoint)
            if replacing and output_dir.is_dir():
                for earlier in output_dir.iterdir():  # the whole earlier run: its checkpoints, logs, evaluations
                    if earlier.name == RUN_LOCK_NAME:
                        continue
                    if earlier.is_dir() and not earlier.is_symlink():
                        shutil.rmtree(earlier)
                    else:
                        earlier.unlink()
            if data_args.tokenizer_name_or_path is None and not resuming:
                output_dir.mkdir(parents=True, exist_ok=True)
                tokenizer.save_pretrained(output_dir)
        return tokenizer, kept, tokenized, filter_report

    try:
        tokenizer, corpus, tokenized, filter_report = first_process_then_others(training_args, first, prepare)
        batches = EpochBatches.of(tokenized["train"], training_args)
        if resuming and not finishing and training_args.process_index == 0:
            warn_of_other_batches(checkpoint, batches)
        model = build_model(model_args, data_args, tokenizer, training_args)
        clock = TrainingClock.from_checkpoint(checkpoint)
        collator = DataCollatorForSeq2Seq(
            tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=training_args.pad_to_multiple_of
        )
        trainer = TransformerSeq2SeqTrainer(
            model=model,
            args=training_args,
            train_dataset=tokenized["train"],
            eval_dataset=tokenized["validation"] if has_validation else None,
            data_collator=collator,
            processing_class=tokenizer,
            callbacks=[
                clock, CheckpointSchedule(training_args.save_strategy.value), batches,
                *([StopTime(clock, training_args.stop_time_hours)] if training_args.stop_time_hours else []),
            ],
            compute_metrics=(
                build_compute_metrics(tokenizer, corpus["validation"]["target"]) if has_validation else None
            ),
        )
    except BaseException:
        for run_lock in locks:
            run_lock.release()
        raise
    run_lock = locks[0] if locks else None
    return TrainingSetup(trainer, tokenizer, corpus, tokenized, filter_report, checkpoint, push_to_hub, run_lock,
                         finishing)


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TransformerTrainingArguments,
    *,
    config_path: Path | None = None,
    argv: Sequence[str] = (),
) -> dict:
    """Train, evaluate the saved model on validation and test, write the model folder with its card, optionally push.

    Returns the final metrics ({"eval_bleu": ..., "test_exact_match": ..., ...}).
    """
    setup = setup_training(model_args, data_args, training_args)
    try:
        trainer, tokenizer, corpus, tokenized = setup.trainer, setup.tokenizer, setup.corpus, setup.tokenized
        if trainer.is_world_process_zero():
            model = trainer.model
            print(
                f"Model: preset {model_args.preset!r}, d_model {model.config.d_model}, {model.config.encoder_layers}+"
                f"{model.config.decoder_layers} layers, {model.num_parameters():,} parameters; "
                f"vocabulary {len(tokenizer)}; "
                f"pairs {', '.join(f'{split} {len(corpus[split])}' for split in corpus)}; "
                + trainer.run_description
            )

        if setup.checkpoint is not None and trainer.is_world_process_zero():
            print(f"Finishing the run from {setup.checkpoint}, its last step: its final model, evaluations and card, "
                  "without training" if setup.finishing else
                  f"Resuming from {setup.checkpoint} at step {checkpoint_step(Path(setup.checkpoint))}")
        command = launch_command(argv, training_args.world_size, trainer.accelerator.distributed_type.value)
        launches = LaunchHistory.from_checkpoint(setup.checkpoint, command)
        trainer.add_callback(launches)  # each checkpoint records the run's launches up to it
        if setup.finishing:
            finish_from_checkpoint(trainer, setup.checkpoint)
            metrics, this_launch_seconds = {}, 0.0  # the checkpoint's clock holds the whole training time
        else:
            train_result = trainer.train(resume_from_checkpoint=setup.checkpoint)
            metrics, this_launch_seconds = dict(train_result.metrics), train_result.metrics.get("train_runtime")
            trainer.log_metrics("train", train_result.metrics)
            trainer.save_metrics("train", train_result.metrics)
        trainer.save_model()  # the best checkpoint's weights when load_best_model_at_end

        results, signatures = [], {}
        test_sets = [split for split in tokenized if split not in ("train", "validation")]
        for split in ["validation", *test_sets]:
            if split not in tokenized:
                continue
            prefix = "eval" if split == "validation" else split
            trainer.compute_metrics = build_compute_metrics(tokenizer, corpus[split]["target"])
            output = trainer.predict(tokenized[split], metric_key_prefix=prefix)
            trainer.log_metrics(prefix, output.metrics)
            trainer.save_metrics(prefix, output.metrics)
            metrics.update(output.metrics)
            signatures = trainer.compute_metrics.signatures
            scores = {key.removeprefix(f"{prefix}_"): value for key, value in output.metrics.items()}
            results.append({"split": split, **scores})

        if trainer.is_world_process_zero():
            trainer.save_metrics("all", metrics)
            context = model_card_context(
                trainer, model_args, data_args, training_args, corpus, setup.filter_report, results, signatures,
                config_path=config_path, command=launches.card_text(),
                training_seconds=training_seconds(trainer, this_launch_seconds),
            )
            write_model_card(training_args.output_dir, context)
            trainer.save_state()  # last: the run's folder is finished (`finished_at`)
            print_summary(training_args.output_dir, results, corpus)
            if setup.push_to_hub:
                push_folder_to_hub(
                    training_args.output_dir, training_args.hub_model_id, token=training_args.hub_token,
                    private=training_args.hub_private_repo, revision=training_args.hub_revision,
                )
                print(f"Pushed {training_args.output_dir} to https://huggingface.co/{training_args.hub_model_id}")
        return metrics
    finally:
        if setup.run_lock is not None:
            setup.run_lock.release()


def training_seconds(trainer, runtime: float | None) -> float | None:
    """The run's training time: this launch's (`train_runtime`) plus what the run trained before resuming."""
    clock = next((callback for callback in trainer.callback_handler.callbacks if isinstance(callback, TrainingClock)),
                 None)
    return None if runtime is None else runtime + (clock.seconds_before if clock is not None else 0.0)


def print_summary(output_dir: str, results: list[dict], corpus) -> None:
    print()
    for row in results:
        print(
            f"{row['split']}: exact match {row['exact_match']:.2f}% | sacreBLEU {row['bleu']:.2f} | chrF "
            f"{row['chrf']:.2f} | {row['sentences']} sentences"
        )
    example = corpus["test" if "test" in corpus else "train"][0]["source"]
    print(f"\nThe model is in {output_dir}. Translate with it:")
    print(f"  python scripts/translate.py {shlex.quote(str(output_dir))} {shlex.quote(example)}")


__all__ = [
    "RefusedByAnotherProcess",
    "TrainingSetup",
    "build_model",
    "check_token_budget",
    "cpu_threads_per_process",
    "load_corpus",
    "refuse_finished_run",
    "refuse_other_architecture",
    "resolve_checkpoint",
    "setup_training",
    "train",
]
