"""scripts/train.py on Seq2SeqTrainer: 2-process CPU DDP through `accelerate launch`, the saved folder (loadable with
the Auto classes in a fresh process, model card, Hub upload contents), resume, token-budget batches, the Noam
schedule in the Trainer, configuration files, and bad arguments failing before training.

Runs are tiny (a few optimizer steps on the embedded copy task); the full main job is the `slow` test at the end.
"""

import hashlib
import json
import logging
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from hub_helpers import FakeHub
from huggingface_hub import ModelCard
from launch_helpers import (
    QUICK,
    REPO_ROOT,
    SCRIPT_ENV,
    TRAIN_SCRIPT,
    accelerate_launch,
    load_script,
    score_in_a_fresh_process,
)
from safetensors.torch import load_file

from modeling.data.corpus import synthetic_task_dataset
from modeling.inference.hub import HubUploadError, hub_upload_files, push_folder_to_hub
from modeling.inference.model_card import card_data, hub_dataset_id, record_evaluation
from modeling.tokenization import train_tokenizer
from modeling.training.argument_checks import validate_arguments
from modeling.training.argument_parsing import parse_arguments
from modeling.training.arguments import ConfigurationError, mixed_precision
from modeling.training.checkpoints import average_checkpoints, last_checkpoints
from modeling.training.run import cpu_threads_per_process, setup_training, train
from modeling.training.run_lock import RunLock
from modeling.training.schedule import noam_learning_rate

DEFAULT_CONFIG = REPO_ROOT / "configs" / "copy_tiny.yaml"


def quick_args(output_dir: Path, *extra: str):
    return parse_arguments([*QUICK, "--output_dir", str(output_dir), *extra], copy_task_config=DEFAULT_CONFIG)


def run_in_process(output_dir: Path, *extra: str) -> dict:
    model_args, data_args, training_args, config_path = quick_args(output_dir, *extra)
    return train(model_args, data_args, training_args, config_path=config_path)


def log_by_step(output_dir: Path, key: str) -> dict[int, float]:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry}


# ---- 2 processes: accelerate launch --multi_gpu --num_processes 2 on CPU (gloo) --------------------------------------

EVAL_SIZE, TEST_SIZE = 7, 5  # not multiples of 2 processes x 2 per batch: the last batches are padded with duplicates


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("ddp") / "model"
    result = accelerate_launch(
        ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"],
        [*QUICK, "--output_dir", str(output_dir), "--max_steps", "150", "--eval_steps", "75", "--save_steps", "75", "--warmup_steps", "60",
         "--max_eval_samples", str(EVAL_SIZE), "--max_test_samples", str(TEST_SIZE), "--per_device_eval_batch_size",
         "2", "--generation_num_beams", "2", "--report_to", "tensorboard"],
        env={"OMP_NUM_THREADS": "1"},
    )
    return output_dir, result


def test_two_process_run_trains_evaluates_and_saves(ddp_run):
    output_dir, result = ddp_run
    assert re.search(r"2 processes on the CPU \(DDP, fp32, \d+ threads? each\)", result.stdout)  # DDP, gloo
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 150
    results = json.loads((output_dir / "all_results.json").read_text())
    # Gathering padded the 7 and 5 sentences to 8 and 6 predictions; the scores cover exactly the sets.
    assert results["eval_sentences"] == EVAL_SIZE and results["test_sentences"] == TEST_SIZE
    # The pairs of the token-budget batches both processes trained on (--per_device_train_batch_size counted 8 each)
    pairs = results["train_samples_per_second"] * results["train_runtime"]
    assert pairs == pytest.approx(state["epoch"] * 200, rel=0.1)  # QUICK: 200 training pairs
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "modeling_annotated_transformer.py",
                 "configuration_annotated_transformer.py", "README.md"):
        assert (output_dir / name).is_file(), name
    assert list(output_dir.glob("runs/*/events.out.tfevents.*")), "no TensorBoard log"
    best = Path(state["best_model_checkpoint"]).name
    saved = load_file(output_dir / "model.safetensors")
    best_weights = load_file(output_dir / best / "model.safetensors")
    assert all(torch.equal(saved[name], best_weights[name]) for name in saved), "the saved model is not the best"


