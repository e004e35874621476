"""--stop_time_hours: training ends once the run has trained that long (fairseq's --stop-time-hours), with a save and
an evaluation as at its planned end; the run is then finished for resuming unless the limit is raised; every process
stops at the first process's decision."""

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp
from test_train import log_by_step, run_in_process

from modeling.training.arguments import ConfigurationError
from modeling.training.callbacks import StopTime, TrainingClock, first_process_flag
from modeling.training.trainer import TransformerSeq2SeqTrainer

TINY = ["--max_train_samples", "64", "--max_tokens", "128", "--max_eval_samples", "4", "--max_test_samples", "4",
        "--max_steps", "6"]
NO_TIME = "1e-9"  # hours: past at the first check


def state_of(folder):
    return json.loads((folder / "trainer_state.json").read_text())


def test_a_run_stops_at_the_first_logging_step_past_the_limit_saved_and_evaluated(tmp_path):
    out = tmp_path / "run"
    run_in_process(out, *TINY, "--stop_time_hours", NO_TIME, "--logging_steps", "2", "--eval_steps", "100",
                   "--save_steps", "100")
    state = state_of(out)
    assert state["global_step"] == 2  # not step 1: the limit is looked at on logging steps
    assert (out / "checkpoint-2").is_dir() and state["best_model_checkpoint"].endswith("checkpoint-2")
    assert 2 in log_by_step(out, "eval_bleu")
    card = (out / "README.md").read_text()
    assert f"stopped there by --stop_time_hours {float(NO_TIME):g}, of 6 planned steps" in card


def test_saving_at_epoch_ends_the_part_of_the_epoch_trained_is_saved_and_evaluated(tmp_path):
    out = tmp_path / "run"
    run_in_process(out, *TINY, "--stop_time_hours", NO_TIME, "--logging_steps", "3", "--eval_strategy", "epoch",
                   "--save_strategy", "epoch")
    state = state_of(out)
    assert state["global_step"] == 3 and state["epoch"] < 1
    assert (out / "checkpoint-3").is_dir()
    assert 3 in log_by_step(out, "eval_bleu")


def test_without_a_limit_or_under_it_the_run_goes_to_its_planned_end(tmp_path):
    out = tmp_path / "run"
    run_in_process(out, *TINY, "--stop_time_hours", "1", "--eval_strategy", "no", "--save_steps", "3")
    assert state_of(out)["global_step"] == 6
    assert "--stop_time_hours 1," not in (out / "README.md").read_text()


def test_a_run_stopped_by_the_limit_is_finished_until_the_limit_is_raised(tmp_path):
    out = tmp_path / "run"
    common = [*TINY, "--eval_strategy", "no", "--save_steps", "100", "--logging_steps", "2"]
    run_in_process(out, *common, "--stop_time_hours", NO_TIME)
    assert state_of(out)["global_step"] == 2
    with pytest.raises(ConfigurationError, match=r"checkpoint-2 is at [\d.e-]+ hours of training, and "
                                                 r"--stop_time_hours is 1e-09: that run is finished .*; raise "
                                                 r"--stop_time_hours to train it further"):
        run_in_process(out, *common, "--stop_time_hours", NO_TIME, "--resume_from_checkpoint", "last")
    run_in_process(out, *common, "--stop_time_hours", "1", "--resume_from_checkpoint", "last")
    assert state_of(out)["global_step"] == 6
    assert sorted(log_by_step(out, "loss")) == [2, 4, 6]  # one run: the stopped launch's log, then the resumed one's


class StepClock:
    """A stand-in for `time` in modeling.training.trainer whose clock moves 100 s each time it is read."""

    def __init__(self):
        self.now = 0.0

    def time(self) -> float:
        self.now += 100
        return self.now


