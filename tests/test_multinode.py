"""Several machines, tried on one: two `accelerate launch --multi_gpu --num_machines 2` "machines" of one process
each meet on the loopback address (gloo). They train as two processes on one machine do, to the same bits; their
checkpoints resume on one machine and one machine's on two; machines given folders of their own are refused on each
at once; a machine killed, frozen or stopped by SIGTERM stops the
other with one line naming it and the checkpoint to resume from, and the run resumes exactly.

The launches are slow (CI runs them with -m slow); the checks of the parts are quick."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
import torch
from launch_helpers import QUICK, REPO_ROOT, SCRIPT_ENV, TRAIN_SCRIPT, free_port
from safetensors.torch import load_file

from modeling.common.hardware import describe_run
from modeling.training.checkpoints import checkpoint_problem
from modeling.training.run import launch_command
from modeling.training.world import (
    PREPARATION_TIMEOUT,
    Heartbeats,
    Verdict,
    World,
    is_lost_peer_error,
    lost_peer_error_in,
    lost_process_message,
    timeout_that_fired,
)

# ---- the parts ----------------------------------------------------------------------------------------------------


def test_the_world_is_read_from_what_torchs_launcher_sets():
    world = World.from_environment({"WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                                    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
                                    "MASTER_PORT": "29500"})
    assert (world.processes, world.rank, world.local_rank, world.machines, world.machine) == (8, 5, 1, 2, 1)
    assert world.machine_of(3) == 0 and world.machine_of(4) == 1 and list(world.ranks_of_machine()) == [4, 5, 6, 7]
    assert world.description == ("machine 1 of 2 (ranks 4-7 of 8 processes, 4 processes per machine); the run's "
                                 "store at 10.0.0.1:29500")
    assert world.name(6) == "rank 6 (machine 1)"
    alone = World.from_environment({})
    assert (alone.processes, alone.machines, alone.store) == (1, 1, None) and alone.name(0) == "rank 0"


def test_the_run_description_and_the_cards_command_name_the_machines(monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert describe_run(16, "cuda", "MULTI_GPU", "bf16", machines=2) == "16 processes on the GPUs of 2 machines (DDP, bf16)"
    assert describe_run(2, "cpu", "MULTI_CPU", "fp32", 1) == "2 processes on the CPU (DDP, fp32, 1 thread each)"
    assert launch_command(["--max_steps", "2"], 2, "MULTI_CPU", machines=2) == (
        "accelerate launch --multi_gpu --num_machines 2 --num_processes 2 scripts/train.py --max_steps 2")


def test_a_collectives_failure_is_told_from_other_errors():
    closed = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer "
                          "[127.0.0.1]:51234")
    assert is_lost_peer_error(closed) and not is_lost_peer_error(RuntimeError("CUDA out of memory"))
    assert is_lost_peer_error(torch.distributed.DistBackendError("anything"))
    try:
        try:
            raise closed
        except RuntimeError as error:
            raise ValueError("saving failed") from error
    except ValueError as wrapped:
        assert lost_peer_error_in(wrapped) is closed
    assert lost_peer_error_in(ValueError("no")) is None


def test_the_lost_process_line_names_the_process_how_and_where_to_resume():
    world = World(processes=2, rank=0, local_rank=0, local_processes=1, machines=2, machine=0,
                  store=("127.0.0.1", 29500))
    closed = RuntimeError("Connection closed by peer [127.0.0.1]:5")
    lost = Verdict("read", lost=(1,))
    assert lost_process_message(world, lost, closed, 9, 600, "run/checkpoint-8") == (
        "rank 0 (machine 0) stopped after optimizer step 9: lost rank 1 (machine 1) (its connection closed); resume "
        "on every machine with --resume_from_checkpoint last (the newest complete checkpoint: run/checkpoint-8)")
    timed_out = RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv")
    assert "lost rank 1 (machine 1) (no answer within --ddp_timeout 20 s)" in lost_process_message(
        world, lost, timed_out, 9, 20, None)
    assert lost_process_message(world, lost, closed, None, 600, None).endswith(
        "before training: lost rank 1 (machine 1) (its connection closed); no complete checkpoint was saved: start "
        "the run again")
    second = World(processes=2, rank=1, local_rank=0, local_processes=1, machines=2, machine=1,
                   store=("10.0.0.1", 29500))
    assert "lost rank 0 (machine 0) (its connection closed; the run's store at 10.0.0.1:29500, on machine 0, too)" \
        in lost_process_message(second, Verdict("gone"), closed, 3, 600, "run/checkpoint-2")
    stuck = lost_process_message(world, Verdict("read", behind=((1, 1),)), timed_out, 9, 20, None)
    assert "waited for rank 1 (machine 1), alive but 1 training batch behind (no answer within --ddp_timeout 20 s)" \
        in stuck
    ended = lost_process_message(world, Verdict("read", ended=(1,)), closed, 9, 20, None)
    assert "rank 1 (machine 1) ended on its own, whose log says why (its connection closed)" in ended
    assert "lost another process of the run" in lost_process_message(world, Verdict("no heartbeats"), closed, 9, 20,
                                                                      None)


def test_the_line_names_the_timeout_that_fired():
    """Training's collectives wait --ddp_timeout; the waits for another process's preparation or final writes have
    their own hours (`PREPARATION_TIMEOUT`): the line names the one whose milliseconds the error gives."""
    hours = PREPARATION_TIMEOUT.total_seconds()
    preparation = RuntimeError(f"[gloo] Timed out waiting {int(hours * 1000)}ms for recv operation to complete")
    training = RuntimeError("[gloo] Timed out waiting 600000ms for recv operation to complete")
    assert timeout_that_fired(training, 600) == "--ddp_timeout 600 s"
    assert timeout_that_fired(preparation, 600) == (f"the {hours / 3600:g}-hour wait for another process's "
                                                    "preparation or final writes")
    assert timeout_that_fired(RuntimeError("Socket Timeout"), 600) == "--ddp_timeout 600 s"
    assert timeout_that_fired(RuntimeError("Timed out waiting 5000ms"), 600) == "a timeout of 5 s"


class CountedStore:
    """A store connection that counts the calls made through it (and can fail its next `add`s)."""

    def __init__(self, store, calls: list):
        self.store, self.calls, self.failing = store, calls, 0

    def __getattr__(self, name):
        def call(*args):
            self.calls.append(name)
            if name == "add" and self.failing:
                self.failing -= 1
                raise RuntimeError("the store did not answer")
            return getattr(self.store, name)(*args)
        return call


def heartbeat_worlds(port: int, processes: int = 3) -> list[World]:
    return [World(processes=processes, rank=rank, local_processes=1, machines=processes, machine=rank,
                  store=("127.0.0.1", port)) for rank in range(processes)]


def test_heartbeats_tell_the_lost_the_behind_and_the_ended_in_one_read_each(monkeypatch):
    """Three processes' heartbeats in a real store: one that stops beating is lost; one that beats but made fewer
    training batches is behind (stuck in a read that lets its heartbeat run); one that ended on its own is neither. A check reads every rank's keys in one `multi_get`, twice, whatever the number of processes."""
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,  # noqa: F841
                                       timeout=timedelta(seconds=5))  # kept open: the heartbeats meet there
    beats = [Heartbeats(world, interval=0.1).start() for world in heartbeat_worlds(port)]
    time.sleep(0.3)
    assert beats[0].check() == Verdict("read")
    for heartbeat in beats[:2]:
        heartbeat.batch_made()
    beats[0].batch_made()  # rank 0 made a second batch, rank 1 did not, rank 2 none
    assert beats[0].check() == Verdict("read", behind=((1, 1), (2, 2)))
    beats[2].ended()
    assert beats[0].check() == Verdict("read", behind=((1, 1),), ended=(2,))
    beats[1].stop()
    time.sleep(0.2)
    assert beats[0].check() == Verdict("read", lost=(1,), ended=(2,))

    calls = []
    original = Heartbeats._connect
    monkeypatch.setattr(Heartbeats, "_connect", lambda self: CountedStore(original(self), calls))
    beats[0].check()
    assert calls == ["multi_get", "multi_get"]  # not one read per process, nor N² across the processes
    beats[0].stop()


