"""The processes of a run on one machine or several: who they are (`World`), what the others wait for them with
(`waiting_group`), and which of them a failed collective lost (`Heartbeats`, `ProcessLost`).

torch's launcher (`accelerate launch --multi_gpu`, `torchrun`) numbers the machines of a run (`GROUP_RANK` of
`GROUP_WORLD_SIZE`) and the processes (`RANK` of `WORLD_SIZE`; `LOCAL_RANK` of `LOCAL_WORLD_SIZE` on each machine),
and its agent on the first machine keeps the run's store (`MASTER_ADDR:MASTER_PORT`), where the processes meet.

A process that dies breaks the next collective of the others at once (gloo: "Connection closed by peer"); one that
stops answering without dying holds them until the collective's timeout (`--ddp_timeout`). Either way the collective
names no process. What torch gives for this: gloo's and NCCL's collective timeouts (`--ddp_timeout`; NCCL's watchdog
aborts a hung communicator at that timeout), which raise without naming a rank; gloo's `monitored_barrier`, which
names the ranks that did not arrive, but only on rank 0, only where every process calls it, and no longer once a
collective has failed; and the elastic agent's monitor, which sees its own machine's workers only. So every process
counts up a key of its own in the run's store once a second (`Heartbeats`, from a thread), and the training batches it
made (from its data loader); after a collective failed, one read of every rank's keys tells the lost (a count that
stands still: dead or frozen) from the stuck (alive, but fewer batches made: a hung read of the data, or another call
that lets its heartbeat run) and from the ended (finished, or reporting an error of its own); where the store itself is gone, it
was the first machine's (which keeps it) that was lost. A beat the store does not take is retried, and said once.
"""

from __future__ import annotations

import logging
import os
import re
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


@dataclass(frozen=True)
class Verdict:
    """What the run's store tells of the other processes after a collective failed (`Heartbeats.check`):
    - `store`: "read", "gone" (it cannot be reached: the first machine, which keeps it, is lost) or "no heartbeats"
      (this process kept none: one process, or no store known);
    - `lost`: the ranks whose heartbeat stood still (dead or frozen), the ones that ended (finished or reported an
      error of their own) left out;
    - `behind`: ranks alive but that made fewer training batches than this one (stuck in a read of the data, or
      another call that lets their heartbeat run), each with how many batches it is behind;
    - `ended`: ranks that ended on their own (finished, or reported an error of their own)."""

    store: str
    lost: tuple[int, ...] = ()
    behind: tuple[tuple[int, int], ...] = ()
    ended: tuple[int, ...] = ()


