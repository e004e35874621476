"""What every command-line script shares: one-line errors with exit status 2, argument types, and line I/O."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `prog: error: message`, with exit status 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def finite_float(value: str) -> float:
    """argparse type: a finite number (negative allowed)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}")
    return number


def same_file(path: str | Path, other: str | Path) -> bool:
    """Whether two paths name one file: the same path, a symbolic or a hard link."""
    return Path(path).exists() and Path(other).exists() and os.path.samefile(path, other)


def check_output_file(path: Path, option: str = "--output") -> None:
    """Raise ValueError unless `path` can be written as a file (not a folder; its folder exists and takes files):
    checked before any work whose result would then be lost. An existing file is opened, not changed; a new one is
    created and removed again. A device (/dev/null) or a named pipe with a reader is written to as it is."""
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file path")
    if path.is_symlink() and not path.exists():  # opening would create its target, unlinking would remove the link
        raise ValueError(f"{option} {path} is a link to {os.readlink(path)}, which does not exist")
    if not path.parent.is_dir():
        raise ValueError(f"{option} {path}: the folder {path.parent} does not exist")
    existed = path.exists()
    try:  # non-blocking: a named pipe without a reader is refused (ENXIO) instead of waiting for one
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666))
    except OSError as error:
        raise ValueError(f"{option} {path} cannot be written: {error.strerror or error}") from None
    if not existed:
        path.unlink()


def read_stdin_lines() -> list[str]:
    """Standard input's lines; as `modeling.tokenization.read_lines`, only "\\n" (and a "\\r" before it) ends one,
    and a UTF-8 byte order mark at the start is dropped (Windows PowerShell's pipes begin with one). The bytes are
    decoded as UTF-8 strictly, whatever the locale's error handler (C.UTF-8 passes bad bytes on)."""
    if hasattr(sys.stdin, "buffer"):
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"standard input is not valid UTF-8 ({error.reason} at byte {error.start})") from None
    else:  # a text stream put in its place
        text = sys.stdin.read()
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def check_utf8_arguments(texts: Sequence[str], name: str) -> None:
    """Raise ValueError naming the argument (`name`, numbered when there are several) unless each command-line text
    is valid UTF-8 (Python passes undecodable bytes of sys.argv on as lone surrogates)."""
    for number, text in enumerate(texts, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name if len(texts) == 1 else f'{name} {number}'} is not valid UTF-8") from None


def write_lines(lines: Iterable[str], path: Path | None = None) -> None:
    """One line per item to `path`, or to standard output when it is None."""
    text = "".join(f"{line}\n" for line in lines)
    if path is None:
        sys.stdout.write(text)
    else:
        path.write_text(text, encoding="utf-8")


__all__ = [
    "OneLineErrorParser", "check_output_file", "check_utf8_arguments", "finite_float", "positive_int",
    "read_stdin_lines", "write_lines",
]
