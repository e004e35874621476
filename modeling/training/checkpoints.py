"""Checkpoint averaging (§6.1: "we used a single model obtained by averaging the last 5 checkpoints").

Works on the safetensors weights of Trainer checkpoints (`checkpoint-<step>/model.safetensors`, or sharded with a
`model.safetensors.index.json`), like fairseq's `scripts/average_checkpoints.py`: every floating-point tensor is
the mean of the checkpoints' tensors (accumulated in float64); the other files of the newest checkpoint (config,
generation config, tokenizer, custom code) are copied so the result loads with the Auto classes; its evaluations,
card and training state are not.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..common.run_folders import (
    CHECKPOINT_PATTERN,
    TRAINER_STATE_NAME,
    TRAINING_STATE_FILES,
    TRAINING_STATE_PREFIXES,
    checkpoint_step,
    list_checkpoints,
    refuse_output_in_checkpoint,
)
from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..inference.model_card import MODEL_CARD_NAME, averaged_model_card
from ..pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR
from ..tokenization import load_tokenizers, same_vocabulary
from ..weight_files import (
    CHECKSUMS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    weight_files,
    weights_problem,
    write_checksums,
)

AVERAGED_FROM_NAME = "averaged_from.json"  # an averaged model's provenance: the checkpoints it averages
# The states every Trainer checkpoint holds (file-name prefix, the single-process file, what it is); with several
# processes rng_state_<rank>.pth, under FSDP optimizer.bin or optimizer_0/.
RESUMED_STATES = (
    ("optimizer", "optimizer.pt", "the optimizer's state"),
    ("scheduler", "scheduler.pt", "the learning-rate schedule's state"),
    ("rng_state", "rng_state.pth", "the random generators' state"),
)
# The config fields that fix the model's weights and what they mean: a checkpoint to resume or to average with
# another must agree on every one.
ARCHITECTURE_FIELDS = (
    "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "d_k", "d_v", "max_position_embeddings", "position_embedding_type",
    "norm_first", "tie_word_embeddings",
)


def architecture_value(saved: dict, name: str):
    """A field of a saved config.json (or a configuration's `to_dict()`) as the model it builds has it: a field it
    lacks (saved before the field existed) is its default, and an unset d_k or d_v (None) is d_model / heads, so
    that `--d_k 16` where d_model / heads is 16 is the same architecture."""
    value = saved.get(name, getattr(AnnotatedTransformerConfig, name, None))
    if name in ("d_k", "d_v") and value is None:
        heads = architecture_value(saved, "encoder_attention_heads")
        return architecture_value(saved, "d_model") // heads if heads else None
    return value





def last_checkpoints(directory: str | os.PathLike, n: int) -> list[Path]:
    """The `n` newest checkpoints of a training output directory: the last `n` saves.

    With `save_total_limit` the Trainer keeps the best checkpoint (on `metric_for_best_model`) beside the newest ones,
    so an old best one can sit among the `n` newest folders although it is not one of the last `n` saves (a gap
    in the steps, well beyond the saving interval, right after it): that is refused, naming it, rather than averaged.
    """
    if n < 1:
        raise ValueError(f"the number of checkpoints to average must be >= 1, got {n}")
    checkpoints = list_checkpoints(directory)
    if len(checkpoints) < n:
        raise ValueError(
            f"asked for the last {n} checkpoints, but {directory} holds {len(checkpoints)}: "
            f"{[path.name for path in checkpoints]}"
        )
    chosen = checkpoints[-n:]
    apart = saved_between(*chosen[:2]) if n >= 2 else False
    if apart is None:  # saved before the schedule was recorded: a gap well beyond the later saves' tells
        steps = [checkpoint_step(path) for path in chosen]
        gaps = [later - earlier for earlier, later in zip(steps, steps[1:])]
        apart = len(gaps) >= 2 and gaps[0] > 1.5 * max(gaps[1:])
    if apart and chosen[0].name == kept_best_checkpoint(chosen[-1]):
        raise ValueError(
            f"{chosen[0].name} is not one of the last {n} saves of {directory}: it is the best checkpoint, which the "
            f"Trainer keeps beside the newest ones when save_total_limit is reached. Average --last {n - 1}, name "
            f"the checkpoints with --checkpoints, or train with save_total_limit {n + 1}"
        )
    return chosen





def callback_record(state: dict, name: str) -> dict:
    """The arguments a trainer state (a checkpoint's trainer_state.json) records for its stateful callback `name`
    (the first, where several of that class were), {} without a record."""
    records = state.get("stateful_callbacks")
    saved = records.get(name) if isinstance(records, dict) else None
    saved = saved[0] if isinstance(saved, list) and saved else saved
    args = saved.get("args") if isinstance(saved, dict) else None
    return args if isinstance(args, dict) else {}


def saved_between(earlier: Path, later: Path) -> bool | None:
    """Whether the run saved a checkpoint between the checkpoints `earlier` and `later`, as the save strategy that
    `later` records shows (`CheckpointSchedule`), or None where it cannot tell (checkpoints saved before that record,
    a strategy without a cadence). Saving by steps saves at each multiple of `save_steps`; at epoch ends, at each
    whole epoch. A last save at the end of training (or where --stop_time_hours stopped it) falls off either cadence,
    and an earlier launch may have saved off it too, so only a save strictly between counts. A launch that resumed
    from a checkpoint between them (`LaunchHistory`) is one such save; checkpoints of launches with other save
    strategies cannot tell the rest."""
    states = [_read_json_object(checkpoint / TRAINER_STATE_NAME)[0] or {} for checkpoint in (earlier, later)]
    launches = callback_record(states[1], "LaunchHistory").get("launches")
    resumed = [Path(launch["resumed_from"]).name if isinstance(launch, dict)
               and isinstance(launch.get("resumed_from"), str) else None
               for launch in launches] if isinstance(launches, list) else []
    if any(checkpoint_step(earlier) < checkpoint_step(Path(name)) < checkpoint_step(later)
           for name in resumed if name and CHECKPOINT_PATTERN.match(name)):
        return True
    earlier_strategy, strategy = (callback_record(state, "CheckpointSchedule").get("save_strategy") for state in states)
    # `later`'s launch (its record's last) resumed from `earlier`: every save between them was that launch's
    if strategy != earlier_strategy and not (resumed and resumed[-1] == earlier.name):
        return None
    if strategy == "steps":
        save_steps = states[1].get("save_steps")
        if not isinstance(save_steps, (int, float)) or save_steps < 1:
            return None
        return (checkpoint_step(earlier) // save_steps + 1) * save_steps < checkpoint_step(later)
    if strategy == "epoch":
        epochs = [state.get("epoch") for state in states]
        if not all(isinstance(epoch, (int, float)) for epoch in epochs):
            return None
        return math.floor(epochs[0]) + 1 < epochs[1]
    return None


def kept_best_checkpoint(checkpoint: Path) -> str | None:
    """The folder name of the best checkpoint as of `checkpoint` (its `trainer_state.json`), None when unknown."""
    best = (_read_json_object(checkpoint / TRAINER_STATE_NAME)[0] or {}).get("best_model_checkpoint")
    return Path(best).name if isinstance(best, str) and best else None


def checkpoint_problem(checkpoint: str | os.PathLike) -> str | None:
    """Why a Trainer checkpoint folder cannot be resumed from (None if it can). The Trainer writes the weights first
    and `trainer_state.json` last, so a save cut short (kill -9, a full disk) lacks the state or has a short file.
    A checkpoint lacking one of its training states is refused too: the Trainer would silently start that state
    afresh (without `scheduler.pt` it loads no optimizer state either, and the schedule's warmup restarts).

    Saved by several processes, it must hold the random generators' state of each (`rng_state_<rank>.pth`, which
    each process writes itself, the last perhaps after the first process's trainer_state.json; the processes are
    those of the run that saved it, its `EpochBatches` record)."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        return "not a folder" if checkpoint.exists() else "no such folder"
    if (problem := _json_object_problem(checkpoint / TRAINER_STATE_NAME)) is not None:
        return f"{problem} (its save did not finish)"
    processes = callback_record(json_object(checkpoint / TRAINER_STATE_NAME), "EpochBatches").get(
        "settings", {}).get("processes")
    ranks = range(processes) if isinstance(processes, int) and processes > 1 else ()
    if lacking := [f"rng_state_{rank}.pth" for rank in ranks if not (checkpoint / f"rng_state_{rank}.pth").is_file()]:
        return f"no {', '.join(lacking)} (a process's random generators' state): its save did not finish"
    entries = sorted(checkpoint.iterdir())  # read once for both checks below
    missing = [f"{name} ({what})" for prefix, name, what in RESUMED_STATES
               if not any(entry.name.startswith(prefix) for entry in entries)]
    if len(missing) == len(RESUMED_STATES):
        # a run's folder has the best model and trainer_state.json too, but no optimizer, schedule or RNG state
        return ("no optimizer, schedule or RNG state: a model folder, not a Trainer checkpoint (resume from one of "
                "its checkpoint-* folders)")
    if missing:
        return f"no {' and no '.join(missing)}: resuming would start {'it' if len(missing) == 1 else 'them'} afresh"
    for path in entries:  # optimizer, scheduler, RNG state: torch.save's zip files, CRC-checked
        saved_by_torch = path.suffix in (".pt", ".pth", ".bin")
        if path.is_file() and path.name.startswith(TRAINING_STATE_PREFIXES) and saved_by_torch:
            if not zipfile.is_zipfile(path) or _corrupt_member(path) is not None:
                return f"{path.name} is truncated or corrupt (not a complete torch.save file)"
    if (problem := _json_object_problem(checkpoint / "config.json")) is not None:
        return problem
    return weights_problem(checkpoint)


def _corrupt_member(path: Path) -> str | None:
    """The first member of a zip file whose CRC does not match, or None."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return str(error)


def load_weights(checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder's safetensors weights (single file or shards), checked first."""
    problem = weights_problem(checkpoint)
    if problem is not None:
        raise ValueError(problem)
    weights = {}
    for path in weight_files(checkpoint):
        weights.update(load_file(path))
    return weights


def json_object(path: Path) -> dict:
    """The JSON object in `path`, or a ValueError naming the file when it is missing, not JSON, or not an object."""
    value, problem = _read_json_object(path)
    if problem == "missing":
        raise ValueError(f"{path} is missing: not a complete model checkpoint")
    if problem is not None:
        raise ValueError(f"{path} {problem}: the checkpoint is damaged")
    return value


def _json_object_problem(path: Path) -> str | None:
    """Why `path` is not a file holding a JSON object, in a few words naming it; None if it is one."""
    problem = _read_json_object(path)[1]
    return None if problem is None else f"no {path.name}" if problem == "missing" else f"{path.name} {problem}"


def _read_json_object(path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object in `path`, None), or (None, "missing" / "is not valid JSON" / "holds no JSON object")."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        return None, "missing"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, "is not valid JSON"
    return (value, None) if isinstance(value, dict) else (None, "holds no JSON object")


def refuse_mismatched_checkpoints(checkpoints: Sequence[Path]) -> None:
    """Checkpoints to average must be one model's: readable configs that agree on the architecture and the
    vocabulary, and the same tokenizer. Equal tensor shapes are not enough (post-norm and pre-norm layers, or two
    tokenizers of one size, have them)."""
    configs = [json_object(checkpoint / "config.json") for checkpoint in checkpoints]
    if (checkpoints[-1] / "generation_config.json").exists():  # copied into the average
        json_object(checkpoints[-1] / "generation_config.json")
    first, fields = checkpoints[0], ("model_type", *ARCHITECTURE_FIELDS, "vocab_size", "src_vocab_size")
    for checkpoint, config in zip(checkpoints[1:], configs[1:]):
        differences = [f"{name} {architecture_value(configs[0], name)} in {first}, "
                       f"{architecture_value(config, name)} in {checkpoint}"
                       for name in fields if architecture_value(config, name) != architecture_value(configs[0], name)]
        if differences:
            raise ValueError(f"the checkpoints hold different models ({'; '.join(differences)}): average checkpoints "
                             "of one run")
    # One run's training log grows by appending: an earlier checkpoint's log is the start of a later one's.
    logs = sorted(
        ((json_object(checkpoint / TRAINER_STATE_NAME).get("log_history") or [], checkpoint)
         for checkpoint in checkpoints if (checkpoint / TRAINER_STATE_NAME).is_file()),
        key=lambda log_and_checkpoint: len(log_and_checkpoint[0]),
    )
    for (earlier, earlier_checkpoint), (later, later_checkpoint) in zip(logs, logs[1:]):
        if later[: len(earlier)] != earlier:
            raise ValueError(f"{earlier_checkpoint} and {later_checkpoint} come from different runs (their training "
                             "logs differ); average checkpoints of one run")
    tokenizers = [(checkpoint, load_tokenizers(checkpoint)) for checkpoint in checkpoints
                  if (checkpoint / "tokenizer.json").is_file()]
    for checkpoint, tokenizer in tokenizers[1:]:
        if not same_vocabulary(tokenizer, tokenizers[0][1]):
            raise ValueError(f"{tokenizers[0][0]} and {checkpoint} have different tokenizers (vocabularies): their "
                             "token ids mean different things; average checkpoints of one run")


def holds_model(directory: str | os.PathLike) -> bool:
    """Whether `directory` already holds a model (weights or a config): writing one there would replace it."""
    directory = Path(directory)
    return any((directory / name).exists() for name in (WEIGHTS_NAME, WEIGHTS_INDEX_NAME, "config.json"))


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (in float64, cast back); other tensors taken from the last."""
    if not state_dicts:
        raise ValueError("nothing to average: no state dicts given")
    keys = set(state_dicts[0])
    for index, state_dict in enumerate(state_dicts[1:], start=1):
        if set(state_dict) != keys:
            difference = sorted(keys.symmetric_difference(state_dict))[:5]
            raise ValueError(f"checkpoint {index} has different tensors than checkpoint 0 (e.g. {difference})")
    averaged = {}
    for key in state_dicts[0]:
        tensors = [state_dict[key] for state_dict in state_dicts]
        shapes = {tuple(tensor.shape) for tensor in tensors}
        if len(shapes) > 1:
            raise ValueError(f"tensor {key!r} has different shapes across checkpoints: {sorted(shapes)}")
        if len(dtypes := {tensor.dtype for tensor in tensors}) > 1:  # the mean would take the first one's
            raise ValueError(f"tensor {key!r} has different dtypes across checkpoints ({sorted(map(str, dtypes))}): "
                             "convert the checkpoints to one dtype first")
        if tensors[0].is_floating_point():
            total = torch.zeros(tensors[0].shape, dtype=torch.float64)
            for tensor in tensors:
                total += tensor.to(torch.float64)
            averaged[key] = (total / len(tensors)).to(tensors[0].dtype).contiguous()
        else:
            averaged[key] = tensors[-1].clone()
    return averaged


def average_checkpoints(
    checkpoints: Sequence[str | os.PathLike], output_dir: str | os.PathLike
) -> Path:
    """Average the weights of `checkpoints` into a loadable model folder `output_dir`.

    The non-weight files (config, generation config, tokenizer, custom code) come from the last checkpoint given;
    optimizer, scheduler and trainer state are left out. The model card is the run's (the checkpoints' parent folder),
    renamed, with the run's scores replaced by the list of averaged checkpoints (`averaged_model_card`). Returns the
    output directory.
    """
    checkpoints = [Path(checkpoint) for checkpoint in checkpoints]
    if not checkpoints:
        raise ValueError("nothing to average: no checkpoints given")
    for checkpoint in checkpoints:
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} is not a directory")
    resolved = [checkpoint.resolve() for checkpoint in checkpoints]
    repeated = sorted({str(path) for path in resolved if resolved.count(path) > 1})
    if repeated:
        raise ValueError(f"checkpoint(s) {', '.join(repeated)} given more than once: each would weigh double")
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"the output directory {output_dir} is a file; choose a folder")
    if output_dir.resolve() in {checkpoint.resolve() for checkpoint in checkpoints}:
        raise ValueError(f"the output directory {output_dir} is one of the checkpoints; choose another")
    refuse_output_in_checkpoint(output_dir)
    if holds_model(output_dir):
        raise ValueError(
            f"the output directory {output_dir} already holds a model (its weights and model card would no longer "
            "match); choose a new folder"
        )
    if output_dir.is_dir() and (entries := sorted(path.name for path in output_dir.iterdir())):
        raise ValueError(
            f"the output directory {output_dir} already holds files ({', '.join(entries[:5])}), which the averaged "
            "model's would replace; choose a new or empty folder"
        )
    for checkpoint in checkpoints:
        if list_checkpoints(checkpoint):
            raise ValueError(
                f"{checkpoint} is a run folder (it holds checkpoint-* folders), not a checkpoint: give its "
                "checkpoints, or average its last N with --last N"
            )
    refuse_mismatched_checkpoints(checkpoints)  # before the weights are read: they may take minutes
    averaged = average_state_dicts([load_weights(checkpoint) for checkpoint in checkpoints])

    output_dir.mkdir(parents=True, exist_ok=True)
    newest = checkpoints[-1]
    for path in newest.iterdir():
        if path.is_dir():  # a target tokenizer; not evaluations (eval-*) or anything else of that checkpoint's
            if path.name == TARGET_TOKENIZER_SUBDIR:
                shutil.copytree(path, output_dir / path.name)
            continue
        skip = (
            path.name.startswith(".")  # no model file: a temporary file left by a kill, a file browser's
            or path.name in TRAINING_STATE_FILES
            or path.name.startswith(TRAINING_STATE_PREFIXES)
            or path.name in (WEIGHTS_INDEX_NAME, CHECKSUMS_NAME, MODEL_CARD_NAME)  # the card: the run's, below
            or path.suffix == ".safetensors"
        )
        if not skip:
            shutil.copy2(path, output_dir / path.name)
    save_file(averaged, output_dir / WEIGHTS_NAME, metadata={"format": "pt"})
    write_checksums(output_dir)
    (output_dir / AVERAGED_FROM_NAME).write_text(
        json.dumps({"checkpoints": [str(checkpoint) for checkpoint in checkpoints]}, indent=2) + "\n"
    )
    averaged_model_card(newest.parent, output_dir, checkpoints)
    return output_dir


__all__ = [
    "average_checkpoints",
    "callback_record",
    "average_state_dicts",
    "checkpoint_problem",
    "holds_model",
    "last_checkpoints",
    "list_checkpoints",
    "load_weights",
    "refuse_output_in_checkpoint",
]
