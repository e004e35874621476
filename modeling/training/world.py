"""The processes of a run on one machine or several: who they are (`World`), what the others wait for them with
(`waiting_group`), and which of them a failed collective lost (`Heartbeats`, `ProcessLost`).

torch's launcher (`accelerate launch --multi_gpu`, `torchrun`) numbers the machines of a run (`GROUP_RANK` of
`GROUP_WORLD_SIZE`) and the processes (`RANK` of `WORLD_SIZE`; `LOCAL_RANK` of `LOCAL_WORLD_SIZE` on each machine),
and its agent on the first machine keeps the run's store (`MASTER_ADDR:MASTER_PORT`), where the processes meet.

A process that dies breaks the next collective of the others at once (gloo: "Connection closed by peer"); one that
stops answering without dying holds them until the collective's timeout (`--ddp_timeout`). Either way the collective
names no process. So every process counts up a key of its own in the run's store once a second (`Heartbeats`, from
a thread): after a collective failed, the processes whose count stands still are the lost ones, and where the store
itself is gone, it was the first machine's (which keeps it) that was lost.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch

logger = logging.getLogger(__name__)

# How long the other processes wait for the first one's preparation (its tokenizer, the data it tokenizes first) and
# for its writes after training (the model folder, its card, an upload): far longer than a collective of training
# takes, which --ddp_timeout bounds. A process that dies meanwhile still ends the wait at once.
PREPARATION_TIMEOUT = timedelta(hours=6)
HEARTBEAT_SECONDS = 1.0
HEARTBEATS_WATCHED = 3  # a count that stands still this many beats: its process is lost


@dataclass(frozen=True)
class World:
    """The processes of this run and this process's place among them."""

    processes: int = 1
    rank: int = 0
    local_rank: int = 0
    local_processes: int = 1
    machines: int = 1
    machine: int = 0
    store: tuple[str, int] | None = None  # (address, port) of the run's store, where torch's launcher set them

    @classmethod
    def from_environment(cls, environ=None) -> "World":
        """The world torch's launcher described in the environment (one process where it did not)."""
        environ = os.environ if environ is None else environ

        def number(name, default):
            value = environ.get(name, "")
            return int(value) if value.strip().lstrip("-").isdigit() else default

        processes, rank = number("WORLD_SIZE", 1), number("RANK", 0)
        local_processes, local_rank = number("LOCAL_WORLD_SIZE", processes), number("LOCAL_RANK", rank)
        machines = number("GROUP_WORLD_SIZE", max(1, processes // max(1, local_processes)))
        machine = number("GROUP_RANK", rank // max(1, local_processes))
        address, port = environ.get("MASTER_ADDR"), number("MASTER_PORT", None)
        return cls(processes, rank, local_rank, local_processes, machines, machine,
                   (address, port) if address and port is not None else None)

    def machine_of(self, rank: int) -> int:
        """The machine that runs `rank` (torch's launcher numbers the processes machine by machine)."""
        return rank // max(1, self.local_processes)

    def ranks_of_machine(self, machine: int | None = None) -> range:
        machine = self.machine if machine is None else machine
        return range(machine * self.local_processes, min(self.processes, (machine + 1) * self.local_processes))

    @property
    def description(self) -> str:
        """This process's place, for the run's log: "machine 1 of 2 (ranks 1-1 of 2, 1 process per machine);
        the run's store at 127.0.0.1:29500"."""
        ranks = self.ranks_of_machine()
        span = f"rank {ranks.start}" if len(ranks) == 1 else f"ranks {ranks.start}-{ranks.stop - 1}"
        per_machine = f"{self.local_processes} process{'es' if self.local_processes != 1 else ''} per machine"
        store = f"; the run's store at {self.store[0]}:{self.store[1]}" if self.store else ""
        return (f"machine {self.machine} of {self.machines} ({span} of {self.processes} processes, "
                f"{per_machine}){store}")

    def name(self, rank: int) -> str:
        """"rank 1 (machine 1)", or "rank 1" on one machine."""
        return f"rank {rank}" + (f" (machine {self.machine_of(rank)})" if self.machines > 1 else "")


_waiting_group = None


def waiting_group():
    """A gloo group of every process whose collectives time out after `PREPARATION_TIMEOUT`, for the waits that
    last as long as one process's own work: the others waiting for the first to prepare the data, or for its
    writes after training. (The default group's collectives, training's, time out after --ddp_timeout.) Made on
    the first call, which every process must make, in the same order as its other collectives; None in a run of
    one process."""
    global _waiting_group
    if not torch.distributed.is_available() or not torch.distributed.is_initialized() \
            or torch.distributed.get_world_size() == 1:
        return None
    if _waiting_group is None:
        _waiting_group = torch.distributed.new_group(backend="gloo", timeout=PREPARATION_TIMEOUT)
    return _waiting_group


def wait_for_the_others() -> None:
    """A barrier in `waiting_group` (no-op for one process)."""
    group = waiting_group()
    if group is not None:
        torch.distributed.barrier(group=group)


def is_lost_peer_error(error: BaseException) -> bool:
    """Whether `error` is a collective's failure: torch's distributed errors, and the RuntimeErrors gloo raises for a
    peer that closed its connection or did not answer in time."""
    if isinstance(error, getattr(torch.distributed, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(sign in text for sign in (
        "Connection closed by peer", "Connection reset by peer", "Timed out waiting", "Socket Timeout",
        "[gloo/", "gloo/transport", "NCCL communicator was aborted", "ProcessGroupGloo", "Broken pipe",
    ))


def lost_peer_error_in(error: BaseException) -> BaseException | None:
    """The collective's failure (`is_lost_peer_error`) that `error` is or was raised from, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if is_lost_peer_error(error):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class Heartbeats:
    """Each process counts up its own key in the run's store every `interval` seconds, from a daemon thread, on a
    connection of its own; `lost()` tells from the counts which processes stopped (see the module doc)."""

    def __init__(self, world: World, interval: float = HEARTBEAT_SECONDS):
        self.world, self.interval = world, interval
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._prefix = f"annotated_transformer/heartbeat/{run}/"
        self._store = None
        self._stop = threading.Event()
        self._thread = None

    def _connect(self):
        address, port = self.world.store
        return torch.distributed.TCPStore(address, port, is_master=False, timeout=timedelta(seconds=5 * self.interval),
                                          wait_for_workers=False)

    def start(self) -> "Heartbeats":
        """Begin beating (no-op for one process, or where no store is known)."""
        if self.world.processes <= 1 or self.world.store is None or self._thread is not None:
            return self
        try:
            self._store = self._connect()
            self._store.add(self._prefix + str(self.world.rank), 1)
        except Exception as error:  # noqa: BLE001 - without heartbeats a loss is reported without naming the lost
            logger.warning("No heartbeats in the run's store at %s:%s (%s): a lost process will not be named",
                           *self.world.store, error)
            self._store = None
            return self
        self._thread = threading.Thread(target=self._beat, name="heartbeats", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        key = self._prefix + str(self.world.rank)
        while not self._stop.wait(self.interval):
            try:
                self._store.add(key, 1)
            except Exception:  # noqa: BLE001 - the store is gone: `lost()` says so
                return

    def stop(self) -> None:
        self._stop.set()

    def counts(self, store) -> dict[int, int]:
        return {rank: store.add(self._prefix + str(rank), 0) for rank in range(self.world.processes)}

    def lost(self) -> list[int] | None:
        """The ranks whose count stood still for `HEARTBEATS_WATCHED` beats (this one's never does): [] where none
        did, None where the store cannot be reached (the first machine, which keeps it, is lost) or no heartbeats
        were kept."""
        if self._store is None:
            return None
        try:
            store = self._connect()
            before = self.counts(store)
            time.sleep(HEARTBEATS_WATCHED * self.interval)
            after = self.counts(store)
        except Exception:  # noqa: BLE001 - unreachable, or gone while read
            return None
        return [rank for rank in range(self.world.processes) if rank != self.world.rank and after[rank] == before[rank]]


class ProcessLost(RuntimeError):
    """A collective failed because another process of the run died or stopped answering; the message names it and
    the checkpoint to resume from."""


def lost_process_message(world: World, lost: list[int] | None, error: BaseException, step: int | None,
                         timeout_seconds: float | None, resume_from: str | None) -> str:
    """The one line a process prints when a collective failed: who was lost and how, at which step, and the
    checkpoint to resume from."""
    text = " ".join(str(error).split())
    if "Timed out" in text or "timed out" in text or "Timeout" in text:
        how = f"no answer within --ddp_timeout {timeout_seconds:g} s" if timeout_seconds else "no answer in time"
    elif any(sign in text for sign in ("closed", "reset", "Broken pipe", "refused")):
        how = "its connection closed"
    else:
        how = text[:160]
    if lost:
        who = f"lost {', '.join(world.name(rank) for rank in lost)} ({how})"
    elif lost is None and world.store is not None and world.machine != 0:
        who = (f"lost machine 0, which keeps the run's store at {world.store[0]}:{world.store[1]}, with rank 0 "
               f"({how})")
    else:
        who = f"lost another process of the run ({how})"
    when = f" after optimizer step {step}" if step is not None else " before training"
    where = (f"resume on every machine with --resume_from_checkpoint last (the newest complete checkpoint: "
             f"{resume_from})" if resume_from else "no complete checkpoint was saved: start the run again")
    return f"{world.name(world.rank)} stopped{when}: {who}; {where}"


__all__ = [
    "HEARTBEAT_SECONDS",
    "Heartbeats",
    "PREPARATION_TIMEOUT",
    "ProcessLost",
    "World",
    "is_lost_peer_error",
    "lost_peer_error_in",
    "lost_process_message",
    "wait_for_the_others",
    "waiting_group",
]
