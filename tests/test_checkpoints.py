"""Checkpoint averaging (§6.1): the averaged weights are the mean of the checkpoints' tensors and load as a model."""

import json
import re
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling.inference.hub import hub_upload_files
from modeling.tokenization import train_tokenizer
from modeling.training.checkpoints import average_checkpoints, average_state_dicts, last_checkpoints, list_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[1]


def save_checkpoint(directory, seed: int, tokenizer, **config_overrides):
    """A Trainer-like checkpoint folder: model (with custom code), tokenizer and training state files."""
    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=32, **config_overrides,
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin",
                 "optimizer.bin", "pytorch_model_fsdp.bin", "optimizer_0/__0_0.distcp"):  # the last three: FSDP's
        (directory / name).parent.mkdir(exist_ok=True)
        torch.save({"state": name}, directory / name)
    (directory / "trainer_state.json").write_text(json.dumps({"global_step": seed}))
    return model


def saved_states(folder, best: int | None, saves, save_steps=None, epoch_of=None, strategy=None, launches=None):
    """checkpoint-<step>/trainer_state.json for each of `saves`, as the Trainer records them: the best checkpoint,
    save_steps and the epoch, and our callbacks' records of the save strategy and the launches (where given)."""
    records = {}
    if strategy is not None:
        records["CheckpointSchedule"] = {"args": {"save_strategy": strategy}, "attributes": {}}
    if launches is not None:
        records["LaunchHistory"] = {"args": {"launches": launches, "complete": True}, "attributes": {}}
    for step in saves:
        state = {"best_model_checkpoint": None if best is None else str(folder / f"checkpoint-{best}"),
                 "save_steps": save_steps, "epoch": None if epoch_of is None else epoch_of(step),
                 "stateful_callbacks": records}
        (folder / f"checkpoint-{step}").mkdir()
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))


def check_last_saves(folder, saves, best, refused) -> None:
    """`last_checkpoints(folder, len(saves))` refuses the kept best checkpoint, or gives `saves`."""
    if refused:
        with pytest.raises(ValueError, match=rf"checkpoint-{best} is not one of the last {len(saves)} saves"):
            last_checkpoints(folder, len(saves))
    else:
        assert [path.name for path in last_checkpoints(folder, len(saves))] == [f"checkpoint-{step}" for step in saves]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["1 2 3 4", "5 6 7 8 9 0"] * 10, vocab_size=270)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tokenizer):
    run = tmp_path_factory.mktemp("run")
    models = {step: save_checkpoint(run / f"checkpoint-{step}", step, tokenizer) for step in (9, 10, 100)}
    return run, models


def test_checkpoints_are_ordered_by_step_not_by_name(run_dir):
    run, _ = run_dir
    assert [path.name for path in list_checkpoints(run)] == ["checkpoint-9", "checkpoint-10", "checkpoint-100"]
    assert [path.name for path in last_checkpoints(run, 2)] == ["checkpoint-10", "checkpoint-100"]
    with pytest.raises(ValueError, match="asked for the last 4 checkpoints, but .* holds 3"):
        last_checkpoints(run, 4)


@pytest.mark.parametrize("best, saves, refused", [
    (200, (200, 1000, 1200, 1400, 1600), True),  # the best, kept by save_total_limit 5, is not among the last 5 saves
    (1000, (800, 1000, 1200, 1400, 1600), False),  # the best is one of the last 5 saves
    (1600, (800, 1000, 1200, 1400, 1600), False),
    (None, (200, 1000, 1200, 1400, 1600), False),  # no best recorded: saves at odd times are the user's
    (7, (7, 16, 24, 31, 40), False),  # epochs of token-budget batches: uneven, but consecutive
])
def test_the_last_n_saves_do_not_include_an_old_best_checkpoint_the_trainer_kept(tmp_path, best, saves, refused):
    saved_states(tmp_path, best, saves)
    if refused:
        with pytest.raises(ValueError, match=rf"checkpoint-{best} is not one of the last 5 saves of .*: it is the best "
                                             r"checkpoint.*Average --last 4, .* or train with save_total_limit 6"):
            last_checkpoints(tmp_path, 5)
        assert [path.name for path in last_checkpoints(tmp_path, 4)] == [f"checkpoint-{step}" for step in saves[1:]]
    else:
        assert [path.name for path in last_checkpoints(tmp_path, 5)] == [f"checkpoint-{step}" for step in saves]