def test_a_beat_the_store_misses_is_retried_and_said_once(monkeypatch, caplog):
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,  # noqa: F841
                                       timeout=timedelta(seconds=5))
    worlds = heartbeat_worlds(port, processes=2)
    calls = []
    original = Heartbeats._connect
    connections = []

    def counted(self):
        connections.append(CountedStore(original(self), calls))
        return connections[-1]

    monkeypatch.setattr(Heartbeats, "_connect", counted)
    watched = Heartbeats(worlds[1], interval=0.05).start()
    connections[0].failing = 3  # three beats in a row fail
    with caplog.at_level("WARNING", logger="modeling.training.world"):
        time.sleep(0.6)
    watched.stop()
    monkeypatch.undo()
    assert watched.failures >= 1 and len(connections) >= 2  # a failed beat: a new connection, and it went on
    warnings = [record for record in caplog.records if "heartbeat to the run's store" in record.getMessage()]
    assert len(warnings) == 1
    observer = Heartbeats(worlds[0], interval=0.05)
    assert observer._read(original(observer))["beats"][1] > 3  # the beats after the failure reached the store


def test_no_heartbeats_and_a_store_that_is_gone_are_told_apart():
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=5))
    worlds = heartbeat_worlds(port, processes=2)
    assert Heartbeats(worlds[1], interval=0.1).check() == Verdict("no heartbeats")  # never started
    alone = World(processes=1)
    assert Heartbeats(alone).start().check() == Verdict("no heartbeats")
    beating = Heartbeats(worlds[1], interval=0.1).start()
    del store  # the first machine's launcher, which keeps it, is gone
    assert beating.check() == Verdict("gone")
    beating.stop()


