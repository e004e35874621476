"""scripts/plot_attention.py and `modeling.inference.attention_plots`: one figure per (kind, layer), one panel per head."""

import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration  # noqa: E402
from modeling.inference.attention_plots import (  # noqa: E402
    attention_figures,
    load_attention_model,
    sentence_attention,
    token_labels,
)
from modeling.tokenization import train_tokenizer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = ["Ein Hund läuft über die Wiese.", "A dog runs across the meadow.", "Zwei Männer spielen Fußball."] * 10
SOURCE, TARGET = "Ein Hund läuft über die Wiese.", "A dog runs across the meadow."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A folder as scripts/train.py writes it: an untrained tiny model (3 encoder layers, 2 decoder layers, 4 heads)
    with its tokenizer."""
    directory = tmp_path_factory.mktemp("model")
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    torch.manual_seed(0)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), d_model=32, encoder_layers=3, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=32,
    )
    AnnotatedTransformerForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run_script(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["plot_attention.py", *map(str, argv)])
    runpy.run_path(str(REPO_ROOT / "scripts" / "plot_attention.py"), run_name="__main__")


def test_one_panel_per_head_and_rows_are_distributions(model_dir):
    model, tokenizer, target_tokenizer = load_attention_model(model_dir)
    attention = sentence_attention(model, tokenizer, SOURCE, TARGET, target_tokenizer)
    assert attention.source_tokens[-1] == "</s>" and attention.target_tokens[0] == "<s>"
    assert "".join(attention.target_tokens[1:]).replace("␣", "") == TARGET.replace(" ", "")

    figures = attention_figures(attention, model.config, layers=[0, 1], heads=[0, 2, 3])
    assert sorted(figures) == [(kind, layer) for kind in ("cross", "decoder", "encoder") for layer in (0, 1)]
    for (kind, layer), figure in figures.items():
        assert len(figure.axes) == 3  # the chosen heads
        rows, columns = attention.labels(kind)
        for axes, head in zip(figure.axes, [0, 2, 3]):
            shown = torch.as_tensor(axes.images[0].get_array().data)
            assert shown.shape == (len(rows), len(columns))
            torch.testing.assert_close(shown.sum(-1), torch.ones(len(rows)))
            torch.testing.assert_close(shown, attention.weights[kind][layer][head])
            assert [label.get_text() for label in axes.get_xticklabels()] == columns
            assert [label.get_text() for label in axes.get_yticklabels()] == rows
        if kind == "decoder":  # masked: query i sees keys <= i only
            assert torch.all(torch.triu(shown, diagonal=1) == 0)

    everything = attention_figures(attention, model.config)  # all layers of each stack, all heads
    assert len(everything) == 3 + 2 + 2 and all(len(figure.axes) == 4 for figure in everything.values())


def test_the_default_translation_is_the_generation_configs_greedy_one(model_dir):
    """Without a target or max_new_tokens the plotted translation is generate()'s under the saved generation config
    (its max_new_tokens, not transformers' fallback max_length of 20)."""
    model, tokenizer, target_tokenizer = load_attention_model(model_dir)
    model.generation_config.max_new_tokens = 30
    inputs = tokenizer([SOURCE], return_tensors="pt")
    inputs.pop("token_type_ids", None)
    expected = model.generate(**inputs, num_beams=1, do_sample=False)[0, 1:].tolist()
    assert len(expected) > 20  # untrained: no </s>, so the config's length decides
    attention = sentence_attention(model, tokenizer, SOURCE, None, target_tokenizer)
    assert len(attention.target_tokens) == 1 + len(expected) - (expected[-1] == model.config.eos_token_id)


def test_byte_pieces_of_a_character_are_labelled_by_their_bytes(model_dir):
    _, tokenizer, _ = load_attention_model(model_dir)
    ids = tokenizer("läuft 🙂", add_special_tokens=False)["input_ids"]
    labels = token_labels(tokenizer, ids)
    assert len(labels) == len(ids) and not any("\ufffd" in label for label in labels)


def test_script_writes_one_png_per_kind_and_layer(model_dir, tmp_path, monkeypatch, capsys):
    output_dir = tmp_path / "plots"
    run_script(monkeypatch, model_dir, SOURCE, "--layers", "0", "1", "--heads", "1", "3", "--output_dir", output_dir,
               "--max_new_tokens", "6")
    written = sorted(path.name for path in output_dir.iterdir())
    assert written == sorted(f"{kind}_attention_layer{layer}.png" for kind in ("encoder", "decoder", "cross")
                             for layer in (0, 1))
    assert capsys.readouterr().out.split() == [str(output_dir / name) for name in [
        "encoder_attention_layer0.png", "encoder_attention_layer1.png", "decoder_attention_layer0.png",
        "decoder_attention_layer1.png", "cross_attention_layer0.png", "cross_attention_layer1.png"]]
    assert all((output_dir / name).read_bytes().startswith(b"\x89PNG") for name in written)

    run_script(monkeypatch, model_dir, SOURCE, "--target", TARGET, "--kinds", "encoder", "--layers", "2",
               "--output_dir", tmp_path / "encoder_only")
    assert [path.name for path in (tmp_path / "encoder_only").iterdir()] == ["encoder_attention_layer2.png"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--layers", "3"], "layer 3 is out of range for encoder attention: the encoder has 3 layers (0 to 2)"),
        (["--layers", "2"], "layer 2 is out of range for decoder attention: the decoder has 2 layers (0 to 1)"),
        (["--layers", "-1"], "layer -1 is out of range"),
        (["--heads", "0", "4"], "head 4 is out of range for encoder attention: the encoder has 4 heads (0 to 3)"),
        (["--target", " "], "the target sentence ' ' is empty"),
        (["--max_new_tokens", "0"], "argument --max_new_tokens: must be >= 1, got 0"),
    ],
)
def test_bad_choices_are_one_line_errors_and_write_nothing(model_dir, tmp_path, monkeypatch, capsys, arguments,
                                                           message):
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, SOURCE, *arguments, "--output_dir", tmp_path / "plots")
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"plot_attention.py: error: {message}") and len(error.splitlines()) == 1
    assert not (tmp_path / "plots").exists()