def test_uploaded_contents_load_with_auto_classes_in_a_fresh_process_and_reproduce_the_scores(ddp_run, tmp_path):
    output_dir, _ = ddp_run
    files = hub_upload_files(output_dir)
    assert not any(name.startswith("checkpoint-") for name in files)
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md",
            "modeling_annotated_transformer.py"} <= set(files)
    upload = tmp_path / "as_uploaded"  # exactly what --push_to_hub would send
    for name in files:
        (upload / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(output_dir / name, upload / name)

    validation = synthetic_task_dataset()["validation"].select(range(EVAL_SIZE))
    fresh = score_in_a_fresh_process(upload, validation["source"], validation["target"], cwd=tmp_path)
    assert fresh["class"].startswith("transformers_modules.") and fresh["class"].endswith(
        "AnnotatedTransformerForConditionalGeneration"
    )
    # The 2-process evaluation scored exactly the 7 validation sentences, as this single-process run does.
    reported = json.loads((output_dir / "eval_results.json").read_text())
    assert fresh["bleu"] > 0 and fresh["bleu"] == pytest.approx(reported["eval_bleu"], abs=1e-3)  # trained enough
    assert fresh["exact_match"] == pytest.approx(reported["eval_exact_match"], abs=1e-3)


@pytest.mark.slow  # two processes
def test_a_refusal_by_the_first_of_two_processes_stops_both_with_its_one_line(ddp_run, tmp_path):
    """The first process checks the data and takes the run's lock before the others read the tokenizer it saved; its
    refusal (here: another process holds the lock) stops the other too, which used to go on alone with the earlier
    run's tokenizer in the folder and fail with a traceback once training began."""
    output_dir, _ = ddp_run
    folder = tmp_path / "run"
    shutil.copytree(output_dir, folder)
    lock = RunLock(folder)
    lock.acquire()  # as a run that still trains into the folder
    try:
        result = accelerate_launch(
            ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"],
            [*QUICK, "--output_dir", str(folder), "--max_steps", "2", "--overwrite_output_dir", "true"],
            env={"OMP_NUM_THREADS": "1"}, check=False,
        )
    finally:
        lock.release()
    refusals = [line for line in result.stderr.splitlines() if "train.py: error:" in line]
    assert len(refusals) == 1 and f"--output_dir {folder} is in use" in refusals[0], result.stderr
    assert result.returncode != 0 and re.search(r"rank +: 0 \(local_rank: 0\)\n +exitcode +: 2 ", result.stderr)
    assert "[rank1]" not in result.stderr and "no tokenizer" not in result.stderr  # process 1 ended quietly
    assert (folder / "model.safetensors").read_bytes() == (output_dir / "model.safetensors").read_bytes()


def test_model_card_is_filled(ddp_run):
    output_dir, _ = ddp_run
    text = (output_dir / "README.md").read_text()
    assert "{{" not in text and "{%" not in text
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.library_name == "transformers" and "translation" in card.data.tags
    assert card.data.datasets is None  # the embedded copy task is no Hub dataset (it is named in model-index)
    assert {r.dataset_type for r in card.data.eval_results} == {"synthetic-copy"}
    results = json.loads((output_dir / "all_results.json").read_text())
    bleu = card.data.eval_results[0]
    assert (bleu.metric_type, bleu.dataset_split) == ("bleu", "validation")
    assert bleu.metric_value == pytest.approx(results["eval_bleu"])
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in text  # the sacreBLEU signature
    assert "accelerate launch --multi_gpu --num_processes 2 scripts/train.py" in text
    assert "| d_model | 64 |" in text and "Noam (§5.3)" in text
    in_corpus = len(synthetic_task_dataset()["validation"])  # --max_eval_samples selected 7 of them
    assert f"| validation | 7 | {in_corpus} | {in_corpus - 7} | 0 | 0 |" in text
    minutes = results["train_runtime"] / 60
    assert f"| training time | {minutes:,.1f} min ({results['train_runtime']:,.0f} s) |" in text
    assert re.search(r"\| hardware \| .+: 2 processes on the CPU \(DDP, fp32, 1 thread each\) \|", text)


@pytest.mark.parametrize("extra, optimizer, schedule, dropout", [
    (["--optim", "sgd", "--weight_decay", "0.1", "--lr_scheduler_type", "constant", "--learning_rate", "0.01",
      "--attention_dropout", "0.1", "--activation_dropout", "0.2"],
     "sgd, weight decay 0.1", "constant, 0.01",  # not the paper's Adam; a constant rate has no warm-up
     "0.1 (§5.4); 0.1 on attention weights; 0.2 inside the feed-forward network"),
    (["--warmup_steps", "0.5", "--dropout", "0.3"],
     "Adam (adamw_torch_fused), beta1 0.9, beta2 0.98, epsilon 1e-09, weight decay 0.0",
     "Noam (§5.3): 1.0 * d_model^-0.5 * min(step^-0.5, step * 2^-1.5)", "0.3 (§5.4)"),  # half of 4 steps
])
def test_the_model_card_names_the_optimizer_schedule_and_dropout_that_ran(tmp_path, extra, optimizer, schedule,
                                                                            dropout):
    run_in_process(tmp_path / "out", "--eval_strategy", "no", "--max_steps", "4", *extra)
    text = (tmp_path / "out" / "README.md").read_text()
    assert f"| optimizer | {optimizer} |" in text
    assert f"| learning-rate schedule | {schedule} |" in text
    assert f"| dropout | {dropout} |" in text


def test_the_cards_hub_datasets_entry_is_only_a_hub_dataset_id(tmp_path, monkeypatch):
    """The Hub links `datasets:` entries; a local dataset folder keeps its name in model-index only."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local_ds").mkdir()
    assert [hub_dataset_id(name) for name in ("wmt14", "bentrevett/multi30k", "local_ds", str(tmp_path), None)] == [
        "wmt14", "bentrevett/multi30k", None, None, None]
    row = {"split": "test", "bleu": 30.0, "chrf": 55.0}
    card = card_data("m", [row], dataset_id="wmt14", hub_dataset=hub_dataset_id("wmt14"))
    assert card.datasets == ["wmt14"] and {r.dataset_type for r in card.eval_results} == {"wmt14"}
    local = card_data("m", [row], dataset_id="local_ds", hub_dataset=hub_dataset_id("local_ds"))
    assert local.datasets is None and {r.dataset_type for r in local.eval_results} == {"local_ds"}


def test_the_cards_command_keeps_accelerates_mixed_precision(monkeypatch):
    """`accelerate launch --mixed_precision bf16` reaches the script as ACCELERATE_MIXED_PRECISION only: the card's
    command left it out, and ran in fp32."""
    from modeling.training.run import launch_command

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert launch_command(["--max_steps", "2"], 1, "NO") == "accelerate launch scripts/train.py --max_steps 2"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert launch_command(["--max_steps", "2"], 2, "MULTI_GPU") == (
        "accelerate launch --multi_gpu --num_processes 2 --mixed_precision bf16 scripts/train.py --max_steps 2")


def test_model_card_template_fields_must_all_be_given():
    from modeling.inference.model_card import render_model_card

    with pytest.raises(ValueError, match="needs a value the context lacks: 'model_name' is undefined"):
        render_model_card({"card_data": ""})


@pytest.mark.parametrize(("argv", "copy_task_defaults"), [
    ([], True),
    (["--max_steps", "300"], True),
    (["--dataset_name", "reverse"], True),
    (["--data_dir", "corpus", "--source_lang", "de", "--target_lang", "en"], False),
    (["--data_dir=corpus"], False),
    (["--data-dir", "corpus"], False),  # the parser's other spelling
    (["--dataset-name", "wmt14"], False),
    (["--dataset_name", "wmt14", "--dataset_config", "de-en"], False),
    (["--config", "configs/multi30k_de_en_cpu.yaml", "--data_dir", "corpus"], False),
])
def test_the_copy_tasks_config_gives_the_defaults_of_copy_task_runs_only(monkeypatch, argv, copy_task_defaults):
    """A run on a corpus without --config took the copy task's 270-entry vocabulary, 32-token max_length and tiny
    preset: a real corpus lost its longer pairs to the length filter."""
    from modeling.training import entry

    seen = {}
    monkeypatch.setattr(entry, "train", lambda *args, **kwargs: seen.update(args=args, **kwargs))
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    monkeypatch.chdir(REPO_ROOT)
    runpy.run_path(str(TRAIN_SCRIPT), run_name="__main__")
    model_args, data_args, training_args = seen["args"]
    config_path = seen["config_path"]
    if copy_task_defaults:
        assert config_path == DEFAULT_CONFIG and data_args.max_length == 32 and data_args.vocab_size == 270
    elif "--config" in argv:
        assert config_path == Path(argv[1]) and data_args.max_length != 32
    else:
        assert config_path is None
        assert (data_args.max_length, data_args.vocab_size) == (128, 8000)  # the flags' own defaults
        assert training_args.output_dir.endswith("transformer")


def test_a_local_folder_named_like_a_synthetic_task_is_a_corpus_and_a_flag_without_value_is_the_parsers(
    tmp_path, monkeypatch, capsys
):
    from modeling.training.arguments import DataArguments

    monkeypatch.chdir(tmp_path)
    assert parse_arguments(["--dataset_name", "copy"], copy_task_config=DEFAULT_CONFIG)[3] == DEFAULT_CONFIG
    (tmp_path / "copy").mkdir()  # loaded as a corpus: not the copy task, nor its defaults
    assert parse_arguments(["--dataset_name", "copy"], copy_task_config=DEFAULT_CONFIG)[3] is None
    assert DataArguments(dataset_name="copy").synthetic_task is None
    assert DataArguments(dataset_name="reverse").synthetic_task == "reverse"
    monkeypatch.setattr(sys, "argv", ["train.py", "--data_dir"])
    with pytest.raises(SystemExit) as exit:
        runpy.run_path(str(TRAIN_SCRIPT), run_name="__main__")
    assert exit.value.code == 2
    # the full parser's one line (a helper parser had printed its own usage first)
    assert capsys.readouterr().err == "train.py: error: argument --data_dir/--data-dir: expected one argument\n"


def folder_digests(folder: Path) -> dict[Path, str]:
    return {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.rglob("*")) if path.is_file()}


def push_script(monkeypatch, *argv: str) -> int:
    """scripts/push_to_hub.py run in this process: its exit status."""
    monkeypatch.setattr(sys, "argv", ["push_to_hub.py", *argv])
    try:
        runpy.run_path(str(REPO_ROOT / "scripts" / "push_to_hub.py"), run_name="__main__")
    except SystemExit as exit:
        return exit.code
    return 0


def test_push_without_network_fails_clearly_and_leaves_the_folder_intact(ddp_run, monkeypatch, capsys):
    import huggingface_hub.constants

    output_dir, _ = ddp_run
    before = folder_digests(output_dir)
    with pytest.raises(HubUploadError, match=r"Could not push .* as 'someone/transformer-copy'[\s\S]*saved locally"):
        push_folder_to_hub(
            output_dir, "someone/transformer-copy", token="hf_not_a_token", endpoint="http://127.0.0.1:9"
        )
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert push_script(monkeypatch, str(output_dir), "someone/transformer-copy", "--token", "hf_not_a_token") == 1
    error = capsys.readouterr().err
    assert error.startswith("push_to_hub.py: error: Could not push") and "saved locally" in error
    assert folder_digests(output_dir) == before


def test_push_script_uploads_the_model_in_one_commit_whose_card_loads_the_repo_id(ddp_run, monkeypatch, capsys):
    import huggingface_hub.constants

    output_dir, _ = ddp_run
    before = folder_digests(output_dir)
    with FakeHub() as hub:  # the real huggingface_hub client, a Hub on localhost
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.endpoint)
        status = push_script(monkeypatch, str(output_dir), "someone/transformer-copy", "--token", "hf_not_a_token",
                             "--revision", "v1", "--commit_message", "first model")
    assert status == 0
    assert capsys.readouterr().out.startswith(f"Pushed {len(hub_upload_files(output_dir))} files of {output_dir} to ")
    assert [repo["repo_id"] for repo in hub.repos] == ["someone/transformer-copy"]
    assert hub.branches == [("someone/transformer-copy", "v1")]
    (commit,) = hub.commits
    assert (commit["repo_id"], commit["revision"]) == ("someone/transformer-copy", "v1")
    assert commit["summary"] == "first model"
    sent = commit["files"]
    assert sorted(sent) == hub_upload_files(output_dir)
    assert not [name for name in sent if name.startswith("checkpoint-") or name.endswith((".pt", ".pth", ".bin"))]
    checkpoint = sorted(output_dir.glob("checkpoint-*"))[-1]
    assert (checkpoint / "optimizer.pt").is_file() and "optimizer.pt" not in hub_upload_files(checkpoint)
    assert all(content == (output_dir / name).read_bytes() for name, content in sent.items() if name != "README.md")

    card, local = ModelCard(sent["README.md"].decode()), ModelCard.load(output_dir / "README.md")
    assert card.text.lstrip().startswith("# someone/transformer-copy\n")
    usage = card_section(card.text, "## How to use")
    assert 'from_pretrained("someone/transformer-copy", trust_remote_code=True)' in usage
    assert str(output_dir) not in usage
    for heading in ("## Architecture", "## Training", "## Results", "## Command"):
        assert card_section(card.text, heading) == card_section(local.text, heading)
    assert card.data.eval_results == local.data.eval_results
    assert folder_digests(output_dir) == before  # the local folder, its card included, is not changed


def test_push_script_dry_run_lists_the_files_and_bad_folders_are_refused_before_any_network(
    ddp_run, tmp_path, monkeypatch, capsys
):
    output_dir, _ = ddp_run
    assert push_script(monkeypatch, str(output_dir), "someone/transformer-copy", "--dry_run") == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith(f"Would upload {len(hub_upload_files(output_dir))} files of {output_dir}")
    assert [line.strip() for line in listed[1:]] == hub_upload_files(output_dir)

    corrupt = tmp_path / "corrupt"
    shutil.copytree(output_dir, corrupt, ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    bad_card = tmp_path / "bad_card"
    shutil.copytree(output_dir, bad_card, ignore=shutil.ignore_patterns("checkpoint-*"))
    (bad_card / "README.md").write_text("---\nlicense: [apache-2.0\n---\n# a card\n")
    cases = [
        ((str(corrupt), "someone/copy"), r"model\.safetensors is not a complete safetensors file: .* truncated"),
        ((str(bad_card), "someone/copy", "--dry_run"), r"README\.md: its metadata .* is not valid YAML"),
        ((str(tmp_path / "missing"), "someone/copy"), "is not a folder"),
        ((str(tmp_path), "someone/copy"), "holds no config.json"),
        ((str(output_dir), "someone/not a name"), "is not a Hub repo id"),
    ]
    for argv, message in cases:
        assert push_script(monkeypatch, *argv) == 2
        error = capsys.readouterr().err
        assert error.startswith("push_to_hub.py: error: ") and len(error.strip().splitlines()) == 1
        assert re.search(message, error), error


# ---- in-process runs: resume, Noam in the Trainer, token-budget batches ----------------------------------------------


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    """The same 12 steps run straight through, and run as 6 steps, then resumed from checkpoint-6 to step 12."""
    straight, interrupted = tmp_path_factory.mktemp("straight"), tmp_path_factory.mktemp("interrupted")
    common = ["--eval_strategy", "no", "--save_steps", "6", "--max_train_samples", "64", "--max_tokens", "128",
              "--max_eval_samples", "4", "--max_test_samples", "4"]
    run_in_process(straight, *common, "--max_steps", "12")
    run_in_process(interrupted, *common, "--max_steps", "6")
    run_in_process(interrupted, *common, "--max_steps", "12", "--resume_from_checkpoint", "last")
    return straight, interrupted


def test_resume_continues_schedule_optimizer_and_data_order(resume_runs):
    straight, resumed = resume_runs
    state = json.loads((resumed / "trainer_state.json").read_text())
    assert state["global_step"] == 12
    epochs = log_by_step(resumed, "epoch")
    assert 1 < epochs[6] < 2, "the interruption should fall inside the second epoch"
    straight_loss, resumed_loss = log_by_step(straight, "loss"), log_by_step(resumed, "loss")
    assert sorted(resumed_loss) == list(range(1, 13))
    # Same batches, same optimizer moments, same learning rates, same dropout: the same losses after the resume.
    for step in range(7, 13):
        assert resumed_loss[step] == pytest.approx(straight_loss[step], rel=1e-4), step
    assert log_by_step(resumed, "learning_rate") == pytest.approx(log_by_step(straight, "learning_rate"))
    final_straight, final_resumed = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in final_straight:
        torch.testing.assert_close(final_resumed[name], final_straight[name], rtol=1e-4, atol=1e-5)


def test_resuming_a_finished_run_is_refused_and_changes_nothing(resume_runs):
    straight, _ = resume_runs
    before = folder_digests(straight)
    common = ["--eval_strategy", "no", "--save_steps", "6", "--max_train_samples", "64", "--max_tokens", "128",
              "--max_eval_samples", "4", "--max_test_samples", "4", "--resume_from_checkpoint", "last"]
    with pytest.raises(ConfigurationError, match=r"checkpoint-12 is at step 12, and --max_steps is 12: that run is "
                                                 r"finished .* raise --max_steps"):
        run_in_process(straight, *common, "--max_steps", "12")
    with pytest.raises(ConfigurationError, match=r"checkpoint-12 is at epoch [\d.]+, and --num_train_epochs is 1"):
        run_in_process(straight, *common, "--max_steps", "-1", "--num_train_epochs", "1")
    with pytest.raises(ConfigurationError, match=r"checkpoint-12 holds another architecture \(d_model 64 there, 32 "
                                                 r"here\): resume with the run's own arguments"):
        run_in_process(straight, *common, "--max_steps", "20", "--d_model", "32")
    assert folder_digests(straight) == before


def test_the_checkpoints_of_an_interrupted_and_resumed_run_average_as_one_run(resume_runs, tmp_path):
    """The checks that refuse checkpoints of different runs (training logs, configs, tokenizers) accept one run's,
    written by two processes: 6 steps, then resumed to 12."""
    _, interrupted = resume_runs
    output = average_checkpoints(last_checkpoints(interrupted, 2), tmp_path / "averaged")
    assert json.loads((output / "averaged_from.json").read_text())["checkpoints"] == [
        str(interrupted / "checkpoint-6"), str(interrupted / "checkpoint-12")]


def test_resuming_an_older_checkpoint_warns_that_the_later_ones_are_replaced(resume_runs, tmp_path, caplog):
    straight, _ = resume_runs
    run = tmp_path / "run"
    shutil.copytree(straight, run)  # a copy: the fixture's run stays as it is for the other tests
    common = ["--eval_strategy", "no", "--save_steps", "6", "--max_train_samples", "64", "--max_tokens", "128",
              "--max_eval_samples", "4", "--max_test_samples", "4"]
    with caplog.at_level(logging.WARNING, logger="modeling.training"):
        run_in_process(run, *common, "--max_steps", "7", "--resume_from_checkpoint", str(run / "checkpoint-6"))
    assert "Resuming from checkpoint-6, older than checkpoint-12 in the same run: those are replaced" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="modeling.training"):  # the newest: nothing to warn of
        run_in_process(run, *common, "--max_steps", "14", "--resume_from_checkpoint", "last")
    assert "older than" not in caplog.text


def test_resuming_from_the_wrong_place_or_into_another_folder_is_refused_and_changes_nothing(resume_runs, tmp_path):
    straight, interrupted = resume_runs
    before = {run: folder_digests(run) for run in resume_runs}
    common = ["--eval_strategy", "no", "--save_steps", "6", "--max_train_samples", "64", "--max_tokens", "128",
              "--max_eval_samples", "4", "--max_test_samples", "4", "--max_steps", "20"]
    # the run folder holds the best model and trainer_state.json, but no optimizer, schedule or RNG state
    with pytest.raises(ConfigurationError, match=r"cannot be resumed from: no optimizer, schedule or RNG state: a "
                                                 r"model folder, not a Trainer checkpoint"):
        run_in_process(straight, *common, "--resume_from_checkpoint", str(straight))
    with pytest.raises(ConfigurationError, match=r"checkpoint-99 cannot be resumed from: no such folder"):
        run_in_process(straight, *common, "--resume_from_checkpoint", str(straight / "checkpoint-99"))
    # a checkpoint of one run continued into a folder holding something else would replace its files
    user_folder = tmp_path / "notes"
    user_folder.mkdir()
    (user_folder / "README.md").write_text("my notes")
    with pytest.raises(ConfigurationError, match=r"already holds other files \(README.md\), and "
                                                 r"--resume_from_checkpoint .*checkpoint-6 is not one of its"):
        run_in_process(user_folder, *common, "--resume_from_checkpoint", str(straight / "checkpoint-6"))
    # another tokenizer than the checkpoint's (this one's ids mean other tokens)
    other = tmp_path / "other-tokenizer"
    train_tokenizer([f"{i} {i + 1} {i + 2}" for i in range(0, 300, 3)] * 3, vocab_size=270).save_pretrained(other)
    with pytest.raises(ConfigurationError, match=r"--tokenizer_name_or_path .*other-tokenizer is not the tokenizer of "
                                                 r"--resume_from_checkpoint .*checkpoint-12 \(other vocabulary"):
        run_in_process(interrupted, *common, "--resume_from_checkpoint", "last",
                       "--tokenizer_name_or_path", str(other))
    assert {run: folder_digests(run) for run in resume_runs} == before
    assert sorted(path.name for path in user_folder.iterdir()) == ["README.md"]


def test_trainer_follows_the_noam_schedule(resume_runs):
    straight, _ = resume_runs
    rates = log_by_step(straight, "learning_rate")
    d_model, warmup = 64, 4  # the tiny preset; --warmup_steps 4
    assert rates == pytest.approx({step: noam_learning_rate(step, d_model, warmup) for step in rates}, rel=1e-6)
    assert max(rates, key=rates.get) == warmup


def card_section(text: str, heading: str) -> str:
    match = re.search(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", text, re.S | re.M)
    assert match, heading
    return match.group(0)


def test_an_average_of_a_runs_checkpoints_has_the_runs_card_without_its_scores(resume_runs, tmp_path):
    straight, _ = resume_runs
    run = tmp_path / "run"
    shutil.copytree(straight, run)  # a copy: the fixture's run stays as it is for the other tests
    signatures = {"bleu": "nrefs:1|case:mixed", "chrf": "nrefs:1|nc:6", "bleu_lowercase": "nrefs:1|case:lc"}
    record_evaluation(run, {"split": "validation", "num_beams": 4, "sentences": 4, "bleu": 12.5, "chrf": 30.0,
                            "bleu_lowercase": 13.0, "exact_match": 0.0, "signatures": signatures}, "evaluate.py run")
    run_card = ModelCard.load(run / "README.md")
    assert run_card.data.eval_results and "## Evaluation: validation, beam 4" in run_card.text
    evaluated = [(r.dataset_type, r.dataset_split, r.metric_type, r.metric_value) for r in run_card.data.eval_results
                 if r.metric_config == "beam 4"]  # the Hub's results table too; two files: no corpus to name
    assert evaluated == [("custom", "validation", "bleu", 12.5), ("custom", "validation", "chrf", 30.0)]
    assert len(run_card.data.eval_results) > 2  # beside the training run's own

    output = average_checkpoints(last_checkpoints(run, 2), tmp_path / "averaged")
    card = ModelCard.load(output / "README.md")
    # the Hub metadata stays, but the run's results (its final model's) are not this model's
    assert card.data.model_name == "averaged" and card.data.eval_results is None
    assert (card.data.language, card.data.license, card.data.tags, card.data.pipeline_tag) == (
        run_card.data.language, run_card.data.license, run_card.data.tags, run_card.data.pipeline_tag)
    assert card.text.lstrip().startswith("# averaged\n")
    for heading in ("## Architecture", "## Training", "## Data", "## Command"):  # hardware, time, command
        assert card_section(card.text, heading) == card_section(run_card.text, heading)
    usage = card_section(card.text, "## How to use")
    assert f'from_pretrained("{output}"' in usage and str(run) not in usage
    results = card_section(card.text, "## Results")
    assert "checkpoint-6, checkpoint-12" in results and "| validation |" not in results
    assert "## Evaluation:" not in card.text

    record_evaluation(output, {"split": "validation", "num_beams": 4, "sentences": 4, "bleu": 14.0, "chrf": 31.0,
                               "bleu_lowercase": 14.5, "exact_match": 0.0, "signatures": signatures},
                      "evaluate.py averaged")  # this model's own score lands in its card
    own = card_section((output / "README.md").read_text(), "## Evaluation: validation, beam 4")
    assert "| 4 | 14.00 | 31.00 |" in own and "evaluate.py averaged" in own
    corpus = {"data_dir": str(tmp_path / "multi30k"), "source_lang": "de", "target_lang": "en"}
    for bleu in (15.0, 16.0):  # a corpus split, twice: the second replaces the first, in the metadata too
        record_evaluation(output, {"split": "test", "test_set": corpus, "num_beams": 4, "sentences": 4, "bleu": bleu,
                                   "chrf": 32.0, "bleu_lowercase": 15.5, "exact_match": 0.0,
                                   "signatures": signatures}, "evaluate.py averaged --data_dir multi30k")
    card = ModelCard.load(output / "README.md")
    assert [(r.dataset_type, r.dataset_split, r.metric_type, r.metric_config, r.metric_value)
            for r in card.data.eval_results] == [
        ("custom", "validation", "bleu", "beam 4", 14.0), ("custom", "validation", "chrf", "beam 4", 31.0),
        ("multi30k", "test", "bleu", "beam 4", 16.0), ("multi30k", "test", "chrf", "beam 4", 32.0)]
    assert card.data.model_name == "averaged" and card.text.count("## Evaluation: test, beam 4") == 1


def test_token_budget_batches_cover_each_pair_once_per_epoch(tmp_path):
    max_tokens = 96
    setup = setup_training(*quick_args(tmp_path, "--max_tokens", str(max_tokens), "--max_train_samples", "150")[:3])
    dataloader = setup.trainer.get_train_dataloader()
    sampler = dataloader.batch_sampler  # with several processes accelerate's BatchSamplerShard wraps ours
    sampler = getattr(sampler, "batch_sampler", sampler)
    orders = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        seen, order = 0, []
        for batch in dataloader:
            assert batch["input_ids"].numel() <= max_tokens and batch["labels"].numel() <= max_tokens
            seen += batch["input_ids"].shape[0]
            order.append(batch["input_ids"].shape)
        assert seen == len(setup.tokenized["train"]) == 150
        orders.append(order)
    assert orders[0] != orders[1], "the batch order should change between epochs"


def test_resumed_epoch_keeps_its_batch_order_under_several_processes():
    """On resume the Trainer wraps accelerate's `BatchSamplerShard` in a `SkipBatchSampler`, which hides the
    sampler's `set_epoch`; the trainer's callback still gives the sampler the resumed epoch."""
    from accelerate.data_loader import BatchSamplerShard, SkipBatchSampler
    from transformers import TrainerState

    from modeling.data.batching import TokenBudgetBatchSampler
    from modeling.training.callbacks import _SetSamplerEpoch

    lengths = [3 + i % 9 for i in range(120)]
    sampler = TokenBudgetBatchSampler(lengths, lengths, 40, num_replicas=2, rank=None, seed=3)
    shard = BatchSamplerShard(sampler, num_processes=2, process_index=1)  # what process 1 iterates
    sampler.set_epoch(1)
    uninterrupted = list(shard)
    sampler.set_epoch(0)  # a restarted process
    resumed = SkipBatchSampler(shard, skip_batches=2)  # what `skip_first_batches` builds for the resumed epoch
    _SetSamplerEpoch(sampler).on_epoch_begin(None, TrainerState(epoch=1.4), None)
    assert list(resumed) == uninterrupted[2:]


def test_bf16_on_the_cpu_autocasts_the_steps_and_keeps_fp32_weights(tmp_path):
    common = ["--max_steps", "2", "--eval_strategy", "no", "--max_eval_samples", "4", "--max_test_samples", "4"]
    run_in_process(tmp_path / "fp32", *common)
    run_in_process(tmp_path / "bf16", *common, "--bf16", "true")
    full, mixed = log_by_step(tmp_path / "fp32", "loss"), log_by_step(tmp_path / "bf16", "loss")
    assert mixed == pytest.approx(full, rel=1e-2) and mixed != full  # the same steps, computed in bf16
    assert {tensor.dtype for tensor in load_file(tmp_path / "bf16" / "model.safetensors").values()} == {torch.float32}
    assert "| precision | bf16 |" in (tmp_path / "bf16" / "README.md").read_text()


@pytest.mark.parametrize("bf16_supported", [True, False])
def test_a_gpu_run_is_mixed_precision_unless_a_precision_is_given_even_false(monkeypatch, bf16_supported):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16_supported)
    automatic = (True, False) if bf16_supported else (False, True)
    assert mixed_precision(None, None, "no", automatic=True) == automatic
    assert mixed_precision(False, None, "no", automatic=True) == (False, False)  # --bf16 false: fp32
    assert mixed_precision(None, False, "no", automatic=True) == (False, False)
    assert mixed_precision(None, True, "no", automatic=True) == (False, True)
    assert mixed_precision(None, None, "bf16", automatic=True) == (False, False)  # accelerate's autocast decides
    assert mixed_precision(None, None, "no", automatic=False) == (False, False)  # a CPU, --auto_mixed_precision false
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU, also on a machine with a GPU
    assert parse_arguments(["--bf16", "false"])[2].bf16 is False and parse_arguments([])[2].bf16 is False
    assert parse_arguments(["--bf16", "true"])[2].bf16 is True


@pytest.mark.parametrize("argv, environment", [(["--fp16", "true"], "no"), ([], "fp16")])
def test_fp16_on_the_cpu_is_refused_rather_than_silently_run_in_fp32(monkeypatch, argv, environment):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", environment)  # what `accelerate launch --mixed_precision` sets
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigurationError, match=r"fp16 mixed precision needs a GPU .* on a CPU use --bf16 true"):
        parse_arguments(argv)


def test_push_to_hub_after_training_fails_clearly_without_network(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    with pytest.raises(HubUploadError, match="someone/copy-model"):
        run_in_process(tmp_path, "--max_steps", "2", "--eval_strategy", "no", "--max_eval_samples", "4",
                       "--max_test_samples", "4", "--push_to_hub", "--hub_model_id", "someone/copy-model")
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(hub_upload_files(tmp_path))


def test_push_to_hub_after_training_sends_the_output_folder(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    with FakeHub() as hub:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.endpoint)
        run_in_process(tmp_path, "--max_steps", "2", "--eval_strategy", "no", "--max_eval_samples", "4",
                       "--max_test_samples", "4", "--push_to_hub", "--hub_model_id", "someone/copy-model")
    (commit,) = hub.commits
    assert commit["repo_id"] == "someone/copy-model" and sorted(commit["files"]) == hub_upload_files(tmp_path)
    assert 'from_pretrained("someone/copy-model"' in commit["files"]["README.md"].decode()


# ---- arguments -------------------------------------------------------------------------------------------------------


def test_cpu_threads_are_shared_out_where_accelerate_launch_left_one(monkeypatch):
    cores = min(psutil.cpu_count(logical=False), len(os.sched_getaffinity(0)))
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # accelerate launch's default without --cpu
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cpu_threads_per_process() == max(1, cores // 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert cpu_threads_per_process() == cores
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # chosen by the user: torch's count stands
    assert cpu_threads_per_process() == torch.get_num_threads()
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")  # not under accelerate launch
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads_per_process() == torch.get_num_threads()


def test_cpu_threads_argument_sets_torch_threads_and_is_checked(tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        setup_training(*quick_args(tmp_path, "--cpu_threads", "1")[:3])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigurationError, match="--cpu_threads must be at least 1, got 0"):
        parse_arguments(["--cpu_threads", "0"])


def test_config_file_values_are_defaults_that_flags_override(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"preset": "base", "d_model": 32, "adam_epsilon": "1e-9", "max_steps": 7,
                                      "norm_first": True, "lr_scheduler_type": "inverse_sqrt", "learning_rate": 5e-4}))
    model_args, data_args, training_args, used = parse_arguments(["--config", str(config), "--d_model", "48"])
    assert used == config
    assert (model_args.preset, model_args.d_model, model_args.norm_first) == ("base", 48, True)
    assert model_args.init_scheme is None and "init_scheme" not in model_args.config_overrides()
    assert parse_arguments(["--init_scheme", "fairseq"])[0].config_overrides()["init_scheme"] == "fairseq"
    overrides = parse_arguments(["--attention_dropout", "0.1", "--activation_dropout", "0.2"])[0].config_overrides()
    assert (overrides["attention_dropout"], overrides["activation_dropout"]) == (0.1, 0.2)
    assert training_args.adam_epsilon == 1e-9 and training_args.max_steps == 7
    assert training_args.lr_scheduler_type == "inverse_sqrt"
    json_config = tmp_path / "run.json"
    json_config.write_text(json.dumps({"max_tokens": 4096}))
    assert parse_arguments(["--config", str(json_config)])[2].max_tokens == 4096


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lr_scheduler_type", "cosine_annealing"],
         r"Unknown --lr_scheduler_type 'cosine_annealing'; choose one of \['noam', 'linear'"),
        (["--lr_scheduler_type", "noam", "--warmup_steps", "0"], r"noam needs --warmup_steps > 0"),
        # transformers' flags that this script would otherwise ignore or crash on after training
        (["--predict_with_generate", "false"], r"--predict_with_generate false is not supported"),
        # NaN passes every range check, and would fail only after the tokenizer was written
        (["--learning_rate", "nan"], r"--learning_rate must be a finite number, got nan"),
        (["--warmup_steps", "nan"], r"--warmup_steps must be a finite number, got nan"),
        (["--adam_epsilon", "inf"], r"--adam_epsilon must be a finite number, got inf"),
        # transformers' schedules that need arguments of their own
        (["--lr_scheduler_type", "cosine_with_min_lr"],
         r"--lr_scheduler_type cosine_with_min_lr: One of min_lr or min_lr_rate should be set .*--lr_scheduler_kwargs"),
        (["--lr_scheduler_type", "warmup_stable_decay"], r"--lr_scheduler_type warmup_stable_decay: .*'num_decay_steps'"),
        (["--lr_scheduler_type", "polynomial", "--learning_rate", "1e-4", "--lr_scheduler_kwargs", '{"lr_end": 1e-3}'],
         r"--lr_scheduler_type polynomial: lr_end \(0.001\) must be smaller than initial lr \(0.0001\)"),
        # transformers' own checks, made once (by transformers), reach the command line as one line too
        (["--eval_strategy", "sometimes"], r"sometimes is not a valid IntervalStrategy, please select one of"),
        (["--lr_scheduler_type", "reduce_lr_on_plateau", "--eval_strategy", "no"],
         r"reduce_lr_on_plateau requires an eval strategy"),
    ],
)
def test_bad_schedule_arguments_are_refused_while_parsing(argv, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_arguments(argv)


def test_one_training_batch_rule_a_command_line_batch_size_overrides_the_files_token_budget(tmp_path):
    default = parse_arguments([], copy_task_config=DEFAULT_CONFIG)[2]
    assert default.max_tokens == 1024  # the copy task's file
    for flag in ("--per_device_train_batch_size", "--per-device-train-batch-size"):  # either spelling the parser takes
        overridden = parse_arguments([flag, "4"], copy_task_config=DEFAULT_CONFIG)[2]
        assert (overridden.max_tokens, overridden.per_device_train_batch_size) == (None, 4)
    with pytest.raises(ConfigurationError, match=r"--per_device_train_batch_size and --max_tokens both set the "
                                                 r"training batch"):
        parse_arguments(["--per_device_train_batch_size", "4", "--max_tokens", "256"], copy_task_config=DEFAULT_CONFIG)
    (tmp_path / "both.yaml").write_text("max_tokens: 256\nper_device_train_batch_size: 4\n")
    with pytest.raises(ConfigurationError, match=r"--per_device_train_batch_size and --max_tokens both set"):
        parse_arguments(["--config", str(tmp_path / "both.yaml")])
    # the command line wins, and the file's other rule is dropped (the batch size back at its unused default)
    for flag, value, expected in (("--max_tokens", "512", (512, 8)), ("--per_device_train_batch_size", "2", (None, 2))):
        chosen = parse_arguments(["--config", str(tmp_path / "both.yaml"), flag, value])[2]
        assert (chosen.max_tokens, chosen.per_device_train_batch_size) == expected
    (tmp_path / "pairs.yaml").write_text("max_tokens: null\nper_device_train_batch_size: 4\n")  # batches of 4
    chosen = parse_arguments(["--config", str(tmp_path / "pairs.yaml")])[2]
    assert (chosen.max_tokens, chosen.per_device_train_batch_size) == (None, 4)
    with pytest.raises(SystemExit):  # flags are spelled out (an abbreviation would slip past the rule)
        parse_arguments(["--per_device_train_batch", "4"], copy_task_config=DEFAULT_CONFIG)


def test_the_schedule_is_transformers_lr_scheduler_type_with_noam_one_more_name(tmp_path):
    assert parse_arguments([])[2].lr_scheduler_type == "noam"  # the paper's, the default
    cosine = parse_arguments(["--lr_scheduler_type", "cosine", "--learning_rate", "5e-4"])[2]
    assert cosine.lr_scheduler_type == "cosine"
    (tmp_path / "old.yaml").write_text("lr_scheduler: noam\n")  # a config file of version 0.2
    with pytest.raises(ConfigurationError, match=r"^lr_scheduler in .*old.yaml is now lr_scheduler_type"):
        parse_arguments(["--config", str(tmp_path / "old.yaml")])


def test_a_schedule_gets_its_arguments_from_lr_scheduler_kwargs():
    training_args = parse_arguments(["--lr_scheduler_type", "cosine_with_min_lr", "--learning_rate", "1e-3",
                                     "--lr_scheduler_kwargs", '{"min_lr": 1e-5}'])[2]
    assert training_args.lr_scheduler_type == "cosine_with_min_lr"
    assert training_args.lr_scheduler_kwargs == {"min_lr": 1e-5}


def test_unknown_config_keys_are_refused(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("d_modle: 32\n")
    with pytest.raises(ConfigurationError, match=r"unknown argument\(s\) \['d_modle'\]"):
        parse_arguments(["--config", str(config)])
    config.write_text("config: other.yaml\nmax_steps: 3\n")  # was ignored: other.yaml's values never applied
    with pytest.raises(ConfigurationError, match=r"config: 'other.yaml' in .*bad.yaml: a config file cannot name "):
        parse_arguments(["--config", str(config)])


@pytest.mark.parametrize("line", ["eval_strategy: no", "source_lang: no", "save_strategy: no"])
def test_a_yaml_boolean_for_a_text_flag_is_refused_with_the_fix(tmp_path, line):
    """YAML 1.1 reads an unquoted no/off as false: the flag got the text 'False' ("Unknown --eval_strategy 'False'",
    "language 'False' not found")."""
    config = tmp_path / "bool.yaml"
    config.write_text(line + "\n")
    name = line.split(":")[0]
    with pytest.raises(ConfigurationError, match=rf"^{name}: False in .*bool.yaml is YAML's boolean .* write the text "
                                                 r"you meant in quotes$"):
        parse_arguments(["--config", str(config)])
    config.write_text(f'{name}: "no"\n' + ("load_best_model_at_end: false\n" if name == "save_strategy" else ""))
    value = getattr(parse_arguments(["--config", str(config)])[1 if name == "source_lang" else 2], name)
    assert getattr(value, "value", value) == "no"  # the strategies become enums


def test_a_logger_or_optimizer_from_a_missing_package_is_refused_before_anything_is_written(tmp_path, capfd):
    """The Trainer builds them after the tokenizer and the run's lock are written: the folder was left half-made."""
    import importlib.util

    cases = [(["--report_to", name], rf"^--report_to {name}: .*install") for name in ("wandb", "mlflow", "clearml")
             if importlib.util.find_spec(name) is None][:1]
    if importlib.util.find_spec("neptune") is None:  # its callback raises ValueError, and mlflow's a RuntimeError
        cases.append((["--report_to", "neptune"], r"^--report_to neptune: .*install"))
    if importlib.util.find_spec("bitsandbytes") is None:
        cases.append((["--optim", "adamw_bnb_8bit"], r"^--optim adamw_bnb_8bit: .*install `bitsandbytes`"))
    if importlib.util.find_spec("grokadamw") is None:  # transformers raises ValueError for this one
        cases.append((["--optim", "grokadamw"], r"^--optim grokadamw: Please install grokadamw"))
    if importlib.util.find_spec("mlflow") is None:  # a half-built MLflowCallback's __del__ raised onto stderr
        cases.append((["--report_to", "mlflow"], r"^--report_to mlflow: .*install"))
    for extra, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            run_in_process(tmp_path / "out", *extra)
        assert not (tmp_path / "out").exists()
        assert "Exception ignored" not in capfd.readouterr().err
    (tmp_path / "loggers.yaml").write_text("report_to: [tensorboard, all]\n")  # a list, as a config file gives it
    with pytest.raises(ConfigurationError, match=r"^--report_to tensorboard all: 'all' and 'none' stand alone"):
        validate_arguments(*parse_arguments(["--config", str(tmp_path / "loggers.yaml"),
                                             "--output_dir", str(tmp_path / "out")])[:3])


@pytest.mark.parametrize(
    "extra, message",
    [
        # the model: refused by the configuration's @strict validation, naming the flag
        (["--attention_heads", "7"], r"^--attention_heads 7: `d_model` \(64\) must be divisible by "
                                     r"`encoder_attention_heads` \(7\)"),
        (["--d_model", "0"], r"^--d_model 0: `d_model` must be a positive integer, got 0"),
        (["--d_model", "-64"], r"^--d_model -64: `d_model` must be a positive integer, got -64"),
        (["--d_model", "66"], r"^--d_model 66: `d_model` \(66\) must be divisible by `encoder_attention_heads` \(4\)"),
        (["--d_model", "66", "--attention_heads", "4"], r"^--d_model 66 --attention_heads 4: `d_model` \(66\)"),
        (["--attention_heads", "0"], r"^--attention_heads 0: `encoder_attention_heads` must be a positive integer"),
        (["--ffn_dim", "0"], r"^--ffn_dim 0: `encoder_ffn_dim` must be a positive integer, got 0"),
        (["--encoder_layers", "0"], r"^--encoder_layers 0: `encoder_layers` must be a positive integer, got 0"),
        (["--dropout", "1.5"], r"^--dropout 1.5: `dropout` must be in \[0, 1\), got 1.5"),
        (["--activation_dropout", "-0.1"], r"^--activation_dropout -0.1: `activation_dropout` must be in \[0, 1\)"),
        (["--label_smoothing", "1.0"], r"^--label_smoothing 1.0: `label_smoothing` must be in \[0, 1\), got 1.0"),
        (["--preset", "huge"], r"^--preset huge: Unknown model preset 'huge'; choose one of \['base', 'big', 'tiny'\]"),
        # the tokenizer, the data and the rest
        (["--vocab_size", "10"], r"^--vocab_size 10 is too small: .* it must be at least 260"),
        (["--generation_num_beams", "0"], r"^--generation_num_beams must be at least 1, got 0"),
        (["--max_steps", "0"], r"^--max_steps must be a positive number of optimizer steps"),
        (["--max_train_samples", "0"], r"^--max_train_samples must be at least 1 pair, got 0"),
        (["--preprocessing_num_workers", "0"], r"^--preprocessing_num_workers must be at least 1 process, got 0"),
        (["--ddp_timeout", "0"], r"^--ddp_timeout must be a positive number of seconds, got 0"),
        (["--data_dir", "no/such/corpus"], r"^--data_dir no/such/corpus does not exist .*; get Multi30k into "
                                           r"data/multi30k with: mkdir -p data/multi30k && for f in .*curl .*; done "
                                           r"\(other corpora: docs/data\.md\)"),
        (["--tokenizer_name_or_path", "."], r"^--tokenizer_name_or_path \. is not a directory with a tokenizer.json"),
        (["--config", "no/such.yaml"], r"^--config no/such.yaml: the file does not exist"),
        (["--max_length", "300"], r"^--max_length 300 .* exceeds the 256 positions"),
        (["--generation_max_length", "257"], r"^--generation_max_length 257 .* exceeds the 256 positions"),
        (["--generation_max_length", "1"], r"^--generation_max_length must be at least 2, got 1"),
        (["--per_device_eval_batch_size", "0"], r"^--per_device_eval_batch_size must be at least 1, got 0"),
        (["--gradient_accumulation_steps", "0"], r"^--gradient_accumulation_steps must be at least 1, got 0"),
        (["--seed", "-1"], r"^--seed must be at least 0, got -1"),
        (["--seed", str(2**32)], r"^--seed must be below 2\*\*32"),
        (["--metric_for_best_model", "blue"], r"^--metric_for_best_model blue is not an evaluation metric; choose "
                                              r"one of \['loss', 'bleu', 'chrf'"),
        (["--report_to", "tensorbored"], r"^--report_to tensorbored: not a logger transformers knows"),
        (["--label_smoothing_factor", "0.1"], r"^label smoothing is set twice"),
        (["--label_smoothing", "0", "--label_smoothing_factor", "nan"],
         r"^--label_smoothing_factor must be a finite number, got nan"),
        (["--label_smoothing", "0", "--label_smoothing_factor", "1.5"],
         r"^--label_smoothing_factor must be in \[0, 1\), got 1.5"),
        (["--neftune_noise_alpha", "nan"], r"^--neftune_noise_alpha must be a finite number > 0, got nan"),
        (["--max_length", "250", "--pad_to_multiple_of", "100"],
         r"^--pad_to_multiple_of 100 pads a pair of --max_length 250 tokens to 300, beyond the 256 positions"),
        (["--push_to_hub", "true", "--hub_model_id", "bad id/x/y"], r"^--hub_model_id 'bad id/x/y': Repo id must be"),
        (["--source_lang", "de"], r"^--source_lang de: the synthetic copy task has no languages; give the corpus"),
        # found in the data: the tokenizer is trained, but nothing is written
        (["--max_tokens", "8"], r"^--max_tokens 8 is too small for the training data: .* exceed max_tokens=8 on "
                                r"their own \(token_count=.*\): index .* \(indices count the pairs kept after "
                                r"filtering; index \d+ is the pair '.*'\); raise --max_tokens, or lower --max_length"),
        (["--max_length", "1"], r"^--max_length 1: no train pairs are left after filtering"),
    ],
)
def test_bad_arguments_fail_before_anything_is_written(tmp_path, extra, message):
    with pytest.raises(ConfigurationError, match=message):
        run_in_process(tmp_path / "out", *extra)
    assert not (tmp_path / "out").exists()


def test_every_test_set_is_scored_and_limited(tmp_path):
    """Two test files (test_2016, test_2017) stay two splits: each is cut to --max_test_samples and scored."""
    data = tmp_path / "data"
    data.mkdir()
    pairs = [(f"{i} {i + 1} {i + 2}", f"{i + 2} {i + 1} {i}") for i in range(40)]
    for split, rows in (("train", pairs[:30]), ("val", pairs[30:34]), ("test_2016", pairs[34:38]),
                        ("test_2017", pairs[36:40])):
        for language, side in (("de", 0), ("en", 1)):
            (data / f"{split}.{language}").write_text("".join(row[side] + "\n" for row in rows))
    metrics = run_in_process(tmp_path / "out", "--data_dir", str(data), "--source_lang", "de", "--target_lang", "en",
                             "--max_test_samples", "3", "--max_steps", "2", "--eval_strategy", "no")
    assert metrics["test_2016_sentences"] == metrics["test_2017_sentences"] == 3
    for split in ("test_2016", "test_2017"):
        assert json.loads((tmp_path / "out" / f"{split}_results.json").read_text())[f"{split}_sentences"] == 3
        assert f"| {split} | 3 |" in (tmp_path / "out" / "README.md").read_text()


def test_training_data_without_text_is_named_as_such(tmp_path):
    """Pairs removed as empty (blank or whitespace-only lines) are not helped by a larger --max_length."""
    data = tmp_path / "data"
    data.mkdir()
    for language in ("de", "en"):
        (data / f"train.{language}").write_text("   \n\t\n" * 20)
        (data / f"val.{language}").write_text("ein Satz\n")
    with pytest.raises(ConfigurationError, match=r"^no train pairs are left after filtering \(.*'empty': 40.*\): the "
                                                 r"train data holds no pair with text on both sides$"):
        run_in_process(tmp_path / "out", "--data_dir", str(data), "--source_lang", "de", "--target_lang", "en")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra", [["--attention_heads", "7"], ["--vocab_size", "10"], ["--dropout", "1.5"]])
def test_model_arguments_are_checked_before_the_corpus_is_loaded(tmp_path, monkeypatch, extra):
    import modeling.training.run

    def load_corpus(data_args):
        raise AssertionError("the corpus was loaded before the arguments were checked")

    monkeypatch.setattr(modeling.training.run, "load_corpus", load_corpus)
    with pytest.raises(ConfigurationError, match=f"^{extra[0]} {extra[1]}"):
        run_in_process(tmp_path / "out", *extra)


@pytest.mark.parametrize(
    "text, message",
    [
        ("d_model: [64\n", r"^--config .*bad.yaml is not valid YAML: while parsing"),
        ("- 1\n", r"^--config .*bad.yaml must hold a mapping of argument names to values, got a list"),
        ("adam_epsilon: tiny\n", r"^adam_epsilon: 'tiny' in .*bad.yaml is not a number"),
        ("d_model: [64]\n", r"^--d_model \[64\]: Field 'd_model' expected int, got list"),
        ("max_steps: 5.5\n", r"^max_steps: 5.5 in .*bad.yaml is not an integer"),
        ("max_steps: true\n", r"^max_steps: True in .*bad.yaml is not an integer"),
        ("save_total_limit: 2.5\n", r"^save_total_limit: 2.5 in .*bad.yaml is not an integer"),
        (b"\xff\xfe max_steps: 3\n", r"^--config .*bad.yaml is not valid YAML: 'utf-8' codec can't decode"),
    ],
)
def test_bad_config_files_are_refused(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigurationError, match=message):
        run_in_process(tmp_path / "out", "--config", str(tmp_path / "bad.yaml"))
    assert not (tmp_path / "out").exists()


def test_an_output_dir_that_cannot_be_a_folder_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match=r"^--output_dir .*file/out: .*file is a file, not a folder"):
        run_in_process(tmp_path / "file" / "out")
    if Path("/proc").is_dir():  # a folder that takes no new files, even for root (for whom os.access says yes)
        with pytest.raises(ConfigurationError, match=r"^--output_dir /proc/out: /proc is not writable \("):
            run_in_process(Path("/proc/out"))


