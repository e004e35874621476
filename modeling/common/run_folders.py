"""The names of what a training run writes, and the checks that read them: its `checkpoint-<step>` folders, the
Trainer's state, the training state that belongs to one checkpoint only, and where an output folder would be inside
a checkpoint that the Trainer deletes when it rotates them."""

from __future__ import annotations

import os
import re
from pathlib import Path

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE_NAME = "trainer_state.json"
# Training state that belongs to one checkpoint only (the Trainer's; under FSDP also accelerate's optimizer.bin and
# pytorch_model_fsdp.bin, or folders optimizer_0/ and pytorch_model_fsdp_0/): not copied into an averaged model, not
# uploaded to the Hub.
TRAINING_STATE_FILES = (TRAINER_STATE_NAME, "training_args.bin")
TRAINING_STATE_PREFIXES = ("optimizer", "scheduler", "scaler", "rng_state", "pytorch_model_fsdp")


def checkpoint_step(checkpoint: Path) -> int:
    """The optimizer step of a `checkpoint-<step>` folder."""
    return int(CHECKPOINT_PATTERN.match(checkpoint.name).group(1))


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The `checkpoint-<step>` folders in `directory`, oldest (lowest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory of checkpoints")
    return sorted((path for path in directory.iterdir() if CHECKPOINT_PATTERN.match(path.name)), key=checkpoint_step)


def refuse_output_in_checkpoint(output_dir: str | os.PathLike) -> None:
    """ValueError where `output_dir` is inside (or is) a Trainer checkpoint of a run, a `checkpoint-<step>` folder
    holding a trainer state or beside other checkpoints: the Trainer deletes such folders, with whatever else they
    hold, when it rotates the run's checkpoints (save_total_limit). A model folder that is merely named so is not."""
    resolved = Path(output_dir).resolve()
    for folder in (resolved, *resolved.parents):
        if CHECKPOINT_PATTERN.match(folder.name) and (
            (folder / TRAINER_STATE_NAME).is_file()
            or (folder.parent.is_dir() and len(list_checkpoints(folder.parent)) > 1)
        ):
            raise ValueError(
                f"the output directory {output_dir} is inside the checkpoint {folder}, which the Trainer deletes, with "
                "all it holds, when it rotates the run's checkpoints (save_total_limit); choose a folder outside it"
            )
