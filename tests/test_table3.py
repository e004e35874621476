"""scripts/table3.py on the copy task: every row trained by train.py from the base config, averaged and scored into
one JSON with the base row's range and each row's difference; finished runs skipped, a killed run resumed exactly.
The real table (configs/table3/) is checked for what it must hold: every group of the paper's Table 3, expressed in
train.py's settings, beside the paper's own figures."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from launch_helpers import REPO_ROOT, assert_one_line_error, load_script
from safetensors.torch import load_file

from tools.benchmarking import table3_runner
from tools.benchmarking.table3_runner import load_rows_file, summarise
from modeling.training.argument_parsing import parse_arguments

ROWS = REPO_ROOT / "configs" / "table3" / "rows.yaml"
PAPER = REPO_ROOT / "benchmarks" / "paper-table3.json"
TRAIN_SCRIPT = REPO_ROOT / "scripts" / "train.py"
STEPS = 12


def copy_task_rows(folder: Path, rows: list[dict], steps: int = STEPS, save_steps: int = 4) -> Path:
    """A rows file over a tiny copy-task config: `steps` steps (12), a save every `save_steps` (4), the last 2
    averaged, beam 2."""
    config = folder / "base.yaml"
    config.write_text(yaml.safe_dump({
        "preset": "tiny", "d_model": 32, "ffn_dim": 64, "label_smoothing": 0.1, "vocab_size": 270,
        "max_length": 32, "lr_scheduler_type": "noam", "learning_rate": 1.0, "max_tokens": 512, "seed": 0,
        "eval_strategy": "no", "save_strategy": "steps", "save_total_limit": 2, "logging_steps": 4,
        "report_to": "none", "dataloader_num_workers": 0,
    }))
    path = folder / "rows.yaml"
    path.write_text(yaml.safe_dump({
        "config": str(config), "averaged_checkpoints": 2, "num_beams": 2,
        "budgets": {"cpu": {"max_steps": steps, "warmup_steps": 4, "save_steps": save_steps}},
        "rows": rows,
    }))
    return path


TWO_ROWS = [{"name": "base", "group": "base", "seeds": [0]},
            {"name": "E-learned", "group": "E", "set": {"position_embedding_type": "learned"}}]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("table3")
    rows = copy_task_rows(folder, TWO_ROWS)
    lines = []
    results = table3_runner.run_table(rows, folder / "runs", folder / "results.json", log=lines.append,
                               train_script=TRAIN_SCRIPT)
    return folder, rows, results, lines


@pytest.mark.slow  # two trainings through accelerate launch, and their scoring: about a minute
def test_every_row_is_trained_averaged_and_scored_into_one_json(table):
    folder, _, results, lines = table
    saved = json.loads((folder / "results.json").read_text())
    assert saved["runs"] == results["runs"] and set(saved["runs"]) == {"base", "E-learned"}
    assert saved["planned_runs"] == 2 and saved["base_config"]["max_tokens"] == 512  # what the table renders
    for name, run in saved["runs"].items():
        assert run["budget"] == {"max_steps": STEPS, "warmup_steps": 4, "save_steps": 4, "averaged_checkpoints": 2,
                                 "num_beams": 2}
        assert run["validation"]["split"] == "validation" and run["test"]["split"] == "test"
        assert 1 < run["validation"]["perplexity"] < 270 and 0 <= run["test"]["bleu"] <= 100
        assert run["training_seconds"] > 0 and run["environment"]["device"] == "cpu"
        assert (folder / "runs" / f"{name}-avg2" / "config.json").is_file()
    learned, base = saved["runs"]["E-learned"], saved["runs"]["base"]
    assert learned["settings"] == {"seed": 0, "position_embedding_type": "learned"}
    assert learned["parameters"] - base["parameters"] == 2 * 256 * 32  # one table of positions per stack
    config = json.loads((folder / "runs" / "E-learned" / "config.json").read_text())
    assert config["position_embedding_type"] == "learned" and config["d_model"] == 32
    # one tokenizer for every run: the first run's
    assert (folder / "runs" / "tokenizer" / "tokenizer.json").read_bytes() == \
        (folder / "runs" / "E-learned" / "tokenizer.json").read_bytes()
    assert "--tokenizer_name_or_path" in next(line for line in lines if line.startswith("E-learned: training"))
    summary = saved["summary"]
    assert summary["base"]["test_bleu"] == {"mean": pytest.approx(base["test"]["bleu"], abs=1e-4), "range": 0.0}
    difference = summary["differences"]["E-learned"]["validation_perplexity"]
    assert difference["difference"] == pytest.approx(learned["validation"]["perplexity"]
                                                     - base["validation"]["perplexity"], abs=1e-3)
    assert difference["tie"] == (abs(difference["difference"]) <= 0.0)


@pytest.mark.slow
def test_runs_in_the_results_are_skipped_and_nothing_is_trained_again(table, monkeypatch):
    folder, rows, results, _ = table
    before = (folder / "results.json").read_text()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(table3_runner.subprocess, "Popen", no_training)
    monkeypatch.setattr(table3_runner, "score", no_training)
    lines = []
    table3_runner.run_table(rows, folder / "runs", folder / "results.json", log=lines.append, train_script=TRAIN_SCRIPT)
    assert lines == [f"base: done already (in {folder / 'results.json'})",
                     f"E-learned: done already (in {folder / 'results.json'})"]
    assert json.loads((folder / "results.json").read_text())["runs"] == json.loads(before)["runs"]


def test_the_range_of_the_base_seeds_tells_a_difference_from_a_tie():
    def run(row, perplexity, bleu):
        return {"row": row, "validation": {"perplexity": perplexity, "bleu": bleu}, "test": {"bleu": bleu}}

    summary = summarise({"base-seed0": run("base", 5.0, 30.0), "base-seed1": run("base", 5.2, 31.0),
                         "base-seed2": run("base", 5.1, 32.0), "wide": run("wide", 4.0, 31.5),
                         "narrow": run("narrow", 5.15, 34.5)})
    assert summary["base"]["validation_bleu"] == {"mean": 31.0, "range": 2.0}
    assert summary["differences"]["wide"]["validation_perplexity"] == {"difference": -1.1, "tie": False}
    assert summary["differences"]["wide"]["validation_bleu"] == {"difference": 0.5, "tie": True}
    assert summary["differences"]["narrow"]["test_bleu"] == {"difference": 3.5, "tie": False}
    assert summary["differences"]["narrow"]["validation_perplexity"] == {"difference": 0.05, "tie": True}


@pytest.mark.parametrize("argv, message", [
    (["--only", "Z-nothing"], r"--only Z-nothing: no such row in .*rows\.yaml; rows: base, E-learned"),
    (["--data_dir", "no/such/corpus"], r"--data_dir no/such/corpus does not exist"),
    (["--device", "tpu"], r"argument --device: invalid choice: 'tpu'"),
])
def test_bad_arguments_are_refused_in_one_line(argv, message, tmp_path, capsys):
    rows = copy_task_rows(tmp_path, TWO_ROWS)
    with pytest.raises(SystemExit) as exit_info:
        load_script("table3").main(["--rows", str(rows), "--output_dir", str(tmp_path / "runs"), "--results",
                                    str(tmp_path / "results.json"), *argv])
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "table3.py", message)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.json").exists()


def test_the_table_holds_every_group_of_the_papers_in_train_py_settings_beside_the_papers_figures():
    table = load_rows_file(ROWS)
    paper = json.loads(PAPER.read_text())["rows"]
    assert [row.name for row in table.rows] == list(paper)  # each row beside the paper's
    assert {row.group for row in table.rows} == {"base", "A", "B", "C", "D", "E"}
    assert table.row("base").seeds == [0, 1, 2] and sum(len(row.runs()) for row in table.rows) == 21
    assert table.budgets["cpu"]["max_steps"] < table.budgets["cuda"]["max_steps"]
    for row in table.rows:  # each row is a valid train.py run: the base config, the budget, its settings
        argv = ["--config", str(table.config), "--output_dir", "unused", "--data_dir", "unused",
                *table3_runner.flags(table.budgets["cpu"]), *table3_runner.flags(row.settings)]
        model_args, _, training_args, _ = parse_arguments(argv)
        config = table3_config(model_args)
        assert training_args.max_steps == table.budgets["cpu"]["max_steps"]
        if row.name.startswith("A-"):  # constant computation: h x d_k = d_model
            heads = row.settings["attention_heads"]
            assert config.head_sizes(heads) == (128 // heads, 128 // heads)
        if row.name.startswith("B-"):
            assert config.head_sizes(4) == (row.settings["d_k"], 32)
        if row.name == "E-learned-positions":
            assert config.position_embedding_type == "learned"


def table3_config(model_args):
    from modeling.training.argument_checks import model_config
    from modeling.training.arguments import DataArguments

    return model_config(model_args, DataArguments(vocab_size=8000))


def averaged_weights(folder: Path) -> dict:
    return load_file(folder / "model.safetensors")


@pytest.mark.slow
def test_a_killed_table_resumes_its_run_to_the_weights_of_an_uninterrupted_one(tmp_path):
    """kill -9 the runner while a row trains (its training process dies with it), run the command again: the row
    resumes from its last checkpoint and ends with the weights, and the scores, of a run never stopped."""
    rows = copy_task_rows(tmp_path, TWO_ROWS[:1], steps=240, save_steps=40)  # long enough to be killed midway
    straight = table3_runner.run_table(rows, tmp_path / "straight", tmp_path / "straight.json", log=lambda line: None,
                                train_script=TRAIN_SCRIPT)

    command = [sys.executable, str(REPO_ROOT / "scripts" / "table3.py"), "--rows", str(rows), "--output_dir",
               str(tmp_path / "killed"), "--results", str(tmp_path / "killed.json")]
    runner = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = tmp_path / "killed" / "base" / "checkpoint-40"
    deadline = time.monotonic() + 300
    while not (checkpoint / "trainer_state.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert checkpoint.is_dir(), "no checkpoint within the time allowed"
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    time.sleep(2)  # the training process ends with its parent
    assert not (tmp_path / "killed" / "base" / "config.json").is_file()  # stopped before its end
    assert not (tmp_path / "killed.json").exists()

    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    log = (tmp_path / "killed" / "base.train.log").read_text()
    assert "--resume_from_checkpoint last" in result.stdout and "Resum" in log
    resumed = json.loads((tmp_path / "killed.json").read_text())
    for name, weight in averaged_weights(tmp_path / "straight" / "base-avg2").items():
        assert torch.equal(weight, averaged_weights(tmp_path / "killed" / "base-avg2")[name]), name
    for split in ("validation", "test"):
        assert resumed["runs"]["base"][split] == straight["runs"]["base"][split]
    assert 0 < resumed["runs"]["base"]["training_seconds"]  # both launches', the first up to its last checkpoint


def test_a_run_begun_with_another_budget_is_not_resumed_with_this_one(tmp_path, capsys):
    """The folder of a run stopped midway holds checkpoints of its own schedule: a rows file changed since (another
    budget, other settings) is refused in one line before anything trains, rather than resuming the wrong run."""
    rows = copy_task_rows(tmp_path, TWO_ROWS[:1])
    runs = tmp_path / "runs"
    (runs / "base").mkdir(parents=True)
    (runs / "base.plan.json").write_text(json.dumps({"settings": {"seed": 0}, "budget": {"max_steps": 99}}))
    with pytest.raises(SystemExit) as exit_info:
        load_script("table3").main(["--rows", str(rows), "--output_dir", str(runs), "--results",
                                    str(tmp_path / "results.json")])
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "table3.py", r"runs/base was begun with other settings or another "
                          r"budget \(.*base\.plan\.json\): delete both to train it afresh")
    assert not (tmp_path / "results.json").exists() and list((runs / "base").iterdir()) == []


def test_results_of_another_base_config_are_not_mixed_with_this_one(tmp_path, capsys):
    """A results file holds one table: runs measured from another base config (another direction, batch size) are
    refused in one line, and the file is left as it was, rather than skipped as done or mixed with new runs."""
    rows = copy_task_rows(tmp_path, TWO_ROWS[:1])
    results = tmp_path / "results.json"
    before = json.dumps({"base_config": {"source_lang": "en", "target_lang": "de"}, "runs": {"base": {"row": "base"}}})
    results.write_text(before)
    with pytest.raises(SystemExit) as exit_info:
        load_script("table3").main(["--rows", str(rows), "--output_dir", str(tmp_path / "runs"), "--results",
                                    str(results)])
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "table3.py", r"results\.json holds runs of another base config "
                          r"than .*base\.yaml: give another --results, or move it away to run the table again")
    assert results.read_text() == before and not (tmp_path / "runs").exists()


def test_an_average_killed_midway_is_not_taken_for_done_and_is_made_again(tmp_path, monkeypatch):
    """average_checkpoints writes config.json before the weights: a kill in between left a folder that the runner
    took as done. The average is now written beside its place and renamed into it last."""
    averaged = tmp_path / "base-avg5"
    calls = []

    def killed_midway(checkpoints, output_dir):
        calls.append(Path(output_dir))
        Path(output_dir).mkdir(parents=True)
        (Path(output_dir) / "config.json").write_text("{}")
        if len(calls) == 1:
            raise KeyboardInterrupt  # the kill, after config.json and before the weights
        (Path(output_dir) / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(table3_runner, "average_checkpoints", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        table3_runner.average_whole([], averaged)
    assert not averaged.exists() and calls[0] != averaged  # nothing at the done mark's place
    table3_runner.average_whole([], averaged)
    assert sorted(path.name for path in averaged.iterdir()) == ["config.json", "model.safetensors"]
    assert [path.name for path in tmp_path.iterdir()] == ["base-avg5"]  # no partial folder left


def test_an_explicit_d_k_equal_to_d_model_over_heads_is_the_same_architecture(tmp_path):
    """A checkpoint saved without d_k (d_model / heads = 16) resumes with `--d_k 16`; `--d_k 8` is another model."""
    from modeling import AnnotatedTransformerConfig
    from modeling.training.arguments import ConfigurationError
    from modeling.training.run_safety import refuse_other_architecture

    saved = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=32, d_model=64, encoder_attention_heads=4,
                                                   decoder_attention_heads=4)
    saved.save_pretrained(tmp_path)
    same = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=32, d_model=64, encoder_attention_heads=4,
                                                  decoder_attention_heads=4, d_k=16, d_v=16)
    refuse_other_architecture(str(tmp_path), same)
    other = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=32, d_model=64, encoder_attention_heads=4,
                                                   decoder_attention_heads=4, d_k=8)
    with pytest.raises(ConfigurationError, match=r"another architecture \(d_k 16 there, 8 here\)"):
        refuse_other_architecture(str(tmp_path), other)
