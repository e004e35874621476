"""The run behind `scripts/train.py`: data, tokenizer, model, `TransformerSeq2SeqTrainer`, outputs.

text -> tokenizer (trained on the training split unless given) -> filtered, tokenized pairs -> token-budget batches
-> model with the paper's label-smoothed loss -> `TransformerSeq2SeqTrainer` (Noam schedule, evaluation with
`generate`, sacreBLEU/chrF, best checkpoint on BLEU) -> model folder with custom code, tokenizer and model card.

The arguments are in `modeling.training.arguments`, their checks in `argument_checks`; `setup_training` calls those
checks first, then checks
the data, and writes nothing into output_dir until every check has passed: a bad argument or unusable data raises
`ConfigurationError` and leaves no folder behind.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import psutil
import torch
import transformers
from transformers import DataCollatorForSeq2Seq, TrainerState, set_seed

from ..common.file_writes import replace_text
from ..data.batching import PairsOverBudgetError, TokenBudgetBatchSampler
from ..data.corpus import load_parallel_corpus, prepare_pairs
from ..inference.evaluation import build_compute_metrics
from ..inference.hub import push_folder_to_hub
from ..inference.model_card import MODEL_CARD_NAME, model_card_context, write_model_card
from ..modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration
from ..tokenization import dataset_texts, load_tokenizers, same_vocabulary, train_tokenizer
from .argument_checks import model_config, validate_arguments
from .arguments import ConfigurationError, DataArguments, ModelArguments, TransformerTrainingArguments
from .callbacks import (
    CheckpointSchedule,
    CompileTime,
    EpochBatches,
    LaunchHistory,
    StopSignals,
    StopTime,
    TrainingClock,
)
from .checkpoints import (
    TRAINER_STATE_NAME,
    checkpoint_problem,
    checkpoint_step,
    list_checkpoints,
)
from .run_lock import RUN_LOCK_NAME, RunLock
from .run_safety import (
    continues_in_place,
    refuse_earlier_run,
    refuse_finished_run,
    refuse_other_architecture,
    refuse_other_optimization,
    resolve_checkpoint,
    warn_of_later_checkpoints,
    warn_of_missing_random_state,
    warn_of_other_batches,
)
from .schedule import schedule_description
from .trainer import TokenIdsChecked, TransformerSeq2SeqTrainer, token_budget_sampler
from .world import (
    Heartbeats,
    ProcessLost,
    World,
    lost_peer_error_in,
    lost_process_message,
    wait_for_the_others,
    waiting_group,
)

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------------
# The run's parts: a finished run's last checkpoint, the data, the tokenizer, the model (the checks of the run folder
# and of a checkpoint to resume are in `run_safety`)
# ----------------------------------------------------------------------------------------------------------------------


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


def check_token_budget(train_dataset, training_args, train_texts) -> TokenBudgetBatchSampler:
    """Build the token-budget batches the Trainer takes, so a pair longer than --max_tokens fails before training.
    The message quotes the first such pair's source from `train_texts` (the kept pairs as text, row for row): its
    index counts the pairs kept after filtering, no line of the files."""
    try:
        return token_budget_sampler(train_dataset, training_args)
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


def compile_dynamic_from_the_second_shape() -> None:
    """--torch_compile: let torch.compile compile one graph for the first batch shape and one with dynamic shapes at
    the second, as it does by default. `accelerate launch` writes ACCELERATE_DYNAMO_USE_DYNAMIC=False unless given
    --dynamo_use_dynamic (a flag that cannot say false), and the Trainer's compile then compiles a static graph for
    every shape of the token-budget batches, up to torch's recompile limit, after which it runs them eagerly."""
    if os.environ.get("ACCELERATE_DYNAMO_USE_DYNAMIC") == "False":
        del os.environ["ACCELERATE_DYNAMO_USE_DYNAMIC"]


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


class TrainingStopped(Exception):
    """Training stopped on a signal (`--stop_signals`) after saving its step's checkpoint; the message says which
    and how to resume. `scripts/train.py` exits with `STOPPED_STATUS`."""


STOPPED_STATUS = 75  # EX_TEMPFAIL: the run is not finished; resuming it goes on


