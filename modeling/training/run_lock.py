"""One training run per output_dir at a time.

The run's first process holds an exclusive advisory lock (`fcntl.flock`) on `output_dir/.training.lock` from its
first write into the folder until it returns. The operating system releases the lock when the process ends, however
it ends (`kill -9` included), so the file, which stays, never blocks a later run. While a run holds it, a second run
into the same folder is refused before it writes anything: for instance one resumed while the first still trains
(killing the `accelerate launch` process alone leaves its training process running), which would otherwise write the
same checkpoints at the same time. The file stays after the run (removing it while another run may be opening it
would let two runs lock two files), and it marks the folder as one a training run wrote into (`holds_run`), even one
stopped before it saved anything else. Where `fcntl` does not exist (Windows) nothing is locked.

A run of several processes also writes its machine's name and the run's token (one random name every process of
the run shares) on a second line: a process on another machine that does not find that token in its own
`--output_dir` knows that the machines do not share the folder (`run_token`).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from .arguments import ConfigurationError

RUN_LOCK_NAME = ".training.lock"


class RunLock:
    """The lock of one output_dir: `acquire()` takes it (creating the folder and the file) or refuses with
    `ConfigurationError` naming the process that holds it; `release()` gives it back."""

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / RUN_LOCK_NAME
        self._file = None

    def acquire(self, run_token: str | None = None) -> None:
        """Take the lock; `run_token`, in a run of several processes, is written after this process's id."""
        if self._file is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_file = open(self.path, "a+", encoding="utf-8")
        if fcntl is None:
            lock_file.close()  # the folder is marked, not locked
            return
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            lines = lock_file.read().split("\n")
            lock_file.close()
            holder, host = lines[0].strip() or "unknown", (lines[1].split() or [None])[0] if len(lines) > 1 else None
            where = f" on {host}" if host and host != socket.gethostname() else ""
            raise ConfigurationError(
                f"--output_dir {self.path.parent} is in use: another training process (pid {holder}{where}) is "
                "writing into it; wait for it to end or stop it (kill its process group: killing `accelerate launch` "
                "alone leaves the training process running)"
            ) from None
        lock_file.truncate(0)
        lock_file.write(f"{os.getpid()}\n" + (f"{socket.gethostname()} {run_token}\n" if run_token else ""))
        lock_file.flush()
        os.fsync(lock_file.fileno())  # on a shared file system, for the other machines' `run_token`
        self._file = lock_file

    @staticmethod
    def run_token(output_dir: str | os.PathLike, expected: str, wait_seconds: float = 5.0) -> str | None:
        """The run token in `output_dir`'s lock file, waiting up to `wait_seconds` for `expected` to appear there
        (a shared file system may show another machine's write late); None where there is no lock file or token."""
        path = Path(output_dir) / RUN_LOCK_NAME
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                lines = path.read_text(encoding="utf-8").split("\n")
            except OSError:
                lines = []
            token = lines[1].split()[1] if len(lines) > 1 and len(lines[1].split()) == 2 else None
            if token == expected or time.monotonic() >= deadline:
                return token
            time.sleep(0.2)

    def release(self) -> None:
        if self._file is None:
            return
        self._file.close()  # closing gives the lock back
        self._file = None
