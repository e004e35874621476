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
    Heartbeats,
    World,
    is_lost_peer_error,
    lost_peer_error_in,
    lost_process_message,
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
    assert lost_process_message(world, [1], closed, 9, 600, "run/checkpoint-8") == (
        "rank 0 (machine 0) stopped after optimizer step 9: lost rank 1 (machine 1) (its connection closed); resume "
        "on every machine with --resume_from_checkpoint last (the newest complete checkpoint: run/checkpoint-8)")
    timed_out = RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv")
    assert "lost rank 1 (machine 1) (no answer within --ddp_timeout 20 s)" in lost_process_message(
        world, [1], timed_out, 9, 20, None)
    assert lost_process_message(world, [1], closed, None, 600, None).endswith(
        "before training: lost rank 1 (machine 1) (its connection closed); no complete checkpoint was saved: start "
        "the run again")
    second = World(processes=2, rank=1, local_rank=0, local_processes=1, machines=2, machine=1,
                   store=("10.0.0.1", 29500))
    assert "lost machine 0, which keeps the run's store at 10.0.0.1:29500, with rank 0 (its connection closed)" in \
        lost_process_message(second, None, closed, 3, 600, "run/checkpoint-2")


def test_heartbeats_tell_a_stopped_process_from_one_that_beats():
    """Two processes' heartbeats in a real store: the one that stops beating is the lost one; with the store gone,
    no count can be read (the first machine, which keeps it, is lost)."""
    port = free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=5))
    worlds = [World(processes=2, rank=rank, local_processes=1, machines=2, machine=rank, store=("127.0.0.1", port))
              for rank in (0, 1)]
    first, second = (Heartbeats(world, interval=0.1).start() for world in worlds)
    time.sleep(0.3)
    assert first.lost() == [] and second.lost() == []
    second.stop()
    time.sleep(0.2)
    assert first.lost() == [1]
    first.stop()
    del store
    assert Heartbeats(worlds[1], interval=0.1).lost() is None  # it never beat, or the store is gone


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
    assert "rng_state" not in (checkpoint_problem(folder) or "")  # the next check: its optimizer state


# ---- two machines on one ------------------------------------------------------------------------------------------

# A few optimizer steps of the copy task, saving every 4; evaluated at the end only (the runs compare weights).
RUN = [*QUICK, "--eval_strategy", "no", "--max_train_samples", "64", "--max_tokens", "128", "--max_eval_samples", "4",
       "--max_test_samples", "4", "--max_steps", "16", "--save_steps", "4", "--save_total_limit", "10", "--seed", "3",
       "--cpu_threads", "1", "--report_to", "none"]
ENV = {**os.environ, **SCRIPT_ENV, "OMP_NUM_THREADS": "1"}


def launch(output_dir: Path, *extra: str, machine: int | None = None, port: int | None = None,
           processes: int = 2) -> subprocess.Popen:
    """scripts/train.py as `machine` of two (one process each, meeting at `port` on the loopback address), or as
    `processes` processes on one machine where `machine` is None; in a session of its own."""
    launcher = [sys.executable, "-m", "accelerate.commands.launch"]
    if machine is None:
        launcher += ["--multi_gpu", "--num_machines", "1", "--main_process_port", str(free_port())]
    else:  # the docs' config for each machine, with this machine's rank and the loopback address
        launcher += ["--config_file", str(REPO_ROOT / "configs" / "accelerate_multinode.yaml"), "--machine_rank",
                     str(machine), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port)]
    launcher += ["--num_processes", str(processes), "--mixed_precision", "no", "--dynamo_backend", "no"]
    return subprocess.Popen([*launcher, str(TRAIN_SCRIPT), *RUN, "--output_dir", str(output_dir), *extra],
                            cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def two_machines(folders, *extra: str) -> list[subprocess.Popen]:
    """Machines 0 and 1, each writing into its folder of `folders` (one folder: both share it)."""
    folders = list(folders) * (2 if len(folders) == 1 else 1)
    port = free_port()
    return [launch(folder, *extra, machine=machine, port=port) for machine, folder in enumerate(folders)]


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
        assert refusals[0] == (
            f"train.py: error: --output_dir {folders[1]} on machine 1 is not the folder rank 0 (machine 0) writes "
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


def assert_no_partial_checkpoint(folder: Path) -> None:
    for name in checkpoints(folder):
        assert checkpoint_problem(folder / name) is None, f"{name}: {checkpoint_problem(folder / name)}"


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
    else:  # the store went with machine 0's launcher, or was still there to show rank 0's heartbeats stopped
        assert re.fullmatch(r"machine 0, which keeps the run's store at 127\.0\.0\.1:\d+, with rank 0 \(its "
                            r"connection closed\)|rank 0 \(machine 0\) \(its connection closed\)", lost), lost
    assert_no_partial_checkpoint(folder)
    assert Path(resume_from) == folder / checkpoints(folder)[-1]
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
    assert_no_partial_checkpoint(folder)
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
