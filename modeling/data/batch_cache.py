"""Token-budget batches kept in the `datasets` cache beside the tokens they index.

Building the batches of a corpus reads every pair's token lengths, sorts them and fills the batches: about a second
per million pairs, at every launch and every resume. `cached_token_budget_sampler` keeps what it built (the padded
lengths and the batches: about 12 bytes a pair) as `.npy` files beside the tokens' Arrow files, keyed by the tokens'
fingerprint (which `datasets` finds the tokens' own cache by) and the sampler's settings, and the next launch with the
same tokens and settings memory-maps them: no length is read, nothing sorted or filled, and the index is file-backed
pages the kernel can drop rather than private memory. The lengths' digest a checkpoint records of its training pairs
(`batching.lengths_digest`) is kept in the manifest, so a launch on kept batches reads no length at all. The batches
do not depend on the process's rank, so every process of a run reads the same files. Tokens held in memory (no cache
file) are indexed every time."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from ..common.file_writes import replace_array, replace_text
from .batching import Batches, TokenBudgetBatchSampler, lengths_digest, sampler_settings, token_lengths
from .datasets_internals import cache_folder, fingerprint

logger = logging.getLogger(__name__)

VERSION = "batches v1"  # raised whenever the batches built from the same lengths and settings would change
ARRAYS = ("padded_source_lengths", "padded_target_lengths", "indices", "starts", "ends")


def cached_token_budget_sampler(dataset, max_tokens: int, **settings) -> TokenBudgetBatchSampler:
    """`TokenBudgetBatchSampler(*token_lengths(dataset), max_tokens, **settings)`, read from the `datasets` cache when
    an earlier call on the same tokens with the same settings kept it there (see the module doc), else built and
    kept. `settings`: the sampler's keywords (`rank` is not part of the key: every rank has the same batches)."""
    path = _cache_path(dataset, max_tokens, settings)
    found = _read(path, len(dataset), max_tokens, settings) if path is not None else None
    if found is not None and found.lengths_digest is not None:
        return found
    lengths = token_lengths(dataset)
    sampler = TokenBudgetBatchSampler(*lengths, max_tokens, **settings)
    sampler.lengths_digest = lengths_digest(lengths)
    if path is not None:
        _write(path, sampler)
    return sampler


def _cache_path(dataset, max_tokens: int, settings: dict) -> Path | None:
    folder = cache_folder(dataset)
    if folder is None:
        return None
    keyed = {name: value for name, value in sorted(sampler_settings(settings).items()) if name != "rank"}
    key = "\n".join([VERSION, fingerprint(dataset), str(len(dataset)), str(max_tokens), json.dumps(keyed)])
    return folder / f"batches-{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _read(path: Path, pairs: int, max_tokens: int, settings: dict) -> TokenBudgetBatchSampler | None:
    """The kept sampler, or None when there is none or one a stopped run left incomplete (it is built again)."""
    try:
        manifest = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        arrays = {name: np.load(path.with_suffix(f".{name}.npy"), mmap_mode="r") for name in ARRAYS}
        if manifest["pairs"] != pairs or manifest["batches"] != len(arrays["starts"]):
            return None
        batches = Batches(arrays["indices"], arrays["starts"], arrays["ends"])
        sampler = TokenBudgetBatchSampler.from_batches(
            arrays["padded_source_lengths"], arrays["padded_target_lengths"], batches, max_tokens, **settings)
        sampler.lengths_digest = manifest.get("lengths_digest")  # None in a cache kept before it was recorded
        return sampler
    except (OSError, ValueError, KeyError):
        return None


def _write(path: Path, sampler: TokenBudgetBatchSampler) -> None:
    """The arrays first, each renamed into place whole; the manifest, written last, says they are complete."""
    arrays = {
        "padded_source_lengths": sampler.padded_source_lengths,
        "padded_target_lengths": sampler.padded_target_lengths,
        "indices": sampler.batches.indices,
        "starts": sampler.batches.starts,
        "ends": sampler.batches.ends,
    }
    try:
        for name, array in arrays.items():
            replace_array(path.with_suffix(f".{name}.npy"), array)
        replace_text(path.with_suffix(".json"), json.dumps({
            "version": VERSION, "pairs": len(sampler.padded_source_lengths), "batches": len(sampler.batches),
            "lengths_digest": sampler.lengths_digest}))
    except OSError as error:  # a full or read-only cache: the next launch builds the batches again
        logger.warning("could not keep the batches in the datasets cache (%s)", error)
