"""Checkpoint averaging (§6.1: "we used a single model obtained by averaging the last 5 checkpoints").

Works on the safetensors weights of Trainer checkpoints (`checkpoint-<step>/model.safetensors`, or sharded with a
`model.safetensors.index.json`), like fairseq's `scripts/average_checkpoints.py`: every floating-point tensor is
the mean of the checkpoints' tensors (accumulated in float64); the other files of the newest checkpoint (config,
generation config, tokenizer, custom code) are copied so the result loads with the Auto classes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# Training state that belongs to one checkpoint only; not copied into the averaged model.
TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
TRAINING_STATE_PREFIXES = ("rng_state",)


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The `checkpoint-<step>` folders in `directory`, oldest (lowest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory of checkpoints")
    found = [(int(m.group(1)), path) for path in directory.iterdir() if (m := CHECKPOINT_PATTERN.match(path.name))]
    return [path for _, path in sorted(found)]


def last_checkpoints(directory: str | os.PathLike, n: int) -> list[Path]:
    """The `n` newest checkpoints of a training output directory."""
    if n < 1:
        raise ValueError(f"the number of checkpoints to average must be >= 1, got {n}")
    checkpoints = list_checkpoints(directory)
    if len(checkpoints) < n:
        raise ValueError(
            f"asked for the last {n} checkpoints, but {directory} holds {len(checkpoints)}: "
            f"{[path.name for path in checkpoints]}"
        )
    return checkpoints[-n:]


def load_weights(checkpoint: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder's safetensors weights (single file or shards)."""
    checkpoint = Path(checkpoint)
    if (checkpoint / WEIGHTS_NAME).is_file():
        return load_file(checkpoint / WEIGHTS_NAME)
    if (checkpoint / WEIGHTS_INDEX_NAME).is_file():
        shards = sorted(set(json.loads((checkpoint / WEIGHTS_INDEX_NAME).read_text())["weight_map"].values()))
        weights = {}
        for shard in shards:
            weights.update(load_file(checkpoint / shard))
        return weights
    raise FileNotFoundError(f"no {WEIGHTS_NAME} or {WEIGHTS_INDEX_NAME} in {checkpoint}")


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
    optimizer, scheduler and trainer state are left out. Returns the output directory.
    """
    checkpoints = [Path(checkpoint) for checkpoint in checkpoints]
    if not checkpoints:
        raise ValueError("nothing to average: no checkpoints given")
    for checkpoint in checkpoints:
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"checkpoint {checkpoint} is not a directory")
    output_dir = Path(output_dir)
    if output_dir.resolve() in {checkpoint.resolve() for checkpoint in checkpoints}:
        raise ValueError(f"the output directory {output_dir} is one of the checkpoints; choose another")
    averaged = average_state_dicts([load_weights(checkpoint) for checkpoint in checkpoints])

    output_dir.mkdir(parents=True, exist_ok=True)
    newest = checkpoints[-1]
    for path in newest.iterdir():
        skip = (
            path.name in TRAINING_STATE_FILES
            or path.name.startswith(TRAINING_STATE_PREFIXES)
            or path.name == WEIGHTS_INDEX_NAME
            or (path.suffix == ".safetensors")
        )
        if skip:
            continue
        if path.is_dir():
            shutil.copytree(path, output_dir / path.name, dirs_exist_ok=True)
        else:
            shutil.copy2(path, output_dir / path.name)
    save_file(averaged, output_dir / WEIGHTS_NAME, metadata={"format": "pt"})
    (output_dir / "averaged_from.json").write_text(
        json.dumps({"checkpoints": [str(checkpoint) for checkpoint in checkpoints]}, indent=2) + "\n"
    )
    return output_dir


__all__ = ["average_checkpoints", "average_state_dicts", "last_checkpoints", "list_checkpoints", "load_weights"]
