"""Nothing lost, nothing mixed: a run folder holding an earlier run is refused, checkpoints cut short by a crash are
skipped when resuming, a run killed with SIGKILL resumes to the same weights as an uninterrupted one, and
`--max_steps 0` is refused."""

import errno
import json
import logging
import os
import re
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
from launch_helpers import QUICK, REPO_ROOT, SCRIPT_ENV, free_port, load_script
from safetensors.torch import load_file

from modeling.training.argument_parsing import parse_arguments
from modeling.training.arguments import ConfigurationError
from modeling.training.checkpoints import checkpoint_problem, checkpoint_step, last_checkpoints
from modeling.training.run import TrainingStopped, train
from modeling.training.run_lock import RUN_LOCK_NAME, RunLock
from modeling.training.run_safety import resolve_checkpoint, warn_of_missing_random_state
from modeling.training.trainer import NonFiniteLossError

DEFAULT_CONFIG = REPO_ROOT / "configs" / "copy_tiny.yaml"
SMALL = [*QUICK, "--eval_strategy", "no", "--max_train_samples", "64", "--max_tokens", "128",
         "--max_eval_samples", "4", "--max_test_samples", "4"]


def arguments(output_dir: Path, *extra: str):
    return parse_arguments([*SMALL, "--output_dir", str(output_dir), *extra], copy_task_config=DEFAULT_CONFIG)


def run(output_dir: Path, *extra: str) -> dict:
    model_args, data_args, training_args, config_path = arguments(output_dir, *extra)
    argv = [*SMALL, "--output_dir", str(output_dir), *extra]  # as scripts/train.py hands them on, for the card
    return train(model_args, data_args, training_args, config_path=config_path, argv=argv)


def card_command(folder: Path) -> str:
    return (folder / "README.md").read_text().split("## Command\n\n```bash\n")[1].split("\n```")[0]


def snapshot(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns for path in folder.rglob("*")}


# ---- an output_dir holding an earlier run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("earlier") / "run"
    run(output_dir, "--max_steps", "8", "--save_steps", "4", "--save_total_limit", "5")
    return output_dir


def test_a_folder_holding_an_earlier_run_is_refused_and_left_untouched(earlier_run):
    before = snapshot(earlier_run)
    with pytest.raises(ConfigurationError, match=r"already holds an earlier run .*--overwrite_output_dir"):
        run(earlier_run, "--max_steps", "12", "--save_steps", "4")
    assert snapshot(earlier_run) == before