def test_separate_tokenizers_are_refused_before_the_corpus_is_loaded(tmp_path):
    from modeling.tokenization import save_tokenizers, train_translation_tokenizers

    save_tokenizers(train_translation_tokenizers(["a b"], ["c d"], joint=False, vocab_size=270), tmp_path / "tok")
    with pytest.raises(ConfigurationError, match=r"tok holds separate source/target tokenizers"):
        run_in_process(tmp_path / "out", "--tokenizer_name_or_path", str(tmp_path / "tok"))


def test_a_given_tokenizer_is_saved_with_the_models_length_limit(tmp_path):
    """train_tokenizer.py's tokenizers keep --model_max_length 1024; saved with a model of fewer positions, that
    limit let truncation=True pass texts the model refuses."""
    from modeling.tokenization import dataset_texts

    setup = setup_training(*quick_args(tmp_path / "first", "--max_steps", "1")[:3])
    trained = train_tokenizer(dataset_texts(setup.corpus["train"]), vocab_size=300, model_max_length=1024)
    trained.save_pretrained(tmp_path / "tok")
    setup.run_lock.release()
    setup = setup_training(*quick_args(tmp_path / "out", "--max_steps", "1", "--tokenizer_name_or_path",
                                       str(tmp_path / "tok"))[:3])
    setup.run_lock.release()
    positions = setup.trainer.model.config.max_position_embeddings
    assert setup.tokenizer.model_max_length == positions - 1  # as for a tokenizer the run trains itself