def test_a_checkpoint_of_two_processes_lacking_one_random_state_is_incomplete(tmp_path):
    from modeling.training.checkpoints import TRAINER_STATE_NAME

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    state = {"global_step": 4, "stateful_callbacks": {"EpochBatches": {"args": {"settings": {"processes": 2}}}}}
    (folder / TRAINER_STATE_NAME).write_text(json.dumps(state))
    (folder / "rng_state_0.pth").write_bytes(b"")
    assert checkpoint_problem(folder) == ("no rng_state_1.pth (a process's random generators' state): its save did "
                                          "not finish")
    (folder / "rng_state_1.pth").write_bytes(b"")
    assert checkpoint_problem(folder) == ("no optimizer.pt (the optimizer's state) and no scheduler.pt (the "
                                          "learning-rate schedule's state): resuming would start them afresh")


# ---- two machines on one ------------------------------------------------------------------------------------------

# A few optimizer steps of the copy task, saving every 4; evaluated at the end only (the runs compare weights).
RUN = [*QUICK, "--eval_strategy", "no", "--max_train_samples", "64", "--max_tokens", "128", "--max_eval_samples", "4",
       "--max_test_samples", "4", "--max_steps", "16", "--save_steps", "4", "--save_total_limit", "10", "--seed", "3",
       "--cpu_threads", "1", "--report_to", "none"]
ENV = {**os.environ, **SCRIPT_ENV, "OMP_NUM_THREADS": "1"}


def launch(output_dir: Path, *extra: str, machine: int | None = None, port: int | None = None,
           processes: int = 2, env: dict | None = None) -> subprocess.Popen:
    """scripts/train.py as `machine` of two (one process each, meeting at `port` on the loopback address), or as
    `processes` processes on one machine where `machine` is None; in a session of its own; `env`: variables added to
    its environment."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch"]
    if machine is None:
        launcher += ["--multi_gpu", "--num_machines", "1", "--main_process_port", str(free_port())]
    else:  # the docs' config for each machine, with this machine's rank and the loopback address
        launcher += ["--config_file", str(REPO_ROOT / "configs" / "accelerate_multinode.yaml"), "--machine_rank",
                     str(machine), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port)]
    launcher += ["--num_processes", str(processes), "--mixed_precision", "no", "--dynamo_backend", "no"]
    return subprocess.Popen([*launcher, str(TRAIN_SCRIPT), *RUN, "--output_dir", str(output_dir), *extra],
                            cwd=REPO_ROOT, env={**ENV, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def two_machines(folders, *extra: str, machine_1: dict | None = None) -> list[subprocess.Popen]:
    """Machines 0 and 1, each writing into its folder of `folders` (one folder: both share it); `machine_1`: the
    environment variables only machine 1 gets (a fault, `fault_env`)."""
    folders = list(folders) * (2 if len(folders) == 1 else 1)
    port = free_port()
    return [launch(folder, *extra, machine=machine, port=port, env=machine_1 if machine == 1 else None)
            for machine, folder in enumerate(folders)]


# A fault in machine 1's training process, put there by a `sitecustomize` module on its path (Python imports it at
# start): FAULT=save:STEP sleeps in its part of checkpoint-STEP's save, before its random generators' state is written;
# FAULT=step:STEP sleeps while it makes the training batch of optimizer step STEP, its heartbeat thread still beating (a
# read of the data that hangs).
# Either way it writes the file FAULT_STARTED when it starts sleeping.
FAULT = textwrap.dedent("""
    import os, time
    kind, _, step = os.environ.get("FAULT", ":").partition(":")
    if kind and os.environ.get("RANK") == "1":
        from pathlib import Path
        import transformers.trainer as trainer_module

        def hang():
            Path(os.environ["FAULT_STARTED"]).touch()
            time.sleep(3600)

        if kind == "save":
            original = trainer_module.Trainer._save_rng_state

            def _save_rng_state(self, output_dir):
                if str(output_dir).endswith(f"checkpoint-{step}"):
                    hang()
                return original(self, output_dir)

            trainer_module.Trainer._save_rng_state = _save_rng_state
        elif kind == "step":
            import transformers
            original, made = transformers.DataCollatorForSeq2Seq.__call__, []

            def __call__(self, features, *args, **kwargs):
                made.append(1)
                if len(made) == int(step):  # the training batch of that step (no evaluation while it trains)
                    hang()
                return original(self, features, *args, **kwargs)

            transformers.DataCollatorForSeq2Seq.__call__ = __call__