def test_overwrite_output_dir_removes_the_earlier_checkpoints(earlier_run, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for path in earlier_run.iterdir():  # a copy: the fixture's run stays for the other tests
        if path.is_dir():
            subprocess.run(["cp", "-r", str(path), str(folder / path.name)], check=True)
        else:
            (folder / path.name).write_bytes(path.read_bytes())
    (folder / "checkpoint-1000").mkdir()  # a stale checkpoint of a longer earlier run
    (folder / "checkpoint-1000" / "trainer_state.json").write_text(json.dumps({"global_step": 1000}))
    (folder / "eval-test").mkdir()  # scores of the earlier model, and a result this run will not write
    (folder / "eval-test" / "results.json").write_text('{"bleu": 99.0}')
    (folder / "predict_results.json").write_text("{}")
    run(folder, "--max_steps", "6", "--save_steps", "3", "--overwrite_output_dir", "true")
    assert sorted(path.name for path in folder.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 6
    assert not (folder / "eval-test").exists() and not (folder / "predict_results.json").exists()


def test_overwrite_output_dir_with_a_checkpoint_of_another_folder_replaces_the_earlier_run(earlier_run, tmp_path):
    folder, other = tmp_path / "run", tmp_path / "other"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    subprocess.run(["cp", "-r", str(earlier_run), str(other)], check=True)
    (folder / "eval-old").mkdir()
    run(folder, "--max_steps", "6", "--save_steps", "6", "--overwrite_output_dir", "true",
        "--resume_from_checkpoint", str(other / "checkpoint-4"))
    assert sorted(path.name for path in folder.glob("checkpoint-*")) == ["checkpoint-6"]  # not the old checkpoint-8
    assert not (folder / "eval-old").exists()
    inside = folder / "kept" / "checkpoint-6"  # a checkpoint in the folder that would be deleted first
    inside.parent.mkdir()
    subprocess.run(["cp", "-r", str(folder / "checkpoint-6"), str(inside)], check=True)
    with pytest.raises(ConfigurationError, match=r"checkpoint-6 lies inside --output_dir .*run, which "
                                                 r"--overwrite_output_dir would delete first"):
        run(folder, "--max_steps", "8", "--overwrite_output_dir", "true", "--resume_from_checkpoint", str(inside))
    assert inside.is_dir()


def test_overwrite_output_dir_refuses_a_run_folder_that_also_holds_other_files(earlier_run, tmp_path):
    """Only what a run writes is deleted: a user's notes or a corpus kept in the run's folder make it refuse."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    (folder / "notes.txt").write_text("what I tried\n")
    (folder / "data").mkdir()
    (folder / "data" / "train.de").write_text("ein Hund\n")
    before = snapshot(folder)
    with pytest.raises(ConfigurationError, match=r"--overwrite_output_dir would delete the earlier run in "
                                                 r"--output_dir .*run, but the folder also holds what no training run "
                                                 r"writes \(data, notes.txt\); move that out first"):
        run(folder, "--max_steps", "2", "--overwrite_output_dir", "true")
    assert snapshot(folder) == before


def test_resuming_with_other_optimizer_settings_is_refused_and_the_card_says_what_was_resumed(earlier_run, tmp_path):
    """The checkpoint's optimizer and schedule state bring back its learning rate, betas, epsilon and weight decay:
    other values given were ignored, and the card reported them."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    for extra, message in ((["--learning_rate", "3.5"], r"--learning_rate [\d.e-]+ there, 3.5 here"),
                           (["--adam_beta2", "0.9", "--weight_decay", "0.25"],
                            r"--adam_beta2 0.98 there, 0.9 here; --weight_decay 0 there, 0.25 here")):
        with pytest.raises(ConfigurationError, match=r"checkpoint-8: its optimizer and schedule continue with "
                                                     rf"their own settings \({message}\), so the ones given"):
            run(folder, "--max_steps", "10", "--resume_from_checkpoint", "last", *extra)
    run(folder, "--max_steps", "10", "--resume_from_checkpoint", "last")
    assert "--max_steps 10 --resume_from_checkpoint last" in card_command(folder)


def test_the_card_gives_every_launch_of_a_resumed_run(earlier_run, tmp_path):
    """Each checkpoint records the run's launches up to it, so the card's command section has the first launch's
    command (which set --save_steps 4), then each resumed one with the checkpoint it went on from."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    first = f"accelerate launch scripts/train.py {' '.join(SMALL)} --output_dir {earlier_run} --max_steps 8 " \
            "--save_steps 4 --save_total_limit 5"
    run(folder, "--max_steps", "12", "--resume_from_checkpoint", "last")
    second = f"accelerate launch scripts/train.py {' '.join(SMALL)} --output_dir {folder} --max_steps 12 " \
             "--resume_from_checkpoint last"
    assert card_command(folder) == (f"# launch 1: started the run\n{first}\n"
                                     f"# launch 2: resumed from {folder / 'checkpoint-8'}\n{second}")
    # a third launch resumes from a checkpoint of the second, which recorded both
    run(folder, "--max_steps", "16", "--resume_from_checkpoint", str(folder / "checkpoint-12"))
    commands = card_command(folder).splitlines()
    assert commands[:4] == ["# launch 1: started the run", first, f"# launch 2: resumed from {folder / 'checkpoint-8'}",
                            second]
    assert commands[4] == f"# launch 3: resumed from {folder / 'checkpoint-12'}"
    assert commands[5].endswith(f"--max_steps 16 --resume_from_checkpoint {folder / 'checkpoint-12'}")
    saved = json.loads((folder / "checkpoint-16" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert [launch["resumed_from"] for launch in saved["LaunchHistory"]["args"]["launches"]] == [
        None, str(folder / "checkpoint-8"), str(folder / "checkpoint-12")]


def test_a_plateau_schedule_resumes_with_its_own_learning_rate_and_refuses_another(tmp_path):
    """reduce_lr_on_plateau keeps no base rate, only its current one: that is compared with the rate given, reduced
    by its factor as often as its evaluations allow (here it reduces after each one, as none counts as better with
    a threshold of 10). transformers' greedy schedule, which also raises its rate, keeps its start: compared."""
    from modeling.training.run_safety import plateau_difference

    plateau = ["--lr_scheduler_type", "reduce_lr_on_plateau", "--eval_strategy", "steps", "--eval_steps", "2",
               "--lr_scheduler_kwargs", '{"factor": 0.5, "patience": 0, "threshold": 10}', "--learning_rate", "0.01"]
    run(tmp_path / "run", "--max_steps", "4", "--save_steps", "4", *plateau)
    schedule = torch.load(tmp_path / "run" / "checkpoint-4" / "scheduler.pt", weights_only=True)
    assert schedule["_last_lr"][0] == pytest.approx(0.0025)  # reduced twice
    with pytest.raises(ConfigurationError, match=r"checkpoint-4: its optimizer and schedule continue with their own "
                                                 r"settings \(--learning_rate 0.003 here, but its reduce_lr_on_plateau "
                                                 r"rate is 0.0025, not 0.003 reduced by its factor 0.5 up to 2 "
                                                 r"time\(s\), as its 2 evaluation\(s\) allow\)"):
        run(tmp_path / "run", "--max_steps", "6", *plateau, "--learning_rate", "0.003", "--resume_from_checkpoint",
            "last")
    run(tmp_path / "run", "--max_steps", "6", *plateau, "--resume_from_checkpoint", "last")
    assert (tmp_path / "run" / "checkpoint-6").is_dir()

    greedy = ["--lr_scheduler_type", "greedy", "--eval_strategy", "steps", "--eval_steps", "2", "--learning_rate", "0.01",
              "--lr_scheduler_kwargs", '{"patience": 0, "warmup": 0, "cooldown": 0, "min_lr": 0, "max_lr": 1}']
    run(tmp_path / "greedy", "--max_steps", "6", "--save_steps", "6", *greedy)
    schedule = torch.load(tmp_path / "greedy" / "checkpoint-6" / "scheduler.pt", weights_only=True)
    assert schedule["_last_lr"][0] == pytest.approx(0.01 * 0.95)  # up once, then down twice (BLEU stays 0)
    with pytest.raises(ConfigurationError, match=r"\(--learning_rate 0.01 there, 0.003 here\)"):
        run(tmp_path / "greedy", "--max_steps", "8", *greedy, "--learning_rate", "0.003", "--resume_from_checkpoint",
            "last")
    run(tmp_path / "greedy", "--max_steps", "8", *greedy, "--resume_from_checkpoint", "last")
    assert (tmp_path / "greedy" / "checkpoint-8").is_dir()

    # a rate at its floor hides the start; reductions no evaluation allowed yet are not assumed (torch's default
    # factor 0.1 made a tenfold rate pass)
    state = {"_last_lr": [0.001], "factor": 0.5, "min_lrs": [0.001], "last_epoch": 3, "patience": 0, "cooldown": 0,
             "mode_worse": float("inf")}
    assert plateau_difference(state, 0.003) is None
    assert plateau_difference({**state, "min_lrs": [0]}, 0.003) is not None
    assert plateau_difference({**state, "min_lrs": [0]}, 0.004) is None  # two reductions
    assert plateau_difference({**state, "min_lrs": [0], "patience": 1}, 0.004) is not None  # one at most
    assert plateau_difference({**state, "min_lrs": [0], "factor": 0.1, "last_epoch": 0}, 0.01) is not None
    assert plateau_difference({**state, "min_lrs": [0], "factor": 0.1, "last_epoch": 1}, 0.01) is None
    assert plateau_difference({"_last_lr": [0.001], "factor": 0.5, "_init_lrs": [0.003]}, 0.01) is None  # greedy's


@pytest.mark.parametrize("optim", [
    ["adafactor"], ["rmsprop"], ["sgd", "--optim_args", "momentum=0.9,weight_decay=0.01"],
])
def test_optimizers_without_adam_settings_resume(tmp_path, optim):
    """Adafactor's epsilon is a pair and RMSprop keeps torch's own: neither comes from --adam_epsilon, so neither is
    compared (a resume crashed, or was refused for an epsilon nobody gave); an --optim_args weight decay, which the
    Trainer's parameter groups replace with --weight_decay's, is not compared with the groups' either."""
    run(tmp_path / "run", "--max_steps", "2", "--save_steps", "2", "--optim", *optim)
    run(tmp_path / "run", "--max_steps", "4", "--save_steps", "2", "--optim", *optim,
        "--resume_from_checkpoint", "last")
    assert (tmp_path / "run" / "checkpoint-4").is_dir()


def test_resuming_with_another_optimizer_or_its_settings_is_refused(earlier_run, tmp_path):
    """AdamW's state loaded into SGD failed at the first step (KeyError 'momentum'); an --optim_args value was ignored
    as the loaded state brought back its own. An FSDP checkpoint's optimizer.bin is read as optimizer.pt is."""
    from modeling.training.run_safety import refuse_other_optimization

    with pytest.raises(ConfigurationError, match=r"checkpoint-8: it was trained with another optimizer than --optim "
                                                 r"sgd \(its settings: .*betas.*\), whose state this one cannot"):
        run(tmp_path / "new", "--max_steps", "10", "--optim", "sgd", "--resume_from_checkpoint",
            str(earlier_run / "checkpoint-8"))
    run(tmp_path / "sgd", "--max_steps", "2", "--save_steps", "2", "--optim", "sgd")
    with pytest.raises(ConfigurationError, match=r"\(--optim_args momentum 0 there, 0.9 here\)"):
        run(tmp_path / "sgd", "--max_steps", "4", "--optim", "sgd", "--optim_args", "momentum=0.9",
            "--resume_from_checkpoint", "last")
    # AdamW ignores --optim_args: a changed --adam_beta1 beside one is named, and refused (both betas were one key)
    with pytest.raises(ConfigurationError, match=r"\(--adam_beta1 0.9 there, 0.5 here\)"):
        run(tmp_path / "new", "--max_steps", "10", "--optim_args", "eps=1e-3,betas=1", "--adam_beta1", "0.5",
            "--resume_from_checkpoint", str(earlier_run / "checkpoint-8"))
    fsdp = tmp_path / "fsdp" / "checkpoint-8"
    fsdp.parent.mkdir()
    subprocess.run(["cp", "-r", str(earlier_run / "checkpoint-8"), str(fsdp)], check=True)
    (fsdp / "optimizer.pt").rename(fsdp / "optimizer.bin")
    with pytest.raises(ConfigurationError, match=r"\(--adam_epsilon 1e-09 there, 1e-06 here\)"):
        refuse_other_optimization(str(fsdp), arguments(tmp_path / "x", "--adam_epsilon", "1e-6")[2])


def test_only_what_no_run_writes_keeps_a_folder_from_being_replaced(tmp_path):
    from modeling.training.run_safety import not_run_files

    for name in ("averaged_from.json", "emissions.csv", ".DS_Store", "config.json", "eval-test", "checkpoint-3",
                 ".README.md.4242.writing", "notes.txt", "data"):  # the card's write a killed process left
        (tmp_path / name).mkdir() if name in ("eval-test", "checkpoint-3", "data") else (tmp_path / name).write_text("")
    assert not_run_files(tmp_path) == ["data", "notes.txt"]


def test_resuming_the_last_checkpoint_of_a_folder_that_does_not_exist_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigurationError, match=r"--resume_from_checkpoint last: no complete checkpoint-\* folder in "
                                                 r".*missing$"):
        run(tmp_path / "missing", "--max_steps", "2", "--resume_from_checkpoint", "last")