def stop_after_signal(trainer, stop, command: str) -> None:
    """After `trainer.train()` stopped on a signal: make sure the step has its checkpoint (a save strategy that did not
    save it, `best` or `no`, saves it now), leave the stop's note as the folder's card, and raise `TrainingStopped`."""
    step = trainer.state.global_step
    checkpoint = Path(trainer.args.output_dir) / f"checkpoint-{step}"
    if stop.saved_step != step:  # every process alike, as the Trainer saved or not
        # transformers saves a whole checkpoint only from inside train(): its private save, pinned by a test
        trainer._save_checkpoint(trainer.model, trial=None)
    resume = f"{command} --resume_from_checkpoint last"
    if trainer.is_world_process_zero():
        replace_text(Path(trainer.args.output_dir) / MODEL_CARD_NAME, "\n".join([
            f"# {Path(trainer.args.output_dir).name}: training stopped at step {step} of {trainer.state.max_steps}",
            "",
            f"{stop.received or 'A signal'} stopped this run after optimizer step {step}. Its checkpoint, "
            f"`{checkpoint.name}`, holds the whole training state (model, optimizer, schedule, random states, data "
            "position and training time), and resuming it ends with the weights an uninterrupted run would have.",
            "This card is replaced by the model's card when the run finishes. Resume with:",
            "",
            "```bash",
            resume,
            "```",
            "",
        ]))
    raise TrainingStopped(
        f"stopped by {stop.received or 'a signal on another process'} after optimizer step {step} of "
        f"{trainer.state.max_steps}: {checkpoint} holds the run; resume with --resume_from_checkpoint last"
    )


class RefusedByAnotherProcess(ConfigurationError):
    """The refusal another process of the run made and printed; this process stops with it, without printing it
    again, unless `report_here`: it is its machine's first process and no process of its machine refused, so that
    every machine's log says why the run stopped."""

    def __init__(self, message: str, report_here: bool = False):
        super().__init__(message)
        self.report_here = report_here


def stop_with_every_refusal(training_args, refusal: Exception | None) -> None:
    """Every process's refusal, gathered (a barrier too): this process's own raised, else another's as
    `RefusedByAnotherProcess`, its text led by the refusing process's place where the run has several machines
    ("machine 1: --data_dir ... does not exist"); nothing where none refused."""
    world = World.from_environment()
    refusals = [None] * training_args.world_size
    shared = None if refusal is None else " ".join(str(refusal).split())
    torch.distributed.all_gather_object(refusals, shared, group=waiting_group())
    if refusal is not None:
        raise refusal
    refused = [(rank, text) for rank, text in enumerate(refusals) if text is not None]
    if refused:
        rank, text = refused[0]
        machines = {world.machine_of(rank) for rank, _ in refused}
        where = f"machine {world.machine_of(rank)}: " if world.machines > 1 else ""
        raise RefusedByAnotherProcess(where + text, report_here=world.local_rank == 0
                                      and world.machine not in machines)


def on_every_process(training_args, work):
    """`work()` on every process at once; a `ConfigurationError` on any stops all (`stop_with_every_refusal`). Any
    other error of `work()` is shared the same way before it is raised, so that no process is left waiting for one
    that failed."""
    if training_args.world_size <= 1:
        return work()
    result, refusal = None, None
    try:
        result = work()
    except Exception as error:  # noqa: BLE001 - shared with the others, then raised here as it was
        refusal = error
    stop_with_every_refusal(training_args, refusal)
    return result


PREPARATION_TURNS = 3  # the first process; the first process of each other machine; the rest


def in_turns(training_args, turn: int, work):
    """`work()` in turns, each process in its `turn` (0, 1, ... PREPARATION_TURNS - 1), the later ones reading what
    the earlier wrote. An error raised by any process stops every process, the others with `RefusedByAnotherProcess`:
    the others no longer go on alone (reading an earlier run's tokenizer from a folder the first refused) into
    training, to fail there with a traceback. The others wait in `waiting_group`, as long as a turn's preparation
    takes (a process that dies ends the wait at once)."""
    if training_args.world_size <= 1:
        return work()
    result = None
    for current in range(PREPARATION_TURNS):
        refusal = None
        if turn == current:
            try:
                result = work()
            except Exception as error:  # noqa: BLE001 - shared with the others, then raised here as it was
                refusal = error
        stop_with_every_refusal(training_args, refusal)  # also each turn's barrier
    return result


def shared_run_token(world_size: int) -> str | None:
    """One random name for the run, the same on every process (None for one process): the first process writes it
    into output_dir's lock file, where the others look for it (`refuse_unshared_output_dir`)."""
    if world_size <= 1:
        return None
    token = [uuid.uuid4().hex[:16]]
    torch.distributed.broadcast_object_list(token, src=0, group=waiting_group())
    return token[0]


