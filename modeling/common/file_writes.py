"""Files replaced whole: a text or an array is written to a file beside its target, then renamed over it, so that a
write stopped midway (an interrupt, a full disk) leaves the earlier file as it was, never a truncated one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def writing_pattern(name: str) -> str:
    """The names (fnmatch) of the files `replace_text` writes `name` through: hidden, and left only by a process
    killed outright (an upload leaves them out, a run folder may hold them)."""
    return f".{name}.*.writing"


def replace_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` as the file `path` (through a link, the file it names) whole or not at all, keeping the
    permissions of the file it replaces. Returns the path written."""
    path = Path(os.path.realpath(path))

    def write(temporary: Path) -> None:
        temporary.write_text(text, encoding="utf-8")
        if path.is_file():
            shutil.copymode(path, temporary)  # the file's permissions, not a new file's

    return _replace(path, write)


def replace_array(path: str | os.PathLike, array) -> Path:
    """Save a NumPy array as the `.npy` file `path`, whole or not at all (as `replace_text`). Returns the path."""
    import numpy as np

    # the temporary's name ends in .npy: `np.save` would add it to a name without it
    return _replace(Path(path), lambda temporary: np.save(temporary, array), suffix=".npy")


def _replace(path: Path, write: Callable[[Path], None], suffix: str = "") -> Path:
    """`write(temporary)` on a file beside `path`, named as `writing_pattern` matches (then `suffix`), then that file
    renamed over `path`; it is removed if the write or the rename fails. Returns `path`."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.writing{suffix}")  # one per process: two writers at once
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


__all__ = ["replace_array", "replace_text", "writing_pattern"]