def test_saving_only_the_best_a_run_stopped_after_its_last_save_is_finished_all_the_same(tmp_path, monkeypatch):
    """Its newest checkpoint (the best) predates the limit; the run's own state records the time that stopped it."""
    monkeypatch.setattr("modeling.training.callbacks.time", StepClock())
    out, limit = tmp_path / "run", 300 / 3600
    common = [*TINY, "--save_strategy", "best", "--metric_for_best_model", "exact_match", "--eval_steps", "1",
              "--logging_steps", "2"]
    run_in_process(out, *common, "--stop_time_hours", str(limit))
    state, checkpoints = state_of(out), sorted(out.glob("checkpoint-*"))
    newest = state_of(checkpoints[-1])
    assert state["global_step"] < 6 and newest["global_step"] < state["global_step"]
    assert newest["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] < 300
    assert state["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] >= 300
    weights = (out / "model.safetensors").read_bytes()
    with pytest.raises(ConfigurationError, match=r"the run in .* is finished, at [\d.]+ hours of training, and "
                                                 r"--stop_time_hours is 0.0833333, after its newest checkpoint left"):
        run_in_process(out, *common, "--stop_time_hours", str(limit), "--resume_from_checkpoint", "last")
    assert (out / "model.safetensors").read_bytes() == weights


class SetClock:
    """A stand-in for `time` in modeling.training.trainer that reads `now`."""

    def __init__(self):
        self.now = 0.0

    def time(self) -> float:
        return self.now


def clock_jumps_at(monkeypatch, callback: type, event: str) -> SetClock:
    """The training clock stands still (at 0 s) until `callback`'s `event` (e.g. StopTime's on_epoch_end) comes,
    then reads 10,000 s."""
    clock, handler = SetClock(), getattr(callback, event)

    def jumped(self, *args, **kwargs):
        clock.now = 10_000.0
        return handler(self, *args, **kwargs)

    monkeypatch.setattr("modeling.training.callbacks.time", clock)
    monkeypatch.setattr(callback, event, jumped)
    return clock


@pytest.fixture
def limit_passed_at_epoch_end(monkeypatch):
    clock_jumps_at(monkeypatch, StopTime, "on_epoch_end")


def test_stopped_at_an_epoch_end_the_step_is_not_evaluated_again_and_its_save_records_the_stop(
        tmp_path, limit_passed_at_epoch_end):
    """The limit is passed at an epoch's end whose step its interval already saved and evaluated: the evaluation is
    not repeated, the save is (its checkpoint records the time that stopped the run), so a run killed before its
    card is finished from that checkpoint rather than trained on."""
    out, epoch_steps = tmp_path / "run", 4  # 64 pairs in batches of at most 128 tokens
    common = [*TINY, "--stop_time_hours", str(1000 / 3600), "--logging_steps", "100", "--eval_steps",
              str(epoch_steps), "--save_steps", str(epoch_steps)]
    run_in_process(out, *common)
    state = state_of(out)
    assert state["global_step"] == epoch_steps and state["epoch"] == 1
    assert [entry["step"] for entry in state["log_history"] if "eval_bleu" in entry] == [epoch_steps]
    saved = state_of(out / f"checkpoint-{epoch_steps}")
    assert saved["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] >= 1000
    (out / "README.md").unlink()  # killed after its last save, before its card and final state
    (out / "trainer_state.json").unlink()
    run_in_process(out, *common, "--resume_from_checkpoint", "last")
    assert state_of(out)["global_step"] == epoch_steps and (out / "README.md").is_file()


def test_a_step_its_interval_saved_is_not_saved_again_over_itself_nor_evaluated_off_its_interval(
        tmp_path, limit_passed_at_epoch_end, monkeypatch):
    """Saving every 4 steps, evaluating every 3: the stop at the end of epoch 1 (step 4, saved there) leaves that
    checkpoint, the newest complete one, as saved but for its record of the time (a second save over it could leave
    none complete if killed meanwhile); the run's validation and test scores follow training anyway. Its
    trainer_state.json keeps its permissions."""
    saves = []
    save_checkpoint = TransformerSeq2SeqTrainer._save_checkpoint

    def counted(self, *args, **kwargs):
        saves.append(self.state.global_step)
        return save_checkpoint(self, *args, **kwargs)

    monkeypatch.setattr(TransformerSeq2SeqTrainer, "_save_checkpoint", counted)
    out = tmp_path / "run"
    run_in_process(out, *TINY, "--stop_time_hours", str(1000 / 3600), "--logging_steps", "100", "--eval_steps", "3",
                   "--save_steps", "4", "--load_best_model_at_end", "false")
    assert saves == [4]
    path = out / "checkpoint-4" / "trainer_state.json"
    saved = json.loads(path.read_text())
    assert [entry["step"] for entry in saved["log_history"] if "eval_bleu" in entry] == [3]
    assert saved["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] >= 1000
    assert path.stat().st_mode & 0o777 == (out / "checkpoint-4" / "config.json").stat().st_mode & 0o777
    assert not list((out / "checkpoint-4").glob(".*"))


def test_a_run_that_passed_the_limit_only_after_its_last_step_goes_on_from_it_with_more_steps(
        tmp_path, monkeypatch):
    """The run's own state, saved after its last checkpoint (loading its best model, evaluating), passed a limit
    that checkpoint, at the same step, had not: no step came after it, so more steps go on from it."""
    clock = clock_jumps_at(monkeypatch, TrainingClock, "on_train_end")
    out, common = tmp_path / "run", [*TINY[:-2], "--eval_strategy", "no", "--save_steps", "3",
                                     "--stop_time_hours", str(1000 / 3600)]
    run_in_process(out, *common, "--max_steps", "6")
    assert state_of(out)["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] >= 1000
    clock.now = 0.0
    run_in_process(out, *common, "--max_steps", "9", "--resume_from_checkpoint", "last")
    assert state_of(out)["global_step"] == 9


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "inf"])
def test_a_limit_that_is_not_a_positive_number_of_hours_is_refused(tmp_path, hours):
    with pytest.raises(ConfigurationError, match=rf"^--stop_time_hours must be a finite number of hours > 0, got"):
        run_in_process(tmp_path / "out", "--stop_time_hours", hours)
    assert not (tmp_path / "out").exists()


def _flag_of_each_process(rank: int, port: int, results) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # each process's clock says otherwise: the first process's word holds for both
        results[rank] = (first_process_flag(rank == 0), first_process_flag(rank == 1))
    finally:
        torch.distributed.destroy_process_group()


def test_every_process_takes_the_first_processs_decision():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.get_context("spawn").Manager().dict()
    mp.spawn(_flag_of_each_process, args=(port, results), nprocs=2)
    assert dict(results) == {0: (True, False), 1: (True, False)}
    assert first_process_flag(True) is True and first_process_flag(False) is False  # one process: its own
