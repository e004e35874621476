"""model_card.md: the card of the project's reference model (the de->en CPU recipe), rendered from the template every
trained model's card uses and from its run's JSON."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from .formats import (
    CLOSE,
    REPOSITORY,
    USERS_DATA_DIR,
    Benchmarks,
    FiguresError,
    render_table,
)
from .recipes import CPU_RECIPES, reference_run

# --- the reference model's card ---------------------------------------------------------------------------------


_RESULTS_TABLE = re.compile(r"^\| split \| sentences \| sacreBLEU \|.*\n(?:\|.*\n)*", re.MULTILINE)


def reference_model_card_context(root: str | Path = REPOSITORY) -> dict:
    """Every field of `model_card.md`'s template for the reference model, the averaged de->en CPU recipe, without
    its model folder: the recipe's config (as `scripts/train.py` parses it) gives the architecture and training,
    `benchmarks/results-recipes-cpu.json` the run (steps, time, hardware, data, scores and their signatures).
    `model_card_context` builds it, as for any trained model, from stand-ins for the finished run."""
    import torch

    from modeling import AnnotatedTransformerForConditionalGeneration
    from modeling.common.hardware import describe_run
    from modeling.inference import model_card as card
    from modeling.training.argument_checks import model_config
    from modeling.training.argument_parsing import parse_arguments
    from modeling.training.schedule import schedule_description

    root = Path(root)
    benchmarks = Benchmarks(root)
    run, data = reference_run(benchmarks), benchmarks(CPU_RECIPES)["data"]
    config_path = root / run["recipe"]
    model_args, data_args, training_args, _ = parse_arguments(
        ["--config", str(config_path), "--data_dir", USERS_DATA_DIR]
    )
    # the folder the card describes: the one the repository ships, where the run made it, else the averaged model's
    output_dir = run.get("model_folder") or run["commands"][1].split("--output_dir ")[1].split()[0]
    training_args.output_dir = output_dir
    with torch.device("meta"):  # the parameter count, without allocating the weights
        model = AnnotatedTransformerForConditionalGeneration(model_config(model_args, data_args))
    trainer = SimpleNamespace(
        model=model, args=SimpleNamespace(device=torch.device("cpu")), precision="fp32",
        run_description=describe_run(run["processes"], "cpu", "NO", "fp32", run["threads"]),
        state=SimpleNamespace(global_step=run["steps"], epoch=run["epochs"], max_steps=run["steps"],
                              best_model_checkpoint=None),
        processing_class=range(data_args.vocab_size),  # len(): the vocabulary the tokenizer is trained to
    )
    splits = {split: {"kept": pairs - data["removed_empty"][split] - data["removed_too_long"][split],
                      "in_corpus": pairs, "total": pairs, "empty": data["removed_empty"][split],
                      "too_long": data["removed_too_long"][split]}
              for split, pairs in data["pairs"].items()}
    results = [{"split": scores["split"], "sentences": scores["sentences"], "bleu": scores["bleu"],
                "chrf": scores["chrf"], "exact_match": "n/a"} for scores in (run["validation"], run["test"])]
    context = card.model_card_context(
        trainer, model_args, data_args, training_args, {"test": [{"source": "Ein Hund läuft über die Wiese."}]},
        splits, results, run["signatures"], config_path=config_path, command="\n".join(run["commands"]),
        schedule=schedule_description(training_args.lr_scheduler_type, training_args.learning_rate,
                                      training_args.get_warmup_steps(run["steps"])),
        training_seconds=run["training_seconds"],
    )
    source, target = run["source_lang"], run["target_lang"]
    context["card_data"] = card.card_data(
        context["model_name"], results, source_lang=source, target_lang=target, dataset_id="multi30k",
        dataset_name="multi30k",
    )
    context["hyperparameters"] = [
        (name, f"{run['hardware']}: {trainer.run_description}" if name == "hardware" else value)
        for name, value in context["hyperparameters"]
    ]
    context.update(
        num_beams=run["num_beams"],
        best_checkpoint_note=f" ({run['checkpoint']}, §6.1)",
        config_file=run["recipe"],
        data_description=(
            f"{data['corpus']}, {source} -> {target}: the training split for training, validation for every choice "
            "(checkpoints, averaging, beam), test_2016_flickr scored once."
        ),
        intended_use=(
            "The reference model of the annotated-transformer-hf project: the paper's post-norm 6+6 Transformer at "
            "d_model 128, trained on 2 CPU cores. Research on and teaching of the Transformer; translation of short "
            "image captions like Multi30k's."
        ),
    )
    return context


def reference_model_card(root: str | Path = REPOSITORY) -> str:
    """The reference model's card (model_card.md): the template rendered with `reference_model_card_context`, its
    results table as the marker block `model-card`, checked like every other block."""
    from modeling.inference.model_card import TEMPLATE_PATH, render_model_card

    text = render_model_card(reference_model_card_context(root))
    block = f"<!-- figures: model-card -->\n{render_table('model-card', root)}{CLOSE}\n"
    text, found = _RESULTS_TABLE.subn(lambda _: block, text, count=1)
    if not found:
        raise FiguresError(f"the model card template {TEMPLATE_PATH} has no results table "
                           "('| split | sentences | sacreBLEU | ...') for the block 'model-card' to replace")
    return text


