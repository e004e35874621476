"""Uploading a trained model folder to the Hugging Face Hub with huggingface_hub's `create_repo` + `upload_folder`.

`hub_upload_files` lists exactly what `push_folder_to_hub` sends (the same ignore patterns, applied by
huggingface_hub's own filter), so what would be uploaded can be checked without a network.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.hf_api import DEFAULT_IGNORE_PATTERNS
from huggingface_hub.utils import filter_repo_objects
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

# Intermediate checkpoints stay local (they hold optimizer state); files starting with "_" are scratch.
HUB_IGNORE_PATTERNS = ["_*", f"{PREFIX_CHECKPOINT_DIR}-*", f"{PREFIX_CHECKPOINT_DIR}-*/**"]


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


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload model trained with annotated-transformer-hf",
    endpoint: str | None = None,
):
    """Create (if needed) the model repo `repo_id` and upload `folder` to it; returns the commit info.

    `endpoint` is the Hub's address (default: `HF_ENDPOINT`, else https://huggingface.co).

    Raises `HubUploadError` with the reason (no network, no token, no permission, ...) and a way to upload later.
    """
    folder = Path(folder)
    files = hub_upload_files(folder)
    api = HfApi(token=token, endpoint=endpoint)
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        return api.upload_folder(
            repo_id=repo_url.repo_id,
            folder_path=folder,
            commit_message=commit_message,
            revision=revision,
            ignore_patterns=HUB_IGNORE_PATTERNS,
        )
    except Exception as error:  # network, authentication and HTTP errors all end the same way
        raise HubUploadError(
            f"Could not push {folder} to the Hub as {repo_id!r}: {type(error).__name__}: {error}\n"
            f"The model is saved locally in {folder} ({len(files)} files). Upload it later with "
            f"`hf upload {repo_id} {folder} --exclude '{PREFIX_CHECKPOINT_DIR}-*'` once the Hub is reachable "
            "and you are logged in (`hf auth login`)."
        ) from error


__all__ = ["HUB_IGNORE_PATTERNS", "HubUploadError", "hub_upload_files", "push_folder_to_hub"]
