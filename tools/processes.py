"""What the repository's tools record and start, in one place: a command as a user types it, for a results file
(`as_typed`), and a free port on the loopback address for a process they start (`free_port`). Repository tooling,
not installed."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def as_typed(command: Sequence[str], named: dict | None = None) -> str:
    """`command` as a user types it, for a results file: the interpreter as `python`, accelerate's launcher module as
    `accelerate launch`, each folder of `named` (folder -> a variable's name, such as a benchmark's own temporary
    folder -> "$BENCHMARK_DIR") by its name, paths under the working folder relative to it and those under the
    temporary folder from `$TMPDIR`, so that a recorded command says what ran and nothing of where."""
    import shlex
    import tempfile

    words = [str(word) for word in command]
    if words and os.path.basename(words[0]).startswith("python"):
        words[0] = "python"
    if words[:3] == ["python", "-m", "accelerate.commands.launch"]:
        words[:3] = ["accelerate", "launch"]
    here, temporary = os.getcwd() + os.sep, tempfile.gettempdir().rstrip(os.sep) + os.sep
    replacements = [(str(folder).rstrip(os.sep) + os.sep, f"{name}/") for folder, name in (named or {}).items()]
    replacements += [(here, ""), (temporary, "$TMPDIR/")]

    def typed(word: str) -> str:
        for folder, name in replacements:
            word = word.replace(folder, name)
        return word

    words = [typed(word) if os.sep in word else word for word in words]
    return " ".join(word if word.startswith("$") and "'" not in word else shlex.quote(word) for word in words)


__all__ = ["as_typed", "free_port"]