@pytest.mark.parametrize("strategy, best, saves, save_steps, steps_per_epoch, refused", [
    ("steps", 100, (100, 300), 100, 37, True),  # save_total_limit 1 kept the best beside the newest: 200 is gone
    ("steps", 200, (200, 300), 100, 37, False),
    ("steps", 300, (300, 350), 100, 37, False),  # the save at the end of training, off the interval
    ("steps", 350, (350, 600), 100, 37, True),  # an earlier launch's end save, then 400 and 500 are gone
    ("steps", 4, (4, 8), 2, 4, True),  # every save on a whole epoch: the epochs say nothing here
    ("epoch", 37, (37, 111), 500.0, 37, True),  # at epoch ends (save_steps, unused, is a multiple of nothing)
    ("epoch", 37, (37, 74), 500.0, 37, False),
    ("epoch", 12, (12, 15), 2.0, 4, False),  # the save at the end of training, partway through epoch 4
    ("epoch", 8, (8, 16), 8.0, 4, True),  # epoch 3's is gone though no multiple of save_steps lies between
    (None, 100, (100, 300), 100, 37, False),  # saved before the schedule was recorded: not told
])
def test_the_last_two_saves_are_told_apart_from_an_old_best_by_the_recorded_save_strategy(
        tmp_path, strategy, best, saves, save_steps, steps_per_epoch, refused):
    """With two checkpoints there is no second gap to compare the first with: the save strategy the newest one
    records (`CheckpointSchedule`) says whether the run saved between them."""
    saved_states(tmp_path, best, saves, save_steps, lambda step: step / steps_per_epoch, strategy)
    check_last_saves(tmp_path, saves, best, refused)


@pytest.mark.parametrize("strategy, saves, refused", [
    ("epoch", (100, 200, 230), False),  # the last save partway through epoch 3 (--stop_time_hours, --max_steps)
    ("epoch", (107, 214, 257, 321), False),  # and resumed from there with a raised limit: gaps 107, 43, 64
    ("epoch", (100, 300, 330), True),  # epoch 2's save is gone: 100 is only the kept best
    ("steps", (100, 200, 230), False),
    ("steps", (100, 300, 330), True),
])
def test_a_recorded_save_strategy_decides_over_the_gaps_of_the_last_n_saves(tmp_path, strategy, saves, refused):
    """The gap rule (a first gap well beyond the later ones) is for checkpoints without a recorded save strategy: with
    one, a short last gap (a save at the end of training, off the cadence) does not make the saves before it look
    apart."""
    steps_per_epoch = 100 if saves[0] == 100 else 107
    saved_states(tmp_path, saves[0], saves, 100, lambda step: step / steps_per_epoch, strategy)
    check_last_saves(tmp_path, saves, saves[0], refused)


@pytest.mark.parametrize("saves, strategies, resumed_from, save_steps, refused", [
    # --save_steps 2: launch 1 stopped (--stop_time_hours) at 3 and saved 2 and 3; launch 2 resumed from 3 and saved 4
    # and 5; the rotation kept the best, 2: 3, lost between 2 and 4, is where launch 2 resumed
    ((2, 4, 5), ("steps",) * 3, 3, 2, True),
    ((2, 4, 5), ("steps",) * 3, 4, 2, False),  # resumed from a kept save
    ((100, 200, 300), ("steps",) * 3, 150, 100, True),  # stopped at 150, resumed, saved on the interval again
    # launch 1 saved every 10 steps, launch 2 at epoch ends: the strategies cannot tell, the gaps do (100 >> 30)
    ((10, 100, 130), ("steps", "epoch", "epoch"), None, 10, True),
    # launch 1 saved 100 (steps, the best), launch 2 resumed from it saving at epoch ends (200) and at its end (210):
    # launch 2's strategy tells from 100 on (the gaps would refuse the best: 100 >> 10)
    ((100, 200, 210), ("steps", "epoch", "epoch"), 100, 100, False),
])
def test_a_save_lost_where_a_later_launch_resumed_or_under_another_strategy_is_told(
        tmp_path, saves, strategies, resumed_from, save_steps, refused):
    launches = [{"command": "train.py", "resumed_from": None}]
    if resumed_from is not None:
        launches.append({"command": "train.py", "resumed_from": str(tmp_path / f"checkpoint-{resumed_from}")})
    for step, strategy in zip(saves, strategies):  # each launch records its own strategy
        saved_states(tmp_path, saves[0], [step], save_steps, lambda step: step / 100, strategy, launches)
    check_last_saves(tmp_path, saves, saves[0], refused)


