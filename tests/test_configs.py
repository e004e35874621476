"""Every training recipe in configs/ parses as scripts/train.py reads it and builds its model (without training)."""

from pathlib import Path

import pytest
import torch

from modeling import AnnotatedTransformerForConditionalGeneration
from modeling.training.argument_checks import validate_arguments
from modeling.training.argument_parsing import parse_arguments
from modeling.training.arguments import ConfigurationError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RECIPES = sorted(path for path in CONFIGS.glob("*.yaml") if not path.name.startswith("accelerate_"))


def test_the_recipes_are_all_here():
    assert {path.name for path in RECIPES} >= {
        "copy_tiny.yaml", "multi30k_de_en.yaml", "multi30k_en_de.yaml", "multi30k_de_en_cpu.yaml",
        "multi30k_en_de_cpu.yaml",
    }


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.stem)
def test_recipe_parses_and_builds_its_model(recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipes name relative output folders
    corpus = ["--data_dir", str(tmp_path)] if recipe.stem.startswith("multi30k") else []  # given on the command line
    model_args, data_args, training_args, config_path = parse_arguments(["--config", str(recipe), *corpus])
    assert config_path == recipe
    if recipe.stem.startswith("multi30k"):
        source, target = recipe.stem.split("_")[1:3]
        assert (data_args.source_lang, data_args.target_lang) == (source, target)
        assert training_args.output_dir.startswith("outputs/multi30k-" + f"{source}-{target}")
    with torch.device("meta"):  # the full size without allocating it
        model = AnnotatedTransformerForConditionalGeneration(
            validate_arguments(model_args, data_args, training_args)
        )
    assert model.config.vocab_size == data_args.vocab_size
    if corpus:  # without --data_dir a translation recipe would have trained the copy task
        with pytest.raises(ConfigurationError, match="the synthetic copy task has no languages"):
            validate_arguments(*parse_arguments(["--config", str(recipe)])[:3])
    assert model.num_parameters() > 0