def test_overwrite_output_dir_refuses_a_folder_that_holds_no_run(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.de").write_text("ein Hund\n")
    with pytest.raises(ConfigurationError, match=r"--overwrite_output_dir replaces a training run, but --output_dir "
                                                 r".*data holds none \(.*it holds train.de\)"):
        run(folder, "--max_steps", "2", "--overwrite_output_dir", "true")
    with pytest.raises(ConfigurationError, match=r"data holds other files \(train.de\); choose a new or empty folder$"):
        run(folder, "--max_steps", "2")  # without a suggestion to replace it
    assert [path.name for path in folder.iterdir()] == ["train.de"]


@pytest.mark.parametrize("state_saved_before_the_card", [False, True])
def test_a_run_stopped_after_its_last_checkpoint_is_finished_without_training(
        earlier_run, tmp_path, capsys, caplog, state_saved_before_the_card):
    """Killed in its final evaluation (after checkpoint-8, its last step, before its card): resuming was refused as
    a finished run, and starting again as an earlier run, so the run could not be finished. Now the same command
    with --resume_from_checkpoint last writes the final model, evaluations and card from the checkpoint without
    taking a step; a second time it is refused, as the run is finished. Runs saved before the top-level
    trainer_state.json was written last have it already (the card is missing all the same)."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    for name in ("README.md", "model.safetensors", "all_results.json", "test_results.json"):
        (folder / name).unlink()  # what a run killed in its final evaluation has not written yet
    if not state_saved_before_the_card:
        (folder / "trainer_state.json").unlink()
    # a best checkpoint that is gone is not named as the final model (the Trainer ignores it when resuming too)
    state_file = folder / "checkpoint-8" / "trainer_state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()),
                                      "best_model_checkpoint": str(folder / "checkpoint-2")}))
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        run(folder, "--max_steps", "8", "--resume_from_checkpoint", "last")
    assert "Finishing the run from" in capsys.readouterr().out
    assert f"The best checkpoint {folder / 'checkpoint-2'} recorded in" in caplog.text
    assert sorted(path.name for path in folder.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    final, last = load_file(folder / "model.safetensors"), load_file(folder / "checkpoint-8" / "model.safetensors")
    assert final.keys() == last.keys() and all(torch.equal(final[name], last[name]) for name in final)
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["global_step"] == 8 and state["best_model_checkpoint"] is None
    assert state["log_history"] == json.loads(state_file.read_text())["log_history"]
    results = json.loads((folder / "all_results.json").read_text())
    assert results["test_sentences"] == 4 and "eval_bleu" in results
    trained = json.loads(state_file.read_text())["stateful_callbacks"]["TrainingClock"]["args"][
        "seconds_before"]  # the time up to the last step, not this launch's
    card = (folder / "README.md").read_text()
    assert f"| training time | {trained / 60:,.1f} min ({trained:,.0f} s) |" in card and "checkpoint-2" not in card
    assert card_command(folder).splitlines()[-2] == f"# launch 2: resumed from {folder / 'checkpoint-8'}"
    before = snapshot(folder)
    for extra, step in ((["--resume_from_checkpoint", "last"], 8),
                        (["--resume_from_checkpoint", str(folder / "checkpoint-4"), "--max_steps", "4"], 4)):
        with pytest.raises(ConfigurationError, match=rf"checkpoint-{step} is at step {step}, and --max_steps is "
                                                     rf"{step}: that run is finished"):
            run(folder, "--max_steps", "8", *extra)  # an older checkpoint would replace the final model
    with pytest.raises(ConfigurationError, match=r"that run is finished"):  # nor is it finished into another folder
        run(tmp_path / "elsewhere", "--max_steps", "8", "--resume_from_checkpoint", str(folder / "checkpoint-8"))
    assert snapshot(folder) == before and not (tmp_path / "elsewhere").exists()


def test_a_resumed_launch_stopped_before_its_card_is_finished_not_taken_for_the_earlier_finish(
        earlier_run, tmp_path, monkeypatch):
    """A finished run resumed from an older checkpoint (another --seed: other batches) and stopped before its card:
    the folder still held the earlier finish's card and top-level state, at the same step, so the new last
    checkpoint was refused as finished, and the final model (already replaced) did not match the card."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed while its card was written
    monkeypatch.setattr("modeling.training.run.write_model_card", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(folder, "--max_steps", "8", "--seed", "1", "--resume_from_checkpoint", str(folder / "checkpoint-4"))
    monkeypatch.undo()
    rerun = load_file(folder / "checkpoint-8" / "model.safetensors")
    assert not all(torch.equal(rerun[name], tensor) for name, tensor in
                   load_file(earlier_run / "checkpoint-8" / "model.safetensors").items())
    run(folder, "--max_steps", "8", "--seed", "1", "--resume_from_checkpoint", "last")  # finished, not refused
    final = load_file(folder / "model.safetensors")
    assert all(torch.equal(final[name], rerun[name]) for name in final)
    assert json.loads((folder / "trainer_state.json").read_text())["log_history"][:8] == json.loads(
        (folder / "checkpoint-8" / "trainer_state.json").read_text())["log_history"][:8]


def test_last_is_refused_where_the_run_finished_after_its_newest_checkpoint_left(earlier_run, tmp_path):
    """With save_total_limit 1 the Trainer keeps only the best checkpoint when a run ends: `last` then named an
    older checkpoint of a finished run, and its steps after it were trained again over the final model."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    subprocess.run(["rm", "-r", str(folder / "checkpoint-8")], check=True)  # checkpoint-4 kept as the best
    before = snapshot(folder)
    with pytest.raises(ConfigurationError, match=rf"the run in {folder} is finished, at step 8, and --max_steps is "
                                                 r"8, after its newest checkpoint left \(checkpoint-4\).* name it"):
        run(folder, "--max_steps", "8", "--resume_from_checkpoint", "last")
    assert snapshot(folder) == before


def test_each_checkpoint_records_how_its_run_saves_so_a_lost_save_is_told(tmp_path):
    """The Trainer's state keeps save_steps, which saving at epoch ends leaves unused: each checkpoint also records
    the save strategy, so `--last 2` tells a best checkpoint kept apart (its next save rotated away) from the save
    just before the newest."""
    folder = tmp_path / "run"
    run(folder, "--max_steps", "6", "--save_steps", "2")
    saved = json.loads((folder / "checkpoint-6" / "trainer_state.json").read_text())
    assert saved["stateful_callbacks"]["CheckpointSchedule"]["args"] == {"save_strategy": "steps"}
    for best, kept, refused in (("checkpoint-4", ["checkpoint-4", "checkpoint-6"], False),
                                ("checkpoint-2", ["checkpoint-2", "checkpoint-6"], True)):
        if refused:
            subprocess.run(["rm", "-r", str(folder / "checkpoint-4")], check=True)  # rotated away, the best kept
        state_file = folder / "checkpoint-6" / "trainer_state.json"
        state_file.write_text(json.dumps({**saved, "best_model_checkpoint": str(folder / best)}))
        if refused:
            with pytest.raises(ValueError, match=r"checkpoint-2 is not one of the last 2 saves"):
                last_checkpoints(folder, 2)
        else:
            assert [path.name for path in last_checkpoints(folder, 2)] == kept


def test_a_malformed_launch_record_is_named_in_the_card_not_a_crash(earlier_run, tmp_path):
    """A record missing a field failed only when the card was written, after training; transformers' own restoring
    (--restore_callback_states_from_checkpoint), which would rebuild it unchecked (a TypeError), is refused."""
    for number, record in enumerate(({"launches": [1, 2], "complete": True, "extra": 0},
                                     {"launches": [{"command": "x"}], "complete": True},
                                     {"launches": [], "complete": True})):
        folder = tmp_path / f"run{number}"
        subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
        state_file = folder / "checkpoint-8" / "trainer_state.json"
        state = json.loads(state_file.read_text())
        state["stateful_callbacks"]["LaunchHistory"] = {"args": record, "attributes": {}}
        state_file.write_text(json.dumps(state))
        run(folder, "--max_steps", "9", "--resume_from_checkpoint", "last")
        assert card_command(folder).splitlines()[:2] == [
            f"# the launches up to {folder / 'checkpoint-8'} are not recorded there",
            f"# resumed from {folder / 'checkpoint-8'}"], record
    before = snapshot(folder)
    with pytest.raises(ConfigurationError, match=r"^--restore_callback_states_from_checkpoint: a resumed run always "):
        run(folder, "--max_steps", "10", "--resume_from_checkpoint", "last",
            "--restore_callback_states_from_checkpoint", "true")
    assert snapshot(folder) == before


def test_resuming_continues_the_run_in_its_folder(earlier_run, tmp_path, capsys, caplog):
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        run(folder, "--max_steps", "12", "--save_steps", "4", "--resume_from_checkpoint", "last")
    assert f"Resuming from {folder / 'checkpoint-8'} at step 8" in capsys.readouterr().out
    assert "batches the data otherwise" not in caplog.text  # the same settings: the same batches
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 12
    # The card's training time covers the run, not only this launch (the Trainer's train_runtime)
    clock = json.loads((folder / "checkpoint-8" / "trainer_state.json").read_text())["stateful_callbacks"]
    before = clock["TrainingClock"]["args"]["seconds_before"]
    first_launch = json.loads((earlier_run / "train_results.json").read_text())["train_runtime"]
    assert 0 < before <= first_launch
    total = before + json.loads((folder / "train_results.json").read_text())["train_runtime"]
    assert f"| training time | {total / 60:,.1f} min ({total:,.0f} s) |" in (folder / "README.md").read_text()


def test_resuming_with_other_batches_is_warned_of_naming_the_settings(earlier_run, tmp_path, caplog):
    """The Trainer counts the checkpoint's steps off this launch's batches: with another token budget, seed or data
    those are other batches, and the resumed epoch repeats or leaves out pairs."""
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        run(folder, "--max_steps", "10", "--resume_from_checkpoint", str(folder / "checkpoint-4"),
            "--max_tokens", "96", "--data_seed", "7", "--max_train_samples", "60")
    assert (f"--resume_from_checkpoint {folder / 'checkpoint-4'}: this launch batches the data otherwise than the run "
            "it resumes (--max_tokens 96 (the checkpoint's: 128); --data_seed/--seed 7 (the checkpoint's: 0); other "
            "training pairs (their token lengths differ)); the Trainer counts") in caplog.text
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == 10  # training went on


def test_fixed_size_batches_are_recorded_and_another_batch_size_on_resume_is_warned_of(tmp_path, caplog):
    folder = tmp_path / "run"
    flags = list(zip(SMALL[::2], SMALL[1::2]))
    without_budget = [part for flag, value in flags if flag != "--max_tokens" for part in (flag, value)]
    model_args, data_args, training_args, config_path = parse_arguments(
        [*without_budget, "--output_dir", str(folder), "--per_device_train_batch_size", "8", "--max_steps", "4",
         "--save_steps", "2"], copy_task_config=DEFAULT_CONFIG)
    assert training_args.max_tokens is None
    train(model_args, data_args, training_args, config_path=config_path)
    model_args, data_args, training_args, config_path = parse_arguments(
        [*without_budget, "--output_dir", str(folder), "--per_device_train_batch_size", "4", "--max_steps", "6",
         "--resume_from_checkpoint", "last"], copy_task_config=DEFAULT_CONFIG)
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        train(model_args, data_args, training_args, config_path=config_path)
    assert "batches the data otherwise than the run it resumes (--per_device_train_batch_size 4 (the " \
           "checkpoint's: 8))" in caplog.text


def test_a_change_of_batching_rule_is_named_once():
    from datasets import Dataset

    from modeling.training.callbacks import EpochBatches

    pairs = Dataset.from_dict({"input_ids": [[5, 6, 2], [7, 2]], "labels": [[8, 2], [9, 9, 2]]})
    common = dict(data_seed=None, seed=0, world_size=1, gradient_accumulation_steps=1, pad_to_multiple_of=None,
                  per_device_train_batch_size=8, train_sampling_strategy="random", dataloader_drop_last=False)
    budget = EpochBatches.of(pairs, SimpleNamespace(**common, max_tokens=1024))
    fixed = EpochBatches.of(pairs, SimpleNamespace(**common, max_tokens=None))
    assert fixed.differences(budget.state()["args"]) == [
        "--per_device_train_batch_size 8 (the checkpoint's: --max_tokens 1024)"]
    assert budget.differences(budget.state()["args"]) == [] and budget.differences({}) == []


def test_a_checkpoint_saved_before_the_training_clock_and_launch_history_existed_resumes(earlier_run, tmp_path):
    # the Trainer's save looked up the clock's record in the state it loaded from such a checkpoint: a KeyError at
    # the first save after resuming, and again after every later resume
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    state_file = folder / "checkpoint-8" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["stateful_callbacks"]["TrainingClock"]
    del state["stateful_callbacks"]["LaunchHistory"]
    del state["stateful_callbacks"]["EpochBatches"]
    state_file.write_text(json.dumps(state))
    run(folder, "--max_steps", "12", "--save_steps", "4", "--resume_from_checkpoint", "last", "--max_tokens", "96")
    assert json.loads((folder / "checkpoint-12" / "trainer_state.json").read_text())["global_step"] == 12
    runtime = json.loads((folder / "train_results.json").read_text())["train_runtime"]  # the time before is unknown
    assert f"| training time | {runtime / 60:,.1f} min ({runtime:,.0f} s) |" in (folder / "README.md").read_text()
    # so are the launches before it, and the card says so
    assert card_command(folder).splitlines()[:2] == [
        f"# the launches up to {folder / 'checkpoint-8'} are not recorded there",
        f"# resumed from {folder / 'checkpoint-8'}"]


# ---- checkpoints cut short ---------------------------------------------------------------------------------------


def test_incomplete_checkpoints_are_skipped_with_a_warning_naming_them(earlier_run, tmp_path, caplog):
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    # checkpoint-12: killed while writing the weights; checkpoint-16: killed before trainer_state.json (written last).
    subprocess.run(["cp", "-r", str(folder / "checkpoint-8"), str(folder / "checkpoint-12")], check=True)
    weights = folder / "checkpoint-12" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    subprocess.run(["cp", "-r", str(folder / "checkpoint-8"), str(folder / "checkpoint-16")], check=True)
    (folder / "checkpoint-16" / "trainer_state.json").unlink()
    # checkpoint-20: its optimizer state damaged on disk afterwards (one byte in the middle).
    subprocess.run(["cp", "-r", str(folder / "checkpoint-8"), str(folder / "checkpoint-20")], check=True)
    optimizer = folder / "checkpoint-20" / "optimizer.pt"
    data = bytearray(optimizer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    optimizer.write_bytes(bytes(data))

    arguments = SimpleNamespace(resume_from_checkpoint="last", output_dir=str(folder))
    assert resolve_checkpoint(arguments) == str(folder / "checkpoint-8")
    warnings = caplog.text
    assert "checkpoint-16: no trainer_state.json" in warnings
    assert "checkpoint-12" in warnings and "model.safetensors is not a complete safetensors file" in warnings
    assert "truncated" in warnings
    assert "checkpoint-20: optimizer.pt is truncated or corrupt" in warnings

    for name, message in (("checkpoint-12", "truncated"), ("checkpoint-16", "no trainer_state.json"),
                          ("checkpoint-20", "optimizer.pt is truncated or corrupt")):
        explicit = SimpleNamespace(resume_from_checkpoint=str(folder / name), output_dir=str(folder))
        with pytest.raises(ConfigurationError, match=f"{name} cannot be resumed from: .*{message}"):
            resolve_checkpoint(explicit)


@pytest.mark.parametrize(("damage", "message"), [
    ("rm scheduler.pt", r"no scheduler.pt \(the learning-rate schedule's state\): resuming would start it afresh"),
    ("rm rng_state.pth", r"no rng_state.pth \(the random generators' state\)"),
    ("rm optimizer.pt", r"no optimizer.pt \(the optimizer's state\)"),
    ("garble config.json", r"config.json is not valid JSON"),
    ("rm config.json", r"no config.json"),
    ("list config.json", r"config.json holds no JSON object"),
    ("list trainer_state.json", r"trainer_state.json holds no JSON object"),
])
def test_a_checkpoint_missing_a_state_or_with_a_damaged_config_is_skipped_or_refused(earlier_run, tmp_path, caplog,
                                                                                       damage, message):
    # Without scheduler.pt the Trainer loads no optimizer state either and restarts the warmup, without rng_state.pth
    # it resumes with other random numbers: silently, so such a checkpoint is as unusable as a truncated one.
    folder = tmp_path / "run"
    subprocess.run(["cp", "-r", str(earlier_run), str(folder)], check=True)
    action, name = damage.split()
    damaged = folder / "checkpoint-8" / name
    {"rm": damaged.unlink, "garble": lambda: damaged.write_text("garbage{"),
     "list": lambda: damaged.write_text("[]")}[action]()
    assert resolve_checkpoint(SimpleNamespace(resume_from_checkpoint="last", output_dir=str(folder))) == str(
        folder / "checkpoint-4"
    )
    assert re.search(f"Skipping the incomplete checkpoint .*checkpoint-8: {message}", caplog.text)
    explicit = SimpleNamespace(resume_from_checkpoint=str(folder / "checkpoint-8"), output_dir=str(folder))
    with pytest.raises(ConfigurationError, match=f"checkpoint-8 cannot be resumed from: {message}"):
        resolve_checkpoint(explicit)


def test_a_process_resuming_without_its_random_state_is_warned_of(earlier_run, tmp_path, caplog):
    checkpoint = tmp_path / "checkpoint-8"  # as 3 processes save it: rng_state_0.pth, rng_state_1.pth, ...
    subprocess.run(["cp", "-r", str(earlier_run / "checkpoint-8"), str(checkpoint)], check=True)
    single = checkpoint / "rng_state.pth"
    for rank in range(3):
        (checkpoint / f"rng_state_{rank}.pth").write_bytes(single.read_bytes())
    single.unlink()
    assert checkpoint_problem(checkpoint) is None
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        warn_of_missing_random_state(str(checkpoint), SimpleNamespace(world_size=3, process_index=1))
        assert caplog.text == ""
        warn_of_missing_random_state(str(checkpoint), SimpleNamespace(world_size=1, process_index=0))
        assert "checkpoint-8 holds no rng_state.pth (this run has 1 process(es): it was saved by another number, " \
               "or the file is lost): process 0 resumes without its random generators' states" in caplog.text
        caplog.clear()
        (checkpoint / "rng_state_1.pth").unlink()  # the Trainer would only log this at info level
        warn_of_missing_random_state(str(checkpoint), SimpleNamespace(world_size=3, process_index=1))
        assert "holds no rng_state_1.pth (this run has 3 process(es)" in caplog.text


def test_a_run_stopped_before_its_first_checkpoint_can_be_started_again(earlier_run, tmp_path):
    # what a run killed before its first save leaves: its lock file (the first thing it writes), tokenizer and logs
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((earlier_run / name).read_bytes())
    (folder / "runs").mkdir()
    (folder / RUN_LOCK_NAME).write_text("12345\n")
    with pytest.raises(ConfigurationError, match=r"already holds an earlier run with no checkpoint to continue from "
                                                 r"\(runs, tokenizer.json, tokenizer_config.json\); .*"
                                                 r"--overwrite_output_dir"):
        run(folder, "--max_steps", "2")
    with pytest.raises(ConfigurationError, match=r"no complete checkpoint-\* folder in .*; start the run again with "
                                                 r"--overwrite_output_dir"):
        run(folder, "--max_steps", "2", "--resume_from_checkpoint", "last")
    run(folder, "--max_steps", "2", "--save_steps", "2", "--overwrite_output_dir", "true")
    assert (folder / "checkpoint-2" / "trainer_state.json").is_file() and not (folder / "runs").exists()


def test_a_users_tokenizer_folder_is_no_run_to_replace(earlier_run, tmp_path):
    folder = tmp_path / "tokenizer"  # as train_tokenizer.py writes it: no run wrote here, nothing may be deleted
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((earlier_run / name).read_bytes())
    with pytest.raises(ConfigurationError, match=r"--overwrite_output_dir replaces a training run, but --output_dir "
                                                 r".*tokenizer holds none"):
        run(folder, "--max_steps", "2", "--overwrite_output_dir", "true", "--tokenizer_name_or_path", str(folder))
    with pytest.raises(ConfigurationError, match=r"tokenizer holds other files \(tokenizer.json, "
                                                 r"tokenizer_config.json\); choose a new or empty folder$"):
        run(folder, "--max_steps", "2", "--tokenizer_name_or_path", str(folder))
    with pytest.raises(ConfigurationError, match=r"no complete checkpoint-\* folder in .*tokenizer$"):  # no way out
        run(folder, "--max_steps", "2", "--resume_from_checkpoint", "last")                       # that fails
    assert sorted(path.name for path in folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]


def test_no_complete_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "checkpoint-5").mkdir()
    with pytest.raises(ConfigurationError, match=r"no complete checkpoint-\* folder in .* \(incomplete: checkpoint-5\)"):
        resolve_checkpoint(SimpleNamespace(resume_from_checkpoint="last", output_dir=str(tmp_path)))


@pytest.mark.parametrize("value", ["0", "-2"])
def test_max_steps_must_be_positive(tmp_path, value):
    with pytest.raises(ConfigurationError, match=f"--max_steps must be a positive number of optimizer steps.*got {value}"):
        arguments(tmp_path / "run", "--max_steps", value)


@pytest.mark.parametrize("flag, value, bound", [
    ("--save_steps", "-5", ">"), ("--eval_steps", "-3", ">="), ("--logging_steps", "-1", ">"),
    ("--logging_steps", "0", ">"), ("--save_steps", "0", ">"), ("--save_steps", "nan", ">"),
    ("--logging_steps", "inf", ">"), ("--eval_steps", "nan", ">="),
])
def test_negative_zero_or_infinite_intervals_are_refused(tmp_path, flag, value, bound):
    # transformers took --logging_steps -1 and --save_steps nan silently, failed on --logging_steps inf with a
    # traceback and refused --save_steps -5 with a message about mixing ratios
    with pytest.raises(ConfigurationError, match=rf"{flag} must be a finite number {bound} 0 \(steps, or below 1 a "
                                                 rf"fraction of the training steps.*\), got {value}\.$"):
        arguments(tmp_path / "run", flag, value)


# ---- kill -9 in the middle of a save interval --------------------------------------------------------------------

# Evaluating and saving every 4 steps; killed after checkpoint-8, the resumed launch evaluates and saves 4 more times.
KILL_RUN = [*QUICK, "--max_train_samples", "64", "--max_tokens", "128", "--max_eval_samples", "4",
            "--max_test_samples", "4", "--max_steps", "24", "--save_steps", "4", "--eval_steps", "4",
            "--save_total_limit", "10", "--seed", "3", "--report_to", "none"]
# generate() on AMD CPUs (and only there) probed once per process, at its first evaluation, whether oneDNN's packed
# weights work, with draws from the global generator: a resumed run then went another way than an uninterrupted one
# at its first evaluation. Every run here takes that path, on any CPU.
AMD_TRAIN_SCRIPT = Path(__file__).resolve().parent / "train_as_on_amd.py"
TWO_PROCESSES = ["-m", "accelerate.commands.launch", "--num_machines", "1", "--multi_gpu", "--num_processes", "2",
                 "--mixed_precision", "no", "--dynamo_backend", "no"]


def start_training(output_dir: Path, *extra: str, launcher=()) -> subprocess.Popen:
    """scripts/train.py, through `launcher` if given."""
    if launcher:
        launcher = [*launcher, "--main_process_port", str(free_port())]
    threads = [] if launcher else ["--cpu_threads", "1"]  # a launcher's processes take one each (OMP_NUM_THREADS)
    return subprocess.Popen(
        [sys.executable, *launcher, str(AMD_TRAIN_SCRIPT), *KILL_RUN, *threads, "--output_dir", str(output_dir),
         *extra], cwd=REPO_ROOT, env={**os.environ, **SCRIPT_ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def finished(process: subprocess.Popen) -> str:
    """The output of a training process that succeeded."""
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    return stdout


def kill_after(process: subprocess.Popen, checkpoint: Path) -> None:
    """SIGKILL to the whole run as soon as `checkpoint` is complete (its trainer_state.json is written last)."""
    deadline = time.monotonic() + 600
    while not (checkpoint / "trainer_state.json").is_file():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    launcher = psutil.Process(process.pid)
    for member in [*launcher.children(recursive=True), launcher]:  # torch's launcher starts sessions of its own
        member.send_signal(signal.SIGKILL)
    process.communicate()


def assert_same_weights(resumed: Path, expected: Path) -> None:
    expected_weights, resumed_weights = load_file(expected / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert set(resumed_weights) == set(expected_weights)
    for name in expected_weights:
        assert torch.equal(resumed_weights[name], expected_weights[name]), f"{resumed}: {name}"


@pytest.mark.parametrize("variant", [
    pytest.param([], id="one-process"),
    # slow (the default run keeps the one-process kill and the two-process stop signal): CI runs them with -m slow
    pytest.param(["--gradient_accumulation_steps", "2"], id="gradient-accumulation", marks=pytest.mark.slow),
    pytest.param("two-processes", id="two-processes", marks=pytest.mark.slow),
])
def test_a_run_killed_after_a_checkpoint_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, variant,
                                                                                         straight_runs):
    launcher, extra = (TWO_PROCESSES, []) if variant == "two-processes" else ((), variant)
    straight, killed = straight_runs(*extra, launcher=launcher), tmp_path / "killed"

    kill_after(start_training(killed, *extra, launcher=launcher), killed / "checkpoint-8")
    assert not (killed / "model.safetensors").exists(), "the run finished before it was killed"
    resumed_from = max(checkpoint_step(path.parent) for path in killed.glob("checkpoint-*/trainer_state.json"))
    assert resumed_from <= 16, "killed too late for two more evaluations"

    output = finished(start_training(killed, *extra, "--resume_from_checkpoint", "last", launcher=launcher))
    assert f"Resuming from {killed / f'checkpoint-{resumed_from}'} at step {resumed_from}\n" in output
    # It trained on from there (logging every step), not again from step 0 with the same seed
    assert len(re.findall(r"^\{'loss': ", output, flags=re.M)) == 24 - resumed_from, output
    assert len(re.findall(r"^\{'eval_loss': ", output, flags=re.M)) == (24 - resumed_from) // 4, output
    for step in range(resumed_from + 4, 25, 4):
        assert_same_weights(killed / f"checkpoint-{step}", straight / f"checkpoint-{step}")
    assert_same_weights(killed, straight)


@pytest.mark.slow  # the default run's kill and stop tests compare runs that both evaluate
def test_evaluation_leaves_the_training_unchanged(tmp_path):
    """Evaluating draws from no generator training uses: a run evaluating every 4 steps ends with the weights of one
    that does not evaluate."""
    evaluated, not_evaluated = tmp_path / "evaluated", tmp_path / "not-evaluated"
    finished(start_training(evaluated, "--max_steps", "12"))
    finished(start_training(not_evaluated, "--max_steps", "12", "--eval_strategy", "no"))
    for step in (4, 8, 12):  # the checkpoints: the run's own model is its best checkpoint where it evaluates
        assert_same_weights(evaluated / f"checkpoint-{step}", not_evaluated / f"checkpoint-{step}")


# ---- stop signals: SIGTERM, SIGUSR1, Ctrl-C ----------------------------------------------------------------------

STOP_LINE = re.compile(r"^train\.py: stopped by (SIG\w+) after optimizer step (\d+) of 24: (\S+) holds the run; "
                       r"resume with --resume_from_checkpoint last$", flags=re.M)


def signal_after(process: subprocess.Popen, checkpoint: Path, number: int, *, workers: bool = False) -> None:
    """`number` to the training process (with `workers`, to the processes the launcher started, not to it) once
    `checkpoint` is complete, in the middle of the next save interval."""
    deadline = time.monotonic() + 600
    while not (checkpoint / "trainer_state.json").is_file():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.05)
    launcher = psutil.Process(process.pid)
    for member in launcher.children(recursive=True) if workers else [launcher]:
        if not workers or "train_as_on_amd.py" in " ".join(member.cmdline()):
            member.send_signal(number)


def stopped(process: subprocess.Popen, processes: int = 1) -> tuple[str, int]:
    """The signal that stopped a run and its step, from its one line per process (exit status 75 for one)."""
    stdout, stderr = process.communicate(timeout=600)
    lines = STOP_LINE.findall(stderr)
    assert len(lines) == processes, stderr[-3000:]
    assert len({(name, step) for name, step, _ in lines}) == 1, lines  # every process at the same step
    if processes == 1:
        assert process.returncode == 75, stderr[-3000:]
    name, step, folder = lines[0]
    assert Path(folder).name == f"checkpoint-{step}"
    return name, int(step)


@pytest.fixture(scope="module")
def straight_runs(tmp_path_factory):
    """Uninterrupted runs, by settings, made once."""
    made = {}

    def straight(*extra: str, launcher=()) -> Path:
        key = (tuple(extra), tuple(launcher))
        if key not in made:
            made[key] = tmp_path_factory.mktemp("straight") / "run"
            finished(start_training(made[key], *extra, launcher=launcher))
        return made[key]

    return straight


def checkpoint_names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("checkpoint-*"))


@pytest.mark.parametrize("number", [  # SIGUSR1 and Ctrl-C take SIGTERM's path (StopSignals): slow, for CI's -m slow
    signal.SIGTERM,
    pytest.param(signal.SIGUSR1, marks=pytest.mark.slow),
    pytest.param(signal.SIGINT, marks=pytest.mark.slow),
], ids=lambda number: number.name)
def test_a_stop_signal_saves_its_step_and_the_resumed_run_ends_as_an_uninterrupted_one(tmp_path, straight_runs,
                                                                                      number):
    """Stopped between two saves, the run saves the step it finished, says so in one line, leaves the resume command
    as its card and exits with 75; resumed, it ends with an uninterrupted run's weights and checkpoints (the stop's,
    off the schedule, rotated nothing out and is removed once the resumed run saves)."""
    extra = ["--save_total_limit", "3"]
    straight, run_dir = straight_runs(*extra), tmp_path / "stopped"
    process = start_training(run_dir, *extra)
    signal_after(process, run_dir / "checkpoint-8", number)
    name, step = stopped(process)
    assert name == number.name and 8 <= step < 24
    checkpoint = run_dir / f"checkpoint-{step}"
    assert checkpoint_problem(checkpoint) is None  # model, optimizer, schedule, random states, trainer state
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth", "model.safetensors"} <= {p.name for p in checkpoint.iterdir()}
    clock = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["TrainingClock"]
    assert clock["args"]["seconds_before"] > 0
    assert not (run_dir / "model.safetensors").exists() and not (run_dir / "trainer_state.json").exists()
    assert {"checkpoint-4", "checkpoint-8"} <= set(checkpoint_names(run_dir))  # the stop rotated nothing out
    card = (run_dir / "README.md").read_text()
    assert f"training stopped at step {step} of 24" in card and "--resume_from_checkpoint last" in card

    output = finished(start_training(run_dir, *extra, "--resume_from_checkpoint", "last"))
    assert f"Resuming from {checkpoint} at step {step}\n" in output
    assert len(re.findall(r"^\{'loss': ", output, flags=re.M)) == 24 - step, output
    assert checkpoint_names(run_dir) == checkpoint_names(straight)
    for name in checkpoint_names(straight):
        assert_same_weights(run_dir / name, straight / name)
    assert_same_weights(run_dir, straight)


@pytest.mark.slow  # two processes (the default run trains two in test_train.py, and stops on one signal here)
def test_two_processes_stop_at_the_same_step_and_resume_exactly(tmp_path, straight_runs):
    straight, run_dir = straight_runs(launcher=TWO_PROCESSES), tmp_path / "stopped"
    process = start_training(run_dir, launcher=TWO_PROCESSES)
    signal_after(process, run_dir / "checkpoint-8", signal.SIGTERM, workers=True)  # as SLURM signals each task
    _, step = stopped(process, processes=2)
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {path.name for path in (run_dir / f"checkpoint-{step}").iterdir()}
    finished(start_training(run_dir, "--resume_from_checkpoint", "last", launcher=TWO_PROCESSES))
    for name in checkpoint_names(straight):
        assert_same_weights(run_dir / name, straight / name)
    assert_same_weights(run_dir, straight)


@pytest.mark.slow
def test_a_stop_between_the_saves_of_save_strategy_best_saves_its_step_all_the_same(tmp_path):
    """--save_strategy best saves only a new best: the stop's step, which the Trainer did not save, is saved then."""
    run_dir = tmp_path / "stopped"
    process = start_training(run_dir, "--save_strategy", "best")
    signal_after(process, run_dir / "checkpoint-4", signal.SIGTERM)  # the first evaluation's save, a best
    _, step = stopped(process)
    assert checkpoint_problem(run_dir / f"checkpoint-{step}") is None


class Writes:
    """A standard error that keeps each write apart: the processes of a run share one, and a line written in two
    pieces can have another process's line between them."""

    def __init__(self):
        self.writes = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("raised, status", [
    (TrainingStopped("stopped by SIGTERM after optimizer step 11 of 24: out/checkpoint-11 holds the run; resume with "
                     "--resume_from_checkpoint last"), 75),
    (ConfigurationError("--max_steps must be positive,\ngot 0"), 2),
    (NonFiniteLossError("the loss is nan at step 3"), 1),
    (KeyboardInterrupt(), 130),
])
def test_each_line_train_py_prints_is_one_write_so_processes_lines_never_run_together(monkeypatch, raised, status):
    script = load_script("train")
    from modeling.training import entry

    def training_that_raises(*args, **kwargs):
        raise raised

    monkeypatch.setattr(entry, "train", training_that_raises)
    monkeypatch.setattr(sys, "stderr", Writes())
    with pytest.raises(SystemExit) as exit_:
        script.main(["--output_dir", "unused"])
    assert exit_.value.code == status
    assert len(sys.stderr.writes) == 1, sys.stderr.writes
    [line] = sys.stderr.writes
    assert line.startswith("train.py: ") and line.endswith("\n") and line.count("\n") == 1, line


@pytest.mark.slow  # Ctrl-C's variants (the default run stops with SIGTERM)
def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    process = start_training(tmp_path / "run")
    signal_after(process, tmp_path / "run" / "checkpoint-4", signal.SIGINT)
    time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == ("train.py: aborted by a second Ctrl-C; resume from the newest complete "
                                               "checkpoint with --resume_from_checkpoint last")


@pytest.mark.parametrize("names, expected", [
    (["none"], []), (["term", "SIGUSR1"], ["SIGTERM", "SIGUSR1"]), (["SIGINT", "SIGINT"], ["SIGINT"]),
])
def test_stop_signals_are_named_as_the_system_names_them(tmp_path, names, expected):
    assert arguments(tmp_path / "run", "--stop_signals", *names)[2].stop_signals == expected


@pytest.mark.parametrize("name", ["SIGKILL", "SIGSTOP", "SIGNOPE"])
def test_a_signal_no_process_can_catch_is_refused(tmp_path, name):
    with pytest.raises(ConfigurationError, match=rf"^--stop_signals: '{name}' is not a signal a process can catch"):
        arguments(tmp_path / "run", "--stop_signals", name)


# ---- a full disk during a save -----------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["weights", pytest.param("optimizer", marks=pytest.mark.slow)])
def test_a_full_disk_during_a_save_stops_the_run_in_one_line_and_loses_nothing(tmp_path, monkeypatch, capsys, failing,
                                                                               straight_runs):
    """ENOSPC while checkpoint-8's weights or optimizer state are written: the run stops naming the folder and the
    error, checkpoint-8 is removed, checkpoint-4 is as it was, `last` takes it, and the resumed run ends as an
    uninterrupted one."""
    import transformers.modeling_utils

    run_dir = tmp_path / "run"
    real_safetensors, real_torch_save = transformers.modeling_utils.safe_save_file, torch.save

    def full(path):
        if "checkpoint-8" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    def save_weights(tensors, filename, *args, **kwargs):
        if failing == "weights":
            full(filename)
        return real_safetensors(tensors, filename, *args, **kwargs)

    def save_state(obj, path, *args, **kwargs):
        if failing == "optimizer" and str(path).endswith("optimizer.pt"):
            full(path)
        return real_torch_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", save_weights)
    monkeypatch.setattr(torch, "save", save_state)
    monkeypatch.setattr(sys, "argv", ["train.py", *KILL_RUN, "--cpu_threads", "1", "--output_dir", str(run_dir)])
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(str(REPO_ROOT / "scripts" / "train.py"), run_name="__main__")  # as a user runs it
    finally:
        torch.set_num_threads(threads)
    assert stop.value.code == 1
    line = capsys.readouterr().err
    assert re.fullmatch(rf"train\.py: error: saving {re.escape(str(run_dir / 'checkpoint-8'))} failed \(OSError: "
                        r"\[Errno 28\] No space left on device: '.*checkpoint-8.*'\); the run stopped there, its "
                        r"earlier checkpoints as they were: make room, then resume with --resume_from_checkpoint "
                        r"last\n", line), line
    monkeypatch.undo()
    assert checkpoint_names(run_dir) == ["checkpoint-4"] and checkpoint_problem(run_dir / "checkpoint-4") is None
    assert not (run_dir / "model.safetensors").exists()
    finished(start_training(run_dir, "--resume_from_checkpoint", "last"))
    assert_same_weights(run_dir, straight_runs())


# ---- two runs writing into one folder ----------------------------------------------------------------------------


def test_the_run_lock_refuses_a_second_holder_and_a_lock_file_left_behind_blocks_nothing(tmp_path):
    first, second = RunLock(tmp_path / "run"), RunLock(tmp_path / "run")
    first.acquire()
    with pytest.raises(ConfigurationError, match=rf"run is in use: another training process \(pid {os.getpid()}\)"):
        second.acquire()
    first.release()
    second.acquire()  # free again
    second._file.close()  # as a killed process leaves it: the lock goes with the process
    second._file = None
    first.acquire()
    first.release()
    assert (tmp_path / "run" / RUN_LOCK_NAME).read_text() == f"{os.getpid()}\n"  # stays: it marks a run's folder


def test_a_run_still_training_into_a_folder_keeps_a_second_run_out_of_it(tmp_path):
    # killing `accelerate launch` alone leaves its training process running; resuming into its folder meanwhile
    # would have two processes write the same checkpoints
    folder = tmp_path / "run"
    process = start_training(folder, "--cpu_threads", "1", "--max_steps", "100000")
    try:
        deadline = time.monotonic() + 600
        while not (folder / "checkpoint-4" / "trainer_state.json").is_file():
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(ConfigurationError, match=rf"run is in use: another training process \(pid "
                                                     rf"{process.pid}\) is writing into it"):
            run(folder, *KILL_RUN[len(SMALL):], "--cpu_threads", "1", "--resume_from_checkpoint", "last")
        assert process.poll() is None  # the refused run left the running one alone
    finally:
        process.kill()
        process.wait()
    assert (folder / RUN_LOCK_NAME).read_text() == f"{process.pid}\n"  # left by the killed run: it blocks nothing
    step = max(int(path.name.split("-")[1]) for path in folder.glob("checkpoint-*"))
    run(folder, *KILL_RUN[len(SMALL):], "--cpu_threads", "1", "--resume_from_checkpoint", "last",
        "--max_steps", str(step + 2))
    assert json.loads((folder / "trainer_state.json").read_text())["global_step"] == step + 2
    RunLock(folder).acquire()  # released by the run that finished


# ---- a loss that becomes NaN -------------------------------------------------------------------------------------


def test_a_nan_loss_stops_training_naming_the_step_and_saves_no_nan_weights(tmp_path):
    output_dir = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match=r"the training loss is (nan|inf) at optimizer step (\d+)"):
        # a learning rate a million times too large blows the weights up within a few steps
        run(output_dir, "--max_steps", "60", "--save_steps", "2", "--learning_rate", "1e7", "--warmup_steps", "1")
    assert not (output_dir / "model.safetensors").exists()
    checkpoints = list(output_dir.glob("checkpoint-*"))
    for checkpoint in checkpoints:
        for name, tensor in load_file(checkpoint / "model.safetensors").items():
            assert torch.isfinite(tensor).all(), f"{checkpoint.name}: {name}"


# ---- what a run leaves behind --------------------------------------------------------------------------------------


def test_the_saved_generation_config_has_no_max_length_to_clash_with_max_new_tokens(tmp_path, caplog):
    """Evaluating during training (Seq2SeqTrainer fills in generation defaults) leaves the saved config as set."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    output_dir = tmp_path / "run"
    run(output_dir, "--max_steps", "4", "--eval_strategy", "steps", "--eval_steps", "2", "--save_steps", "2")
    for folder in (output_dir, output_dir / "checkpoint-4"):
        saved = json.loads((folder / "generation_config.json").read_text())
        assert "max_length" not in saved and saved["max_new_tokens"] == 32, folder  # copy_tiny's --max_length
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    with caplog.at_level("WARNING"):
        model.generate(**tokenizer(["1 2 3"], return_tensors="pt"), max_new_tokens=3)
    assert "max_length" not in caplog.text


def test_progress_bars_are_off_when_output_is_not_a_terminal(tmp_path):
    # under pytest stderr is captured, not a terminal (QUICK's --disable_tqdm is left out here)
    _, _, training_args, _ = parse_arguments(["--output_dir", str(tmp_path / "run")], copy_task_config=DEFAULT_CONFIG)
    assert training_args.disable_tqdm is True