def test_average_of_two_checkpoints_is_the_mean_of_their_tensors_and_loads(run_dir, tmp_path):
    run, models = run_dir
    output = average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], tmp_path / "averaged")

    first = load_file(run / "checkpoint-10" / "model.safetensors")
    second = load_file(run / "checkpoint-100" / "model.safetensors")
    averaged = load_file(output / "model.safetensors")
    assert set(averaged) == set(first)
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, (first[name] + second[name]) / 2, rtol=0, atol=1e-7)

    # Loadable through the Auto classes; every parameter (tied ones included) is the mean of the two models'.
    model = AutoModelForSeq2SeqLM.from_pretrained(output, trust_remote_code=True)
    expected = {name: (p10 + p100) / 2 for (name, p10), (_, p100) in zip(
        models[10].state_dict().items(), models[100].state_dict().items()
    )}
    for name, parameter in model.state_dict().items():
        torch.testing.assert_close(parameter, expected[name], rtol=0, atol=1e-6)
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()

    # Model files come along, training state does not.
    names = {path.name for path in output.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "modeling_annotated_transformer.py",
            "configuration_annotated_transformer.py"} <= names
    assert names.isdisjoint({"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin", "trainer_state.json",
                             "optimizer.bin", "pytorch_model_fsdp.bin", "optimizer_0"})
    uploaded = hub_upload_files(run / "checkpoint-10")  # nor does a checkpoint's upload to the Hub
    assert "model.safetensors" in uploaded
    assert [name for name in uploaded if not name.endswith((".json", ".safetensors", ".py", ".sha256"))] == []


def test_average_state_dicts_keeps_dtypes_and_non_float_tensors():
    a = {"w": torch.tensor([1.0, 2.0], dtype=torch.float16), "steps": torch.tensor([3]), "b": torch.tensor([0.25])}
    b = {"w": torch.tensor([3.0, 5.0], dtype=torch.float16), "steps": torch.tensor([7]), "b": torch.tensor([0.75])}
    averaged = average_state_dicts([a, b])
    assert averaged["w"].dtype == torch.float16 and averaged["w"].tolist() == [2.0, 3.5]
    assert averaged["b"].tolist() == [0.5]
    assert averaged["steps"].tolist() == [7]  # integer buffers come from the last checkpoint


def test_mismatched_checkpoints_are_refused(tmp_path):
    with pytest.raises(ValueError, match="different tensors"):
        average_state_dicts([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}])
    with pytest.raises(ValueError, match="different shapes"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match=r"'w' has different dtypes across checkpoints \(\['torch.bfloat16', "
                                         r"'torch.float32'\]\): convert"):  # the mean took the first one's dtype
        average_state_dicts([{"w": torch.zeros(2, dtype=torch.bfloat16)}, {"w": torch.zeros(2)}])
    (tmp_path / "config.json").write_text("{}")  # a config, but no weights
    with pytest.raises(ValueError, match="holds no model.safetensors"):
        average_checkpoints([tmp_path], tmp_path / "out")


def test_only_the_model_files_of_the_newest_checkpoint_come_along(run_dir, tmp_path):
    """A checkpoint's own evaluations (eval-*/, its card) and hidden files belong to it, not to the average; a target
    tokenizer comes."""
    run, _ = run_dir
    older, newest = tmp_path / "run" / "checkpoint-100", tmp_path / "run" / "checkpoint-200"
    for source, checkpoint in ((run / "checkpoint-10", older), (run / "checkpoint-100", newest)):
        shutil.copytree(source, checkpoint)  # with a separate target tokenizer (here the same one again)
        shutil.copytree(source, checkpoint / "target_tokenizer", ignore=lambda *_: ["model.safetensors"])
    (newest / "README.md").write_text("# checkpoint-200\n## Evaluation: val, beam 1\n| 1014 | 0.01 |\n")
    (newest / "eval-val").mkdir()
    (newest / "eval-val" / "results.json").write_text('{"bleu": 0.01}')
    (newest / ".trainer_state.json.x1y2.writing").write_text("{")  # a rewrite's temporary file, left by a kill
    output = average_checkpoints([older, newest], tmp_path / "averaged")
    names = {path.name for path in output.iterdir()}
    assert "eval-val" not in names and "README.md" not in names  # the run (tmp_path/run) has no card
    assert not [name for name in names if name.startswith(".")]
    assert (output / "target_tokenizer" / "tokenizer.json").read_bytes() == (newest / "tokenizer.json").read_bytes()