def test_a_tokenizer_without_the_special_tokens_translation_needs_is_refused(tmp_path):
    """Without </s> at the end of every encoded text the model never learns to stop; without a padding token the
    collator fails after the corpus is tokenized."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    def word_level(folder, special_tokens, **named):
        tokenizer = Tokenizer(models.WordLevel(unk_token=special_tokens[0]))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(special_tokens=special_tokens)
        tokenizer.train_from_iterator(["1 2 3 4 5 6 7 8 9 0 a"], trainer)
        PreTrainedTokenizerFast(tokenizer_object=tokenizer, **named).save_pretrained(folder)
        return str(folder)

    no_eos_appended = word_level(tmp_path / "no-eos", ["<unk>", "<pad>", "<s>", "</s>"], unk_token="<unk>",
                                 pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    with pytest.raises(ConfigurationError, match=r"no-eos does not end encoded text with </s> .* never learn to stop"):
        run_in_process(tmp_path / "out", "--tokenizer_name_or_path", no_eos_appended)
    no_special = word_level(tmp_path / "no-special", ["[UNK]"], unk_token="[UNK]")
    with pytest.raises(ConfigurationError, match=r"no-special has no pad_token, bos_token, eos_token: translation"):
        run_in_process(tmp_path / "out", "--tokenizer_name_or_path", no_special)
    assert not (tmp_path / "out").exists()


def test_overwrite_keeps_the_earlier_run_when_the_new_one_is_refused(tmp_path):
    (tmp_path / "out" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="--max_tokens 8 is too small"):
        run_in_process(tmp_path / "out", "--overwrite_output_dir", "true", "--max_tokens", "8")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["checkpoint-3"]


def test_unknown_flags_are_argparse_errors_on_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_arguments(["--d_modle", "32"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "train.py: error: unrecognized arguments: --d_modle 32\n"


BAD_ARGUMENTS = [
    (["--preset", "huge"], "--preset huge: Unknown model preset 'huge'; choose one of ['base', 'big', 'tiny']"),
    (["--attention_heads", "7"], "--attention_heads 7: `d_model` (64) must be divisible"),
    (["--max_tokens", "8"], "--max_tokens 8 is too small for the training data"),  # after tokenizer training
    (["--max_stepz", "8"], "unrecognized arguments: --max_stepz 8"),  # argparse's own
]


@pytest.mark.parametrize("extra, message", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_with_status_2_and_nothing_written(tmp_path, extra, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_script("train").main([*extra, "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("train.py: error: ")]
    assert len(errors) == 1 and message in errors[0], stderr
    assert "usage:" not in stderr and not (tmp_path / "out").exists()


def test_the_command_line_reports_a_bad_argument_on_one_line_with_status_2(tmp_path):
    """The real exit status and standard error of a refusal found after the tokenizer is trained."""
    extra, message = BAD_ARGUMENTS[2]
    result = subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), *extra, "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true"],
        cwd=REPO_ROOT, env={**os.environ, **SCRIPT_ENV}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("train.py: error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr and "usage:" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a launch (the check itself: test_fp16_on_the_cpu_is_refused_rather_than_silently_run_in_fp32)
def test_accelerate_launch_with_fp16_on_the_cpu_stops_before_training(tmp_path):
    result = accelerate_launch(
        ["--num_processes", "1", "--mixed_precision", "fp16"], ["--output_dir", str(tmp_path / "out")],
        env={"CUDA_VISIBLE_DEVICES": ""}, check=False,
    )
    assert result.returncode != 0
    assert "train.py: error: fp16 mixed precision needs a GPU" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_process_resume_continues_from_the_saved_step(tmp_path):
    """Interrupted after 6 steps (inside the second epoch) and resumed under 2 processes: the same losses as a
    straight 12-step run."""

    def launch(output_dir, *extra):
        accelerate_launch(
            ["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"],
            [*QUICK, "--output_dir", str(output_dir), "--eval_strategy", "no", "--save_steps", "6",
             "--max_train_samples", "128", "--max_tokens", "128", "--max_eval_samples", "4", "--max_test_samples", "4",
             *extra],
            env={"OMP_NUM_THREADS": "1"},
        )

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    launch(straight, "--max_steps", "12")
    launch(resumed, "--max_steps", "6")
    launch(resumed, "--max_steps", "12", "--resume_from_checkpoint", "last")
    assert 1 < log_by_step(resumed, "epoch")[6] < 2
    straight_loss, resumed_loss = log_by_step(straight, "loss"), log_by_step(resumed, "loss")
    for step in range(7, 13):
        assert resumed_loss[step] == pytest.approx(straight_loss[step], rel=1e-4), step


# ---- the main job ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_main_job_learns_the_copy_task(tmp_path):
    """`accelerate launch scripts/train.py` with no arguments (but another output_dir): > 95% exact match."""
    result = accelerate_launch(
        ["--num_processes", "1", "--mixed_precision", "no"], ["--output_dir", str(tmp_path / "m")], timeout=1200
    )
    test_results = json.loads((tmp_path / "m" / "test_results.json").read_text())
    assert test_results["test_exact_match"] > 95
    assert "python scripts/translate.py" in result.stdout and "exact match" in result.stdout
