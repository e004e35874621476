"""scripts/translate.py and `modeling.translation`: a saved model folder translates through the Auto classes."""

import io
import runpy
import sys
from pathlib import Path

import pytest
import torch

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling.tokenization import train_tokenizer
from modeling.translation import load_translation_model, translate

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["3 1 4 1 5", "9 2 6", "5 3 5 8 9 7 9 3"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A folder as scripts/train.py writes it (model with custom code, generation config, tokenizer), untrained."""
    directory = tmp_path_factory.mktemp("model")
    tokenizer = train_tokenizer([" ".join(str(i) for i in range(10))] * 20, vocab_size=270)
    torch.manual_seed(0)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=32,
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    model.generation_config.max_length = 12
    model.generation_config.num_beams = 2
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run_script(monkeypatch, *argv, stdin: str | None = None):
    monkeypatch.setattr(sys, "argv", ["translate.py", *map(str, argv)])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    runpy.run_path(str(REPO_ROOT / "scripts" / "translate.py"), run_name="__main__")


def test_translations_are_the_models_generations_in_input_order(model_dir):
    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device="cpu")
    assert type(model).__name__ == "AnnotatedTransformerForConditionalGeneration"
    batched = translate(SOURCES, model, tokenizer, target_tokenizer, num_beams=3, batch_size=2)
    assert len(batched) == len(SOURCES)
    for source, translation in zip(SOURCES, batched):
        generated = model.generate(**tokenizer([source], return_tensors="pt"), num_beams=3)
        assert translation == tokenizer.decode(generated[0], skip_special_tokens=True).strip()
    assert translate(SOURCES, model, tokenizer, batch_size=1, num_beams=3) == batched


def test_generation_options_reach_generate(model_dir):
    model, tokenizer, _ = load_translation_model(model_dir, device="cpu")
    short = translate(SOURCES[:1], model, tokenizer, max_new_tokens=2, num_beams=1)
    generated = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), max_new_tokens=2, num_beams=1)
    assert generated.shape[1] <= 3  # the decoder start token and at most 2 new tokens
    assert short == [tokenizer.decode(generated[0], skip_special_tokens=True).strip()]
    default = translate(SOURCES, model, tokenizer)  # the folder's generation config: 2 beams, max_length 12
    expected = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), num_beams=2, max_length=12)
    assert default[0] == tokenizer.decode(expected[0], skip_special_tokens=True).strip()


def test_script_translates_arguments_files_and_stdin(model_dir, tmp_path, monkeypatch, capsys):
    model, tokenizer, _ = load_translation_model(model_dir, device="cpu")
    expected = translate(SOURCES, model, tokenizer, num_beams=2)

    run_script(monkeypatch, model_dir, *SOURCES, "--num_beams", "2")
    assert capsys.readouterr().out.splitlines() == expected

    source_file, output_file = tmp_path / "source.txt", tmp_path / "hypotheses.txt"
    source_file.write_text("\n".join(SOURCES) + "\n")
    run_script(monkeypatch, model_dir, "--input", source_file, "--output", output_file, "--num_beams", "2",
               "--batch_size", "2")
    assert output_file.read_text().splitlines() == expected

    run_script(monkeypatch, model_dir, "--num_beams", "2", stdin="\n".join(SOURCES))
    assert capsys.readouterr().out.splitlines() == expected


def test_script_reports_a_missing_or_wrong_folder(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="holds no config.json"):
        run_script(monkeypatch, tmp_path, "1 2 3")
    with pytest.raises(SystemExit, match="--input .*missing.txt does not exist"):
        run_script(monkeypatch, tmp_path, "--input", tmp_path / "missing.txt")