def test_a_folder_holding_files_a_run_folder_or_another_runs_checkpoint_is_refused(run_dir, tokenizer, tmp_path):
    run, _ = run_dir
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("my notes")
    with pytest.raises(ValueError, match=r"notes already holds files \(README.md\), which the averaged model's would "
                                         r"replace; choose a new or empty folder"):
        average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], notes)
    assert [path.name for path in notes.iterdir()] == ["README.md"] and (notes / "README.md").read_text() == "my notes"
    with pytest.raises(ValueError, match=r"is a run folder \(it holds checkpoint-\* folders\), not a checkpoint"):
        average_checkpoints([run / "checkpoint-100", run], tmp_path / "out")
    # two runs of one architecture and tokenizer: their training logs part ways
    for name, losses in (("run-a", [3.1, 2.5]), ("run-b", [3.1, 2.7, 2.2])):
        save_checkpoint(tmp_path / name, 1, tokenizer)
        state = {"global_step": len(losses), "log_history": [{"step": i, "loss": v} for i, v in enumerate(losses)]}
        (tmp_path / name / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"run-a and .*run-b come from different runs \(their training logs differ\)"):
        average_checkpoints([tmp_path / "run-a", tmp_path / "run-b"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "run-a" / "trainer_state.json").write_text(json.dumps(  # the same run, one save earlier: accepted
        {"global_step": 2, "log_history": [{"step": 0, "loss": 3.1}, {"step": 1, "loss": 2.7}]}))
    assert average_checkpoints([tmp_path / "run-a", tmp_path / "run-b"], tmp_path / "out").is_dir()


@pytest.mark.parametrize("damage", ["not JSON", "a JSON list", "missing"])
def test_a_damaged_config_in_a_checkpoint_is_refused_before_anything_is_written(run_dir, tmp_path, damage):
    """The newest checkpoint's config.json is copied into the average: damaged, the average would not load."""
    run, _ = run_dir
    damaged = tmp_path / "checkpoint-200"
    shutil.copytree(run / "checkpoint-100", damaged)
    if damage == "missing":
        (damaged / "config.json").unlink()
    else:
        (damaged / "config.json").write_text('{"d_model": 3' if damage == "not JSON" else "[1, 2]")
    message = {"not JSON": "is not valid JSON", "a JSON list": "holds no JSON object", "missing": "is missing"}[damage]
    with pytest.raises(ValueError, match=rf"checkpoint-200/config.json {message}"):
        average_checkpoints([run / "checkpoint-100", damaged], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_checkpoints_of_another_model_or_tokenizer_are_refused(run_dir, tokenizer, tmp_path):
    """Equal tensor names and shapes are not enough: a pre-norm model has the same layers plus a final LayerNorm per
    stack, and here those are the only difference the averaging would notice, too late; two tokenizers of one size
    give every weight the same shape but other meanings."""
    run, _ = run_dir
    save_checkpoint(tmp_path / "pre-norm", 5, tokenizer, norm_first=True)
    with pytest.raises(ValueError, match=r"different models \(norm_first False in .*checkpoint-10, True in .*pre-norm"):
        average_checkpoints([run / "checkpoint-10", tmp_path / "pre-norm"], tmp_path / "out")
    other = train_tokenizer(["a b c d", "e f g h i j"] * 10, vocab_size=len(tokenizer))
    assert len(other) == len(tokenizer)
    save_checkpoint(tmp_path / "other-tokenizer", 5, other)
    with pytest.raises(ValueError, match=r"checkpoint-10 and .*other-tokenizer have different tokenizers"):
        average_checkpoints([run / "checkpoint-10", tmp_path / "other-tokenizer"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_given_twice_or_a_file_as_output_is_refused(run_dir, tmp_path):
    run, _ = run_dir
    with pytest.raises(ValueError, match=r"checkpoint\(s\) .*checkpoint-10 given more than once"):
        twice = [run / "checkpoint-10", run / "checkpoint-100", run / "." / "checkpoint-10"]
        average_checkpoints(twice, tmp_path / "x")
    (tmp_path / "file").write_text("keep")
    with pytest.raises(ValueError, match=r"the output directory .*file is a file"):
        average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], tmp_path / "file")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"] and (tmp_path / "file").read_text() == "keep"
    # inside a checkpoint, the average would go when the Trainer rotates the run's checkpoints
    for inside in (run / "checkpoint-10" / "avg", run / "checkpoint-9" / "a" / "b"):
        with pytest.raises(ValueError, match=rf"the output directory {inside} is inside the checkpoint .*"
                                             rf"{inside.relative_to(run).parts[0]}, which the Trainer deletes"):
            average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], inside)
        assert not inside.exists()
    alone = tmp_path / "models" / "checkpoint-7" / "avg"  # in a model folder merely named so: no run rotates it
    average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], alone)
    assert (alone / "model.safetensors").is_file()