""")


def fault_env(tmp_path: Path, fault: str) -> dict:
    """Machine 1's environment for `fault` (see FAULT)."""
    folder = tmp_path / "fault"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(FAULT)
    return {"FAULT": fault, "FAULT_STARTED": str(folder / "started"),
            "PYTHONPATH": os.pathsep.join([str(folder), ENV.get("PYTHONPATH", "")])}


def kill_all(process: subprocess.Popen) -> None:
    """SIGKILL to a launcher and every process under it (torch's launcher starts its workers in sessions of their
    own, and they hold its output pipes)."""
    try:
        members = [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]
    except psutil.NoSuchProcess:
        return
    for member in members:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def ended(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_all(process)
        stdout, stderr = process.communicate()
        pytest.fail(f"still running after {timeout} s:\n{stderr[-3000:]}")
    return process.returncode, stdout, stderr


def succeeded(*processes: subprocess.Popen) -> list[str]:
    """The output of launchers that all succeeded (each one's output where any failed)."""
    results = [ended(process) for process in processes]
    assert all(status == 0 for status, _, _ in results), "\n".join(
        f"launcher {number}: status {status}\nstdout:\n{stdout[-1500:]}\nstderr:\n{stderr[-3000:]}"
        for number, (status, stdout, stderr) in enumerate(results))
    return [stdout for _, stdout, _ in results]


def assert_same_weights(folder: Path, expected: Path) -> None:
    ours, theirs = load_file(folder / "model.safetensors"), load_file(expected / "model.safetensors")
    assert set(ours) == set(theirs)
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), f"{folder}: {name}"


def checkpoints(folder: Path) -> list[str]:
    return sorted((path.name for path in folder.glob("checkpoint-*")), key=lambda name: int(name.split("-")[1]))


