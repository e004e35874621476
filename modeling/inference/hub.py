"""Uploading a trained model folder to the Hugging Face Hub, in one commit (huggingface_hub's `create_repo` +
`create_commit`).

The folder is checked first (`upload_problem`: a config, complete weights that match their checksums, the tokenizer);
`hub_upload_files` lists exactly what is sent (huggingface_hub's own ignore filter), so it can be checked without a
network; the model card is sent with its "How to use" loading the repo id (`hub_model_card`). The local folder is
never changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.hf_api import DEFAULT_IGNORE_PATTERNS
from huggingface_hub.utils import filter_repo_objects
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..common.run_folders import TRAINING_STATE_FILES, TRAINING_STATE_PREFIXES
from ..weight_files import weights_problem
from .model_card import MODEL_CARD_NAME, load_card, renamed_card
from .translation import check_model_folder

# Intermediate checkpoints and the state that resumes a run (optimizer, scheduler, RNG: pickles) stay local; files
# starting with "_" are scratch; hidden files (".env", ".netrc", ...) are never part of a model.
HUB_IGNORE_PATTERNS = [
    "_*", ".*", "**/.*", f"{PREFIX_CHECKPOINT_DIR}-*", f"{PREFIX_CHECKPOINT_DIR}-*/**", *TRAINING_STATE_FILES,
    *(f"{prefix}*" for prefix in TRAINING_STATE_PREFIXES),
]


# What a model folder holds: at its top, the saved model (config, weights, checksums, tokenizer, code, card), its
# run's results and an average's provenance; in subfolders, TensorBoard logs, `evaluate.py`'s outputs and a separate
# target tokenizer. Other files go only when asked for.
MODEL_FOLDER_PATTERNS = [  # top level only
    "README.md", "*.json", "*.safetensors", "*.py", "checksums.sha256", "emissions.csv",  # codecarbon's, as runs/ are
]
MODEL_SUBFOLDER_PATTERNS = ["runs/**", "eval-*/**", "target_tokenizer/**"]


class HubUploadError(RuntimeError):
    """The upload failed; the local folder is untouched."""


def hub_upload_files(folder: str | os.PathLike) -> list[str]:
    """The relative paths (POSIX) that `push_folder_to_hub(folder, ...)` uploads, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a directory")
    paths = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
    kept = filter_repo_objects(paths, ignore_patterns=[*HUB_IGNORE_PATTERNS, *DEFAULT_IGNORE_PATTERNS])
    return sorted(kept)


def other_files(files: list[str]) -> list[str]:
    """Those of `files` (paths to upload) that no model folder holds (`MODEL_FOLDER_PATTERNS` at the top, where a
    pattern's `*` would also match a `/`; `MODEL_SUBFOLDER_PATTERNS` below), sorted."""
    top, below = [name for name in files if "/" not in name], [name for name in files if "/" in name]
    kept = {*filter_repo_objects(top, allow_patterns=MODEL_FOLDER_PATTERNS),
            *filter_repo_objects(below, allow_patterns=MODEL_SUBFOLDER_PATTERNS)}
    return sorted(set(files) - kept)