def test_bad_inputs_are_one_line_errors_and_write_nothing(model_dir, tmp_path, monkeypatch, capsys):
    empty_source = (model_dir, "  ", "the source sentence '  ' is empty")
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (no_weights / name).write_bytes((model_dir / name).read_bytes())
    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    for path in model_dir.iterdir():
        if not path.name.startswith("tokenizer"):
            (no_tokenizer / path.name).write_bytes(path.read_bytes())
    wrong_type = tmp_path / "wrong_type"  # a StrictDataclassFieldValidationError traceback before
    shutil.copytree(model_dir, wrong_type)
    config = json.loads((model_dir / "config.json").read_text())
    (wrong_type / "config.json").write_text(json.dumps({**config, "d_model": str(config["d_model"])}))
    for model, source, message in [empty_source, (no_weights, SOURCE, str(no_weights)),
                                   (no_tokenizer, SOURCE, "tokenizer"),
                                   (wrong_type, SOURCE, "its config.json does not describe a valid model")]:
        with pytest.raises(SystemExit) as exit_info:
            run_script(monkeypatch, model, source, "--output_dir", tmp_path / "plots")
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("plot_attention.py: error: ") and message in error and len(error.splitlines()) == 1
        assert not (tmp_path / "plots").exists()


def test_an_output_dir_that_is_a_file_is_refused_before_the_model_loads(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("modeling.inference.attention_plots.load_translation_model", lambda *args, **kwargs: 1 / 0)
    (tmp_path / "plots").write_text("keep")
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, SOURCE, "--output_dir", tmp_path / "plots")
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error == f"plot_attention.py: error: --output_dir {tmp_path / 'plots'} is a file; give a folder"
    assert (tmp_path / "plots").read_text() == "keep"


def test_missing_matplotlib_says_what_to_install(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, SOURCE, "--output_dir", tmp_path / "plots")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "plot_attention.py: error: matplotlib is not installed: pip install matplotlib (or pip install -e '.[plot]')"
    )
    assert not (tmp_path / "plots").exists()