def training_process(launcher: subprocess.Popen) -> psutil.Process:
    """The training process `accelerate launch` started."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [child for child in psutil.Process(launcher.pid).children(recursive=True)
                 if "train.py" in " ".join(child.cmdline())]
        if found:
            return found[0]
        time.sleep(0.05)
    pytest.fail("no training process")


def wait_for(path: Path, processes, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        for process in processes:
            assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory):
    """The run as 2 processes on one machine: its folder."""
    folder = tmp_path_factory.mktemp("one-machine") / "run"
    succeeded(launch(folder))
    return folder


@pytest.mark.slow
def test_two_machines_train_the_bits_of_two_processes_on_one_and_resume_each_others_checkpoints(one_machine,
                                                                                                tmp_path):
    shared = tmp_path / "two-machines"
    outputs = succeeded(*two_machines([shared]))
    for machine, output in enumerate(outputs):  # each machine's log names the world and its place in it
        assert f"World: machine {machine} of 2 (rank {machine} of 2 processes, 1 process per machine); the run's " \
               "store at 127.0.0.1:" in output
    assert "2 processes on the CPUs of 2 machines (DDP, fp32, 1 thread each)" in outputs[0]
    assert checkpoints(shared) == checkpoints(one_machine) == [f"checkpoint-{step}" for step in (4, 8, 12, 16)]
    for name in checkpoints(one_machine):  # bit for bit: the same sums in the same order, over TCP either way
        assert_same_weights(shared / name, one_machine / name)
    assert_same_weights(shared, one_machine)
    assert "accelerate launch --multi_gpu --num_machines 2 --num_processes 2 scripts/train.py" in \
        (shared / "README.md").read_text()

    on_two = tmp_path / "one-to-two"  # one machine's checkpoint, resumed on two
    succeeded(*two_machines([on_two], "--resume_from_checkpoint", str(one_machine / "checkpoint-8")))
    on_one = tmp_path / "two-to-one"  # two machines' checkpoint, resumed on one
    succeeded(launch(on_one, "--resume_from_checkpoint", str(shared / "checkpoint-8")))
    for folder in (on_two, on_one):
        for name in ("checkpoint-12", "checkpoint-16"):
            assert_same_weights(folder / name, one_machine / name)
        assert_same_weights(folder, one_machine)


@pytest.mark.slow
def test_machines_with_folders_of_their_own_are_refused_on_each_at_once(tmp_path):
    folders = [tmp_path / "machine-0", tmp_path / "machine-1"]
    started = time.monotonic()
    results = [ended(process, timeout=300) for process in two_machines(folders)]
    assert time.monotonic() - started < 120  # not the launcher's wait of 300 s for a machine that ended well
    for machine, (status, _, stderr) in enumerate(results):
        refusals = [line for line in stderr.splitlines() if line.startswith("train.py: error:")]
        assert len(refusals) == 1 and status != 0, stderr[-3000:]
        assert refusals[0] == (  # machine 0's line says where the refusal was found
            f"train.py: error: {'machine 1: ' if machine == 0 else ''}--output_dir {folders[1]} on machine 1 is not "
            "the folder rank 0 (machine 0) writes "
            "into (it holds no lock file of this run): the machines must share the output folder; give every machine "
            "one shared folder (a network file system) as --output_dir")
        assert "no tokenizer" not in stderr and "DistStoreError" not in stderr
    assert not (folders[1] / "tokenizer.json").exists()

    # transformers' --save_on_each_node: its save_pretrained writes weights on rank 0 only; refused on each machine
    results = [ended(process, timeout=300) for process in two_machines(folders, "--save_on_each_node", "true")]
    for status, _, stderr in results:
        refusals = [line for line in stderr.splitlines() if line.startswith("train.py: error:")]
        assert status != 0 and len(refusals) == 1 and refusals[0].startswith(
            "train.py: error: --save_on_each_node is not supported: transformers writes a model's weights from rank 0 "
            "only"), stderr[-3000:]


LOST_LINE = re.compile(r"^train\.py: error: rank (\d) \(machine \d\) stopped after optimizer step (\d+): lost "
                       r"(.+?); resume on every machine with --resume_from_checkpoint last \(the newest complete "
                       r"checkpoint: (\S+)\)$", flags=re.M)


def assert_newest_complete_named(folder: Path, resume_from: str) -> None:
    """The line names the newest complete checkpoint; a save the loss cut short, if any, is newer and left for the
    next launch to skip (never removed while another process may still write it)."""
    complete = [name for name in checkpoints(folder) if checkpoint_problem(folder / name) is None]
    assert complete and Path(resume_from) == folder / complete[-1], (resume_from, complete)
    later = checkpoints(folder)[checkpoints(folder).index(complete[-1]) + 1:]
    assert all(checkpoint_problem(folder / name) is not None for name in later)


def resume_and_compare(folder: Path, expected: Path) -> None:
    outputs = succeeded(*two_machines([folder], "--resume_from_checkpoint", "last"))
    assert "Resuming from " in outputs[0]
    for name in checkpoints(expected):
        assert_same_weights(folder / name, expected / name)
    assert_same_weights(folder, expected)


@pytest.mark.slow
@pytest.mark.parametrize("killed", [1, 0], ids=["machine-1", "machine-0"])
def test_a_killed_machine_stops_the_other_at_once_with_a_line_and_the_run_resumes_exactly(one_machine, tmp_path,
                                                                                          killed):
    folder = tmp_path / "run"
    machines = two_machines([folder])
    wait_for(folder / "checkpoint-8" / "trainer_state.json", machines)
    training_process(machines[killed]).send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    status, _, stderr = ended(machines[1 - killed], timeout=120)
    seconds = time.monotonic() - killed_at
    ended(machines[killed], timeout=60)
    assert status != 0 and seconds < 15, (seconds, stderr[-3000:])  # a death: seconds, not --ddp_timeout
    lines = LOST_LINE.findall(stderr)
    assert len(lines) == 1, stderr[-3000:]
    rank, step, lost, resume_from = lines[0]
    assert int(rank) == 1 - killed and int(step) >= 8
    if killed == 1:
        assert lost == "rank 1 (machine 1) (its connection closed)", lost
    else:  # whether machine 0's launcher, which keeps the store, was gone by then or not
        assert lost.startswith("rank 0 (machine 0) (its connection closed"), lost
    assert_newest_complete_named(folder, resume_from)
    resume_and_compare(folder, one_machine)


@pytest.mark.slow
def test_a_frozen_machine_stops_the_other_after_the_ddp_timeout_and_the_run_resumes_exactly(one_machine, tmp_path):
    folder = tmp_path / "run"
    machines = two_machines([folder], "--ddp_timeout", "15")
    wait_for(folder / "checkpoint-8" / "trainer_state.json", machines)
    frozen = training_process(machines[1])
    frozen.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        status, _, stderr = ended(machines[0], timeout=120)
        seconds = time.monotonic() - stopped_at
    finally:
        frozen.send_signal(signal.SIGKILL)
        ended(machines[1], timeout=60)
    assert status != 0 and 15 <= seconds < 40, (seconds, stderr[-3000:])  # the timeout, then the heartbeats' 3 s
    lines = LOST_LINE.findall(stderr)
    assert len(lines) == 1 and lines[0][2] == "rank 1 (machine 1) (no answer within --ddp_timeout 15 s)", \
        stderr[-3000:]
    assert_newest_complete_named(folder, lines[0][3])
    resume_and_compare(folder, one_machine)


STOP_LINE = re.compile(r"^train\.py: stopped by (SIGTERM|a signal on another process) after optimizer step (\d+) of "
                       r"16: (\S+) holds the run; resume with --resume_from_checkpoint last$", flags=re.M)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["training-process", "machine"])
def test_sigterm_to_one_machine_saves_the_step_on_both_and_the_run_resumes_exactly(one_machine, tmp_path, target):
    """A preemption of one machine: SIGTERM to its training process, or to its whole process group (launcher and
    training process, as a cluster stops a machine's job): both machines save the step and stop."""
    folder = tmp_path / "run"
    machines = two_machines([folder])
    wait_for(folder / "checkpoint-8" / "trainer_state.json", machines)
    if target == "machine":
        os.killpg(machines[1].pid, signal.SIGTERM)
    else:
        training_process(machines[1]).send_signal(signal.SIGTERM)
    results = [ended(machine, timeout=120) for machine in machines]
    lines = [STOP_LINE.findall(stderr) for _, _, stderr in results]
    assert [len(found) for found in lines] == [1, 1], [stderr[-3000:] for _, _, stderr in results]
    assert lines[1][0][0] == "SIGTERM" and lines[0][0][0] == "a signal on another process"
    step = int(lines[0][0][1])
    assert int(lines[1][0][1]) == step and Path(lines[0][0][2]) == folder / f"checkpoint-{step}"
    assert checkpoint_problem(folder / f"checkpoint-{step}") is None
    resume_and_compare(folder, one_machine)


def test_a_refusal_on_one_machine_ends_every_machine_at_once_with_its_reason(tmp_path):
    """Machine 1 alone is given a --data_dir that does not exist: every check that can refuse runs before the first
    shared step and its verdict is shared, so both machines end within seconds (the bound: 60 s on loopback), machine
    1 with its own line and machine 0 with machine 1's reason, instead of waiting hours for it."""
    folder, missing = tmp_path / "run", tmp_path / "no-such-corpus"
    port = free_port()
    started = time.monotonic()
    machines = [launch(folder, machine=0, port=port), launch(folder, "--data_dir", str(missing), machine=1, port=port)]
    results = [ended(machine, timeout=120) for machine in machines]
    seconds = time.monotonic() - started
    assert seconds < 60, seconds
    refusals = [[line for line in stderr.splitlines() if line.startswith("train.py: error:")]
                for _, _, stderr in results]
    reason = f"--data_dir {missing} does not exist"
    assert [status != 0 for status, _, _ in results] == [True, True]
    assert len(refusals[1]) == 1 and refusals[1][0].startswith(f"train.py: error: {reason}"), results[1][2][-3000:]
    assert len(refusals[0]) == 1 and refusals[0][0].startswith(f"train.py: error: machine 1: {reason}"), \
        results[0][2][-3000:]
    assert not any((folder / name).exists() for name in ("tokenizer.json", "checkpoint-4"))


@pytest.mark.slow
def test_a_machine_lost_during_a_save_leaves_a_complete_checkpoint_and_the_right_line(tmp_path):
    """Machine 1 dies while it writes its part of checkpoint-8 (its random generators' state), with
    save_total_limit 1. Machine 0 had written its part: the Trainer would have rotated checkpoint-4 away then, and a
    survivor's clean-up removed the unfinished checkpoint-8 under machine 0's writes ("make room"). Now machine 0
    names the lost machine, checkpoint-4 is still there and complete, checkpoint-8 is left as it is (incomplete), and
    the run resumes from checkpoint-4 to the weights of a run never stopped."""
    folder = tmp_path / "run"
    fault = fault_env(tmp_path, "save:8")
    machines = two_machines([folder], "--save_total_limit", "1", machine_1=fault)
    wait_for(Path(fault["FAULT_STARTED"]), machines[:1], timeout=300)
    wait_for(folder / "checkpoint-8" / "rng_state_0.pth", machines[:1], timeout=60)
    time.sleep(2)  # machine 0 has written its part and waits for machine 1's
    training_process(machines[1]).send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    status, _, stderr = ended(machines[0], timeout=120)
    seconds = time.monotonic() - killed_at
    ended(machines[1], timeout=60)
    assert status != 0 and seconds < 15, (seconds, stderr[-3000:])
    lines = LOST_LINE.findall(stderr)
    assert len(lines) == 1 and lines[0][1] == "8" and lines[0][2] == "rank 1 (machine 1) (its connection closed)", \
        stderr[-3000:]
    assert "make room" not in stderr
    assert checkpoints(folder) == ["checkpoint-4", "checkpoint-8"]
    assert checkpoint_problem(folder / "checkpoint-4") is None
    assert "rng_state_1.pth" in (checkpoint_problem(folder / "checkpoint-8") or "")
    assert_newest_complete_named(folder, lines[0][3])

    straight = tmp_path / "straight"
    succeeded(*two_machines([straight], "--save_total_limit", "1"))
    succeeded(*two_machines([folder], "--save_total_limit", "1", "--resume_from_checkpoint", "last"))
    assert_same_weights(folder, straight)
    assert checkpoints(folder) == checkpoints(straight) == ["checkpoint-16"]


@pytest.mark.slow
def test_a_machine_alive_but_stuck_before_a_step_is_named_within_the_ddp_timeout(tmp_path):
    """Machine 1 hangs while it makes step 10's batch, in a call that lets its heartbeat thread run (a hung read of a
    network file system): its heartbeat goes on, so it is not "lost", but it made fewer batches, and machine 0's line
    names it within --ddp_timeout (15 s) and the heartbeats' check (3 s)."""
    folder = tmp_path / "run"
    fault = fault_env(tmp_path, "step:10")
    machines = two_machines([folder], "--ddp_timeout", "15", machine_1=fault)
    try:
        wait_for(Path(fault["FAULT_STARTED"]), machines[:1], timeout=300)
        stuck_at = time.monotonic()
        status, _, stderr = ended(machines[0], timeout=120)
        seconds = time.monotonic() - stuck_at
    finally:
        kill_all(machines[1])
        ended(machines[1], timeout=60)
    assert status != 0 and 15 <= seconds < 40, (seconds, stderr[-3000:])
    assert re.search(r"^train\.py: error: rank 0 \(machine 0\) stopped after optimizer step [89]: waited for rank 1 "
                     r"\(machine 1\), alive but 1 training batch behind \(no answer within --ddp_timeout 15 s\); "
                     r"resume on every machine with --resume_from_checkpoint last \(the newest complete checkpoint: "
                     r"\S+checkpoint-8\)$", stderr, flags=re.M), stderr[-3000:]  # the loader fetches a batch ahead
