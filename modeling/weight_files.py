"""The weights files of a model folder: safetensors only, each with its SHA-256 in `checksums.sha256`.

safetensors cannot execute code, but it has no checksum: a truncated file fails with a message that names no file,
and a flipped bit in the tensor data loads silently. So every save writes the digests (in `sha256sum` format, so
`sha256sum -c checksums.sha256` checks a folder too), and every load first checks that each weights file is
complete and, where digests exist, unchanged, naming the file that is not.

This file travels to the Hub with the modeling code (a relative import of it): standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CHECKSUMS_NAME = "checksums.sha256"


class CorruptWeightsError(OSError):
    """A weights file that is missing, incomplete or changed since it was saved; the message names the file."""


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The safetensors files of a model folder: `model.safetensors`, or the shards its index lists."""
    folder = Path(folder)
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    index = folder / WEIGHTS_INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shards = sorted(set(weight_map.values()))
            if not shards or not all(isinstance(shard, str) for shard in shards):
                raise ValueError("its weight_map names no shard, or a shard by something other than a file name")
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # not JSON, or JSON of another shape
            raise CorruptWeightsError(f"{index} is not a valid safetensors index ({error!r})") from None
        return [folder / shard for shard in shards]
    raise CorruptWeightsError(f"{folder} holds no {WEIGHTS_NAME} (nor {WEIGHTS_INDEX_NAME}): no weights to load")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | os.PathLike) -> Path:
    """Write `checksums.sha256` for the weights files of `folder`."""
    folder = Path(folder)
    lines = [f"{sha256(path)}  {path.name}\n" for path in weight_files(folder)]
    (folder / CHECKSUMS_NAME).write_text("".join(lines), encoding="utf-8")
    return folder / CHECKSUMS_NAME


def safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file (None if it is): the 8-byte header size, the JSON header and
    the data it describes must all be there, and nothing after it."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as file:
            prefix = file.read(8)
            if len(prefix) < 8:
                return f"{size} bytes, too short for a safetensors header"
            (header_size,) = struct.unpack("<Q", prefix)
            if header_size > size - 8:
                return f"its header claims {header_size} bytes but the file has {size}: truncated or not safetensors"
            header = json.loads(file.read(header_size))
    except OSError as error:
        return f"unreadable ({error})"
    except (ValueError, UnicodeDecodeError):
        return "its header is not valid JSON: the file is corrupt or not safetensors"
    if not isinstance(header, dict):
        return "its header is not a JSON object: the file is corrupt or not safetensors"
    try:
        tensors = [entry for name, entry in header.items() if name != "__metadata__"]
        data_end = max((entry["data_offsets"][1] for entry in tensors), default=0)
    except (TypeError, KeyError, IndexError):
        return "its header does not describe tensors: the file is corrupt or not safetensors"
    expected = 8 + header_size + data_end
    if size != expected:
        return f"{size} bytes where its header describes {expected}: {'truncated' if size < expected else 'corrupt'}"
    return None


def weights_problem(folder: str | os.PathLike) -> str | None:
    """Why the weights of a model folder cannot be trusted (None if they can), naming the file."""
    folder = Path(folder)
    try:
        files = weight_files(folder)
    except CorruptWeightsError as error:
        return str(error)
    for path in files:
        if not path.is_file():
            return f"{path} is missing (listed in {WEIGHTS_INDEX_NAME})"
        problem = safetensors_problem(path)
        if problem is not None:
            return f"{path} is not a complete safetensors file: {problem}"
    checksums = folder / CHECKSUMS_NAME
    if checksums.is_file():
        expected = {}
        for number, line in enumerate(checksums.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if line.strip():
                parts = line.split(maxsplit=1)
                if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdef" for c in parts[0]):
                    return (
                        f"{checksums} line {number} is not '<SHA-256>  <file>': the checksum file is corrupt, so "
                        "the weights cannot be checked (sha256sum -c shows the same)"
                    )
                expected[parts[1].removeprefix("*")] = parts[0]  # "*name": sha256sum's binary mode
        for path in files:
            if path.name not in expected:
                return (
                    f"{checksums} has no SHA-256 for {path.name}, so it cannot be checked: write the file again "
                    f"(`sha256sum {path.name} > {CHECKSUMS_NAME}` in the folder) or delete it"
                )
            if sha256(path) != expected[path.name]:
                return (
                    f"{path} does not match its SHA-256 in {checksums}: the file changed after it was saved "
                    f"(corrupted on disk or in transfer); delete {CHECKSUMS_NAME} only if the change was yours"
                )
    return None


def verify_weights(folder: str | os.PathLike) -> None:
    """Raise `CorruptWeightsError` naming the file if the weights of `folder` are incomplete or changed."""
    problem = weights_problem(folder)
    if problem is not None:
        raise CorruptWeightsError(problem)


__all__ = [
    "CHECKSUMS_NAME",
    "WEIGHTS_INDEX_NAME",
    "WEIGHTS_NAME",
    "CorruptWeightsError",
    "safetensors_problem",
    "verify_weights",
    "weight_files",
    "weights_problem",
    "write_checksums",
]