class Heartbeats:
    """Each process counts up a key of its own in the run's store every `interval` seconds, from a daemon thread, on a
    connection of its own, and the training batches it made (`batch_made`, from the data loader); `check()` tells
    from them which processes stopped, and which are alive but behind (see the module doc and `Verdict`). Every key of
    every rank is made (at 0) when beating starts, so that one read of the store (`multi_get`) gives them all."""

    def __init__(self, world: World, interval: float = HEARTBEAT_SECONDS):
        self.world, self.interval = world, interval
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._prefix = f"annotated_transformer/heartbeat/{run}/"
        self._store = None
        self._stop = threading.Event()
        self._thread = None
        self.failures = 0  # beats the store did not take (each retried at the next beat)

    def _key(self, kind: str, rank: int) -> str:
        return f"{self._prefix}{kind}/{rank}"

    def _keys(self) -> list[str]:
        return [self._key(kind, rank) for kind in ("beats", "steps", "ended") for rank in range(self.world.processes)]

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
            for key in self._keys():  # every key exists (at 0), so that one multi_get reads them all
                self._store.add(key, 0)
            self._store.add(self._key("beats", self.world.rank), 1)
        except Exception as error:  # noqa: BLE001 - without heartbeats a loss is reported without naming the lost
            logger.warning("No heartbeats in the run's store at %s:%s (%s): a lost process will not be named",
                           *self.world.store, error)
            self._store = None
            return self
        self._thread = threading.Thread(target=self._beat, name="heartbeats", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        key, store = self._key("beats", self.world.rank), self._store
        while not self._stop.wait(self.interval):
            try:
                store.add(key, 1)
            except Exception as error:  # noqa: BLE001 - retried on a new connection at the next beat, and said once
                self.failures += 1
                if self.failures == 1:
                    logger.warning("A heartbeat to the run's store at %s:%s failed (%s): retrying every %g s",
                                   *self.world.store, " ".join(str(error).split())[:200], self.interval)
                try:
                    store = self._connect()
                except Exception:  # noqa: BLE001 - the store may be gone for good: `check()` says so
                    pass

    def _add(self, kind: str, amount: int = 1) -> None:
        if self._store is None:
            return
        try:
            self._store.add(self._key(kind, self.world.rank), amount)
        except Exception:  # noqa: BLE001 - a record the store cannot take changes nothing of the run
            pass

    def batch_made(self) -> None:
        """Count a training batch this process made (called by its data loader, not the beating thread: a process
        stuck before its next batch, in a hung read, stays behind while its heartbeat goes on; the others, waiting for
        it in the step's collectives, have made theirs)."""
        self._add("steps")

    def ended(self) -> None:
        """Mark this process as ended on its own (finished, or reporting an error of its own), so that no other
        process takes it for lost; and stop beating."""
        self._add("ended")
        self.stop()

    def stop(self) -> None:
        """Stop beating, and wait for the beating thread to leave the store (a thread killed inside a store call at
        the interpreter's exit aborts the process)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.interval + 10)

    def _read(self, store) -> dict[str, list[int]]:
        """Every rank's beats, training batches made and end mark, in one read of the store."""
        values = [int(value) for value in store.multi_get(self._keys())]
        n = self.world.processes
        return {"beats": values[:n], "steps": values[n:2 * n], "ended": values[2 * n:]}

    def check(self) -> Verdict:
        """The others' state (`Verdict`), from two reads `HEARTBEATS_WATCHED` beats apart."""
        if self._store is None:
            return Verdict("no heartbeats")
        try:
            store = self._connect()
            before = self._read(store)
            time.sleep(HEARTBEATS_WATCHED * self.interval)
            after = self._read(store)
        except Exception:  # noqa: BLE001 - unreachable, or gone while read
            return Verdict("gone")
        others = [rank for rank in range(self.world.processes) if rank != self.world.rank]
        ended = tuple(rank for rank in others if after["ended"][rank])
        lost = tuple(rank for rank in others if rank not in ended and after["beats"][rank] == before["beats"][rank])
        mine = after["steps"][self.world.rank]
        behind = tuple((rank, mine - after["steps"][rank]) for rank in others
                       if rank not in ended and rank not in lost and after["steps"][rank] < mine)
        return Verdict("read", lost, behind, ended)


class ProcessLost(RuntimeError):
    """A collective failed because another process of the run died or stopped answering; the message names it and
    the checkpoint to resume from."""


_TIMEOUT_MS = re.compile(r"(\d+)\s*ms")


def timeout_that_fired(error: BaseException, timeout_seconds: float | None) -> str:
    """Which wait ran out, named as the user set it: "--ddp_timeout 600 s" (training's collectives), or the wait for
    another process's preparation or final writes (`PREPARATION_TIMEOUT`), read from the milliseconds in the
    error's text; the collective's timeout as it says it where it is neither."""
    found = _TIMEOUT_MS.search(str(error))
    waited = int(found[1]) / 1000 if found else None
    preparation = PREPARATION_TIMEOUT.total_seconds()
    if waited is not None and abs(waited - preparation) < 1:
        return f"the {preparation / 3600:g}-hour wait for another process's preparation or final writes"
    if waited is None or (timeout_seconds and abs(waited - timeout_seconds) < 1):
        return f"--ddp_timeout {timeout_seconds:g} s" if timeout_seconds else "the collective's timeout"
    return f"a timeout of {waited:g} s"


def lost_process_message(world: World, verdict: Verdict, error: BaseException, step: int | None,
                         timeout_seconds: float | None, resume_from: str | None) -> str:
    """The one line a process prints when a collective failed: who was lost and how, at which step, and the
    checkpoint to resume from."""
    text = " ".join(str(error).split())
    if "Timed out" in text or "timed out" in text or "Timeout" in text:
        how = f"no answer within {timeout_that_fired(error, timeout_seconds)}"
    elif any(sign in text for sign in ("closed", "reset", "Broken pipe", "refused")):
        how = "its connection closed"
    else:
        how = text[:160]
    if verdict.lost:
        who = f"lost {', '.join(world.name(rank) for rank in verdict.lost)} ({how})"
    elif verdict.behind:
        stuck = ", ".join(f"{world.name(rank)}, alive but {behind} training batch{'es' if behind != 1 else ''} "
                          "behind" for rank, behind in verdict.behind)
        who = f"waited for {stuck} ({how})"
    elif verdict.store == "gone" and world.store is not None and world.machine != 0:
        # machine 0 keeps the store: gone with it (its launcher may outlive its process a moment, which then reads
        # as rank 0's heartbeat standing still: the same line)
        who = f"lost {world.name(0)} ({how}; the run's store at {world.store[0]}:{world.store[1]}, on machine 0, too)"
    elif verdict.store == "gone":
        who = f"lost the run's store and another process with it ({how})"
    elif verdict.ended:
        who = (f"{', '.join(world.name(rank) for rank in verdict.ended)} ended on its own, whose log says why "
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
    "Verdict",
    "World",
    "is_lost_peer_error",
    "lost_peer_error_in",
    "lost_process_message",
    "timeout_that_fired",
    "wait_for_the_others",
    "waiting_group",
]
