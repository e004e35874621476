"""The weights files of a model folder: safetensors only, each with its SHA-256 in `checksums.sha256`.

safetensors cannot execute code, but it has no checksum: a truncated file fails with a message that names no file,
and a flipped bit in the tensor data loads silently. So every save writes the digests (in `sha256sum` format, so
`sha256sum -c checksums.sha256` checks a folder too), and every load first checks each weights file:

- refused (`CorruptWeightsError`, naming the file): a file that is missing, truncated, longer than its header
  describes, or whose header is not a safetensors header (not JSON, a tensor without a known dtype, a shape that does
  not fit its byte range, byte ranges with holes or overlaps);
- warned about, and loaded: a complete file whose SHA-256 differs from the saved digest (rewritten by another tool, a
  converter, safetensors itself, an upload; or a flipped bit in the tensor data), and a checksum file that cannot be
  read or lists no digest for a file. `weights_problem(folder)`, which resuming and the Hub upload use, counts those
  as problems too.

This file travels to the Hub with the modeling code (a relative import of it): standard library only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from pathlib import Path

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CHECKSUMS_NAME = "checksums.sha256"

logger = logging.getLogger(__name__)


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


# Bytes per element of each safetensors dtype (sub-byte and unknown dtypes are checked for their byte range only).
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}


def safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file (None if it is): the 8-byte header size, a JSON header whose
    tensors each have a dtype, a shape and a byte range that fits it, ranges that tile the data without a hole or an
    overlap, and the data they describe, with nothing after it."""
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
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not (isinstance(dtype, str) and all(isinstance(n, int) and n >= 0 for n in [*shape, begin, end])
                    and begin <= end):
                raise ValueError
        except (TypeError, KeyError, ValueError):
            return f"its header does not describe the tensor {name!r}: the file is corrupt or not safetensors"
        elements = 1
        for n in shape:
            elements *= n
        if dtype in DTYPE_SIZES and end - begin != elements * DTYPE_SIZES[dtype]:
            return (f"its header gives the tensor {name!r} ({dtype}, shape {shape}) {end - begin} bytes, not "
                    f"{elements * DTYPE_SIZES[dtype]}: the header is corrupt")
        ranges.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            return f"its header leaves a hole or an overlap before the tensor {name!r}: the header is corrupt"
        position = end
    expected = 8 + header_size + position
    if size != expected:
        return f"{size} bytes where its header describes {expected}: {'truncated' if size < expected else 'corrupt'}"
    return None


def incomplete_weights(folder: str | os.PathLike) -> str | None:
    """Why the weights of a model folder cannot be loaded at all (None if they can), naming the file: missing, or
    not a complete safetensors file."""
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
    return None


def checksum_findings(folder: str | os.PathLike) -> list[str]:
    """What the folder's `checksums.sha256` says of its (complete) weights files: each that differs from its saved
    digest, or that it cannot vouch for (no such line, or an unreadable file); none without a checksum file."""
    folder = Path(folder)
    checksums = folder / CHECKSUMS_NAME
    if not checksums.is_file():
        return []
    expected = {}
    for number, line in enumerate(checksums.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            parts = line.split(maxsplit=1)
            if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdef" for c in parts[0]):
                return [f"{checksums} line {number} is not '<SHA-256>  <file>': the checksum file is corrupt, so the "
                        "weights cannot be checked (sha256sum -c shows the same)"]
            expected[parts[1].removeprefix("*")] = parts[0]  # "*name": sha256sum's binary mode
    findings = []
    for path in weight_files(folder):
        if path.name not in expected:
            findings.append(f"{checksums} has no SHA-256 for {path.name}, so it cannot be checked: write the file "
                            f"again (`sha256sum {path.name} > {CHECKSUMS_NAME}` in the folder) or delete it")
        elif sha256(path) != expected[path.name]:
            findings.append(f"{path} does not match its SHA-256 in {checksums}: the file changed after it was saved "
                            "(rewritten by another tool, such as a converter or an upload, or corrupted on disk or in "
                            f"transfer); delete {CHECKSUMS_NAME} if the change was yours")
    return findings


def weights_problem(folder: str | os.PathLike) -> str | None:
    """Why the weights of a model folder cannot be trusted (None if they can), naming the file: incomplete, or not
    what its checksum file says (resuming and the Hub upload refuse both)."""
    problem = incomplete_weights(folder)
    if problem is not None:
        return problem
    findings = checksum_findings(folder)
    return findings[0] if findings else None


def verify_weights(folder: str | os.PathLike) -> None:
    """Before loading: raise `CorruptWeightsError` naming the file if the weights of `folder` are incomplete; warn,
    naming it, where a complete file is not what the checksum file says (loaded as it is)."""
    problem = incomplete_weights(folder)
    if problem is not None:
        raise CorruptWeightsError(problem)
    for finding in checksum_findings(folder):
        logger.warning("%s; loading it as it is", finding)


__all__ = [
    "CHECKSUMS_NAME",
    "WEIGHTS_INDEX_NAME",
    "WEIGHTS_NAME",
    "CorruptWeightsError",
    "checksum_findings",
    "incomplete_weights",
    "safetensors_problem",
    "verify_weights",
    "weight_files",
    "weights_problem",
    "write_checksums",
]