def upload_problem(folder: str | os.PathLike, allow_other_files: bool = False) -> str | None:
    """Why `folder` should not go to the Hub as a model (None if it can): it is no model folder (config, weights,
    tokenizer), its model card's metadata does not parse, a file to upload links to one outside the folder or is
    none of a model folder's (`other_files`, unless `allow_other_files`), or its weights are incomplete or differ
    from their checksums."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder} is not a folder: give a model folder (the output_dir of scripts/train.py or an average)"
    try:
        check_model_folder(folder)
        if (folder / MODEL_CARD_NAME).is_file():
            load_card(folder / MODEL_CARD_NAME)
    except (FileNotFoundError, ValueError) as error:
        return str(error)
    files = hub_upload_files(folder)  # the folder is read once for both checks
    outside = [name for name in files if not (folder / name).resolve().is_relative_to(folder.resolve())]
    if outside:
        return (f"{folder}: {', '.join(outside)} link(s) to files outside the folder, which would be uploaded too; "
                "copy what belongs to the model into the folder, or remove the links")
    others = [] if allow_other_files else other_files(files)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        return (f"{folder} holds files that are not part of a model, which would be uploaded too: {shown}; move them "
                "out of the folder, or allow them (push_to_hub.py --allow_other_files)")
    return weights_problem(folder)


def hub_model_card(folder: str | os.PathLike, repo_id: str) -> str | None:
    """The text of `folder`'s model card as the repo `repo_id` shows it: named after the repo, its "How to use"
    loading `repo_id` instead of the local folder (`renamed_card`). None when the folder has no card."""
    path = Path(folder) / MODEL_CARD_NAME
    if not path.is_file():
        return None
    return renamed_card(load_card(path), repo_id, repo_id).content


def hub_commit_operations(folder: str | os.PathLike, repo_id: str) -> list[CommitOperationAdd]:
    """One `CommitOperationAdd` per file of `hub_upload_files(folder)`, the model card as `hub_model_card` has it."""
    folder = Path(folder)
    card = hub_model_card(folder, repo_id)

    def content(name: str) -> bytes | str:
        return card.encode("utf-8") if name == MODEL_CARD_NAME and card is not None else str(folder / name)

    return [CommitOperationAdd(path_in_repo=name, path_or_fileobj=content(name)) for name in hub_upload_files(folder)]


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload model trained with annotated-transformer-hf",
    endpoint: str | None = None,
    allow_other_files: bool = False,
):
    """Create (if needed) the model repo `repo_id` (and the branch `revision`) and upload `folder` to it in one
    commit; returns the commit info.

    `endpoint` is the Hub's address (default: `HF_ENDPOINT`, else https://huggingface.co).

    Raises ValueError naming the problem, before any network access, when the folder is not a complete model
    (`upload_problem`), and `HubUploadError` with the reason (no network, no token, no permission, ...) and a way to
    upload later when the upload fails.
    """
    folder = Path(folder)
    problem = upload_problem(folder, allow_other_files)
    if problem is not None:
        raise ValueError(problem)
    operations = hub_commit_operations(folder, repo_id)
    return commit_to_hub(
        repo_id, operations, what=str(folder), token=token, endpoint=endpoint, private=private,
        commit_message=commit_message, revision=revision,
        advice=f"The model is saved locally in {folder} ({len(operations)} files). Upload it later with "
               f"`python scripts/push_to_hub.py {folder} {repo_id}` once the Hub is reachable and you are logged in "
               "(`hf auth login`).",
    )


def commit_to_hub(
    repo_id: str,
    operations: list,
    *,
    what: str,
    advice: str,
    commit_message: str,
    repo_type: str = "model",
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
    **create_repo_kwargs,
):
    """Create the repo `repo_id` if needed (and the branch `revision`) and commit `operations` to it; returns the
    commit info. Any failure raises `HubUploadError`: "Could not push `what` ...", the error, then `advice`."""
    api = HfApi(token=token, endpoint=endpoint)
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type, **create_repo_kwargs)
        if revision is not None:
            api.create_branch(repo_url.repo_id, branch=revision, exist_ok=True, repo_type=repo_type)
        return api.create_commit(repo_id=repo_url.repo_id, repo_type=repo_type, operations=operations,
                                 commit_message=commit_message, revision=revision)
    except Exception as error:  # network, authentication and HTTP errors all end the same way
        raise HubUploadError(
            f"Could not push {what} to the Hub as {repo_id!r}: {type(error).__name__}: {error}\n{advice}"
        ) from error


__all__ = [
    "HUB_IGNORE_PATTERNS", "MODEL_FOLDER_PATTERNS", "MODEL_SUBFOLDER_PATTERNS", "HubUploadError", "commit_to_hub",
    "hub_commit_operations", "hub_model_card", "hub_upload_files", "other_files", "push_folder_to_hub",
    "upload_problem",
]