def refuse_unshared_output_dir(output_dir: Path, run_token: str, world: World) -> None:
    """Refuse to go on where this process's output_dir does not hold the lock file the first process wrote (with
    the run's token): the machines do not share the folder, and this machine's processes would find no tokenizer
    there and save their part of each checkpoint where rank 0 never looks."""
    found = RunLock.run_token(output_dir, run_token)
    if found == run_token:
        return
    seen = "holds another run's lock file" if found else "holds no lock file of this run"
    raise ConfigurationError(
        f"--output_dir {output_dir} on machine {world.machine} is not the folder rank 0 (machine 0) writes into (it "
        f"{seen}): the machines must share the output folder; give every machine one shared folder (a network file "
        "system) as --output_dir"
    )


def launch_command(argv: Sequence[str], world_size: int, distributed_type: str, machines: int = 1) -> str:
    """The command line of this run, for the model card: accelerate's flags as its launcher hands them to the script
    (the environment) where they change the run, i.e. the machines, the processes and mixed precision (accelerate's
    config file, if any, is not visible here; each machine's rank and the first one's address differ by machine,
    and are left out)."""
    launcher = "accelerate launch"
    machines_flag = f" --num_machines {machines}" if machines > 1 else ""
    if distributed_type == "FSDP":
        launcher += f" --use_fsdp{machines_flag} --num_processes {world_size}"
    elif world_size > 1:
        launcher += f" --multi_gpu{machines_flag} --num_processes {world_size}"
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
    world = World.from_environment()
    if world.processes > 1 and world.local_rank == 0:
        print(f"World: {world.description}", flush=True)

    def checks():
        config = validate_arguments(model_args, data_args, training_args)
        checkpoint = resolve_checkpoint(training_args)
        finishing = checkpoint is not None and refuse_finished_run(checkpoint, training_args)
        if checkpoint is not None:
            refuse_other_architecture(checkpoint, config)
            refuse_other_optimization(checkpoint, training_args)
            warn_of_later_checkpoints(checkpoint)
            warn_of_missing_random_state(checkpoint, training_args)
        refuse_earlier_run(training_args, checkpoint)
        return config, checkpoint, finishing

    # Every check that can refuse runs on every process before the first shared step, and the verdicts are shared
    # (also a barrier: every process checked the folder before any writes): a refusal on one machine ends every
    # machine at once, each with the refusing machine's line, instead of leaving the others waiting for it.
    config, checkpoint, finishing = on_every_process(training_args, checks)
    resuming = checkpoint is not None
    _default_generation_settings(training_args, data_args)
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False  # pushed once, after saving
    set_seed(training_args.seed)
    if training_args.use_cpu:
        torch.set_num_threads(training_args.cpu_threads or cpu_threads_per_process())
    if training_args.disable_tqdm:
        datasets.disable_progress_bars()  # `datasets`' own bars (map, filter) too, not only the Trainer's
        transformers.utils.logging.disable_progress_bar()  # and transformers' own ("Writing model shards" on a save)

    def load():
        loaded, sizes = load_corpus(data_args)
        if training_args.eval_strategy != "no" and "validation" not in loaded:
            raise ConfigurationError(f"evaluation needs a validation split, but the corpus has {list(loaded)}; add "
                                     "one or set --eval_strategy no")
        return loaded, sizes

    corpus, corpus_sizes = on_every_process(training_args, load)  # a corpus one machine cannot read stops them all
    has_validation = "validation" in corpus
    if not has_validation:
        training_args.load_best_model_at_end = False

    # The first process trains the tokenizer and checks the data, and only then writes into output_dir; then the first
    # process of each other machine, with the tokenizer it saved, once they found its lock file in their output_dir
    # (the machines share it), tokenizing into that machine's `datasets` cache; then the rest, which read that cache:
    # the corpus is tokenized once per machine.
    output_dir = Path(training_args.output_dir)
    first = training_args.process_index == 0
    run_token = shared_run_token(training_args.world_size)
    locks = []  # the run lock, once the first process holds it

    def prepare():
        if not first:
            refuse_unshared_output_dir(output_dir, run_token, world)
        tokenizer = get_tokenizer(
            data_args, corpus, checkpoint, config.max_position_embeddings - 1, train_here=first,
            tokenizer_dir=output_dir,
        )
        if isinstance(tokenizer, tuple):
            raise ConfigurationError(
                f"--resume_from_checkpoint {checkpoint} holds separate source/target tokenizers, which "
                "scripts/train.py does not support"
            )
        kept, tokenized, filter_report = prepare_pairs(corpus, tokenizer, max_length=data_args.max_length,
                                                       num_proc=data_args.preprocessing_num_workers)
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
        sampler = None
        if training_args.max_tokens is not None:
            sampler = check_token_budget(tokenized["train"], training_args, kept["train"])
        if first:  # every check passed: now the run may write, once no other run writes into output_dir
            run_lock = RunLock(output_dir)
            run_lock.acquire(run_token)
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
        return tokenizer, kept, tokenized, filter_report, sampler

    try:
        turn = 0 if first else 1 if world.local_rank == 0 else 2
        tokenizer, corpus, tokenized, filter_report, sampler = in_turns(training_args, turn, prepare)
        batches = EpochBatches.of(tokenized["train"], training_args, sampler)
        if resuming and not finishing and training_args.process_index == 0:
            warn_of_other_batches(checkpoint, batches)
        model = build_model(model_args, data_args, tokenizer, training_args)
        clock = TrainingClock.from_checkpoint(checkpoint)
        collator = DataCollatorForSeq2Seq(
            tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=training_args.pad_to_multiple_of
        )
        if training_args.torch_compile:  # the compiled model checks no ids: the batches are checked where made
            collator = TokenIdsChecked(collator, model.config)
            compile_dynamic_from_the_second_shape()
        trainer = TransformerSeq2SeqTrainer(
            model=model,
            args=training_args,
            train_dataset=tokenized["train"],
            train_batch_sampler=sampler,
            eval_dataset=tokenized["validation"] if has_validation else None,
            data_collator=collator,
            processing_class=tokenizer,
            callbacks=[
                clock, CheckpointSchedule(training_args.save_strategy.value), batches,
                *([StopTime(clock, training_args.stop_time_hours)] if training_args.stop_time_hours else []),
                *([StopSignals.from_checkpoint(checkpoint, training_args.stop_signals)]
                  if training_args.stop_signals else []),
                *([CompileTime()] if training_args.torch_compile else []),
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

    On several processes, a collective that fails because another process died or stopped answering raises
    `ProcessLost`, whose one line names the lost process and the newest complete checkpoint to resume from.
    """
    world = World.from_environment()
    heartbeats = Heartbeats(world).start()
    built = []  # the run's setup, once made
    try:
        return _train(model_args, data_args, training_args, config_path, argv, built, heartbeats)
    except Exception as error:
        if world.processes <= 1 or (cause := lost_peer_error_in(error)) is None:
            raise
        trainer = built[0].trainer if built else None
        step = trainer.state.global_step if trainer is not None else None
        output_dir = Path(training_args.output_dir)
        # A save the loss cut short is left where it is: another process may still be writing it, and the next
        # launch skips a checkpoint while it is incomplete (`resolve_checkpoint`).
        newest = next((str(path) for path in reversed(list_checkpoints(output_dir) if output_dir.is_dir() else [])
                       if checkpoint_problem(path) is None), None)
        raise ProcessLost(lost_process_message(world, heartbeats.check(), cause, step, training_args.ddp_timeout,
                                               newest)) from error
    finally:
        heartbeats.ended()  # finished, refused or failed here: no other process is to take this one for lost


def _train(model_args, data_args, training_args, config_path, argv, built: list, heartbeats: Heartbeats) -> dict:
    setup = setup_training(model_args, data_args, training_args)
    built.append(setup)
    setup.trainer.batch_made = heartbeats.batch_made
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
        command = launch_command(argv, training_args.world_size, trainer.accelerator.distributed_type.value,
                                 World.from_environment().machines)
        launches = LaunchHistory.from_checkpoint(setup.checkpoint, command)
        trainer.add_callback(launches)  # each checkpoint records the run's launches up to it
        if setup.finishing:
            finish_from_checkpoint(trainer, setup.checkpoint)
            metrics, this_launch_seconds = {}, 0.0  # the checkpoint's clock holds the whole training time
        else:
            try:
                train_result = trainer.train(resume_from_checkpoint=setup.checkpoint)
            finally:
                if trainer.stop_signals is not None:
                    trainer.stop_signals.restore()
            if (stop := trainer.stop_signals) is not None and stop.stopping:
                stop_after_signal(trainer, stop, command)
            compiling = next((c for c in trainer.callback_handler.callbacks if isinstance(c, CompileTime)), None)
            if compiling is not None:  # the steps that compiled, apart from training: train_compile_seconds
                train_result.metrics.update(train_compile_seconds=round(compiling.seconds, 2),
                                            train_compiled_graphs=compiling.graphs)
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
                config_path=config_path, command=launches.card_text(), schedule=schedule_description(
                    training_args.lr_scheduler_type, training_args.learning_rate,
                    training_args.get_warmup_steps(trainer.state.max_steps),  # a fraction of the steps, or a count
                ), training_seconds=training_seconds(trainer, this_launch_seconds),
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
        wait_for_the_others()  # the others end with the first, not in the launcher's wait of 5 minutes at most
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