def test_averaging_into_a_folder_holding_a_model_is_refused_and_changes_nothing(run_dir):
    run, _ = run_dir
    (run / "config.json").write_text("{}")  # the run folder: the best model (and its card) live here
    (run / "model.safetensors").write_bytes(b"the best model")
    try:
        with pytest.raises(ValueError, match="already holds a model"):
            average_checkpoints([run / "checkpoint-10", run / "checkpoint-100"], run)
        assert (run / "model.safetensors").read_bytes() == b"the best model"
    finally:
        (run / "config.json").unlink()
        (run / "model.safetensors").unlink()


def test_a_run_card_with_invalid_metadata_does_not_stop_the_averaging(tokenizer, tmp_path, caplog):
    run = tmp_path / "run"
    for step in (1, 2):
        save_checkpoint(run / f"checkpoint-{step}", step, tokenizer)
    (run / "README.md").write_text("---\nlicense: [apache-2.0\n---\n# a hand-edited card\n")
    output = average_checkpoints(last_checkpoints(run, 2), tmp_path / "averaged")
    assert (output / "model.safetensors").is_file() and not (output / "README.md").exists()
    assert "The averaged model gets no model card" in caplog.text and "is not valid YAML" in caplog.text


def test_a_truncated_checkpoint_is_named_when_averaging(run_dir, tmp_path):
    run, _ = run_dir
    broken = tmp_path / "checkpoint-7"
    broken.mkdir()
    weights = (run / "checkpoint-9" / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(weights[:-10])
    shutil.copy(run / "checkpoint-9" / "config.json", broken)
    with pytest.raises(ValueError, match=r"checkpoint-7/model.safetensors is not a complete safetensors file.*trunc"):
        average_checkpoints([run / "checkpoint-9", broken], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_script_averages_the_last_n(run_dir, tmp_path, monkeypatch, capsys):
    run, _ = run_dir
    output = tmp_path / "avg"
    monkeypatch.setattr(sys, "argv", ["average_checkpoints.py", str(run), "--last", "3", "--output_dir", str(output)])
    runpy.run_path(str(REPO_ROOT / "scripts" / "average_checkpoints.py"), run_name="__main__")
    assert "Averaged 3 checkpoints" in capsys.readouterr().out
    tensors = [load_file(run / f"checkpoint-{step}" / "model.safetensors") for step in (9, 10, 100)]
    averaged = load_file(output / "model.safetensors")
    name = "model.shared.weight"
    torch.testing.assert_close(averaged[name], sum(t[name] for t in tensors) / 3, rtol=0, atol=1e-7)
    assert json.loads((output / "averaged_from.json").read_text())["checkpoints"][-1].endswith("checkpoint-100")


@pytest.mark.parametrize("argv, message", [
    (["{run}"], "with run_dir, say how many checkpoints to average: --last N"),
    (["--checkpoints", "{run}/checkpoint-9", "{run}/checkpoint-10", "--last", "1"], "with --checkpoints, list"),
    (["{run}", "--checkpoints", "{run}/checkpoint-9"], "give either run_dir .* or --checkpoints, not both"),
])
def test_script_needs_a_count_or_a_list(run_dir, tmp_path, monkeypatch, capsys, argv, message):
    run, _ = run_dir
    argv = [arg.format(run=run) for arg in argv]
    monkeypatch.setattr(sys, "argv", ["average_checkpoints.py", *argv, "--output_dir", str(tmp_path / "x")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "scripts" / "average_checkpoints.py"), run_name="__main__")
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "x").exists()
