"""The model card (`README.md` of a trained model folder), rendered from the template `modeling/inference/model_card.md`.

The template is Jinja2 (as `huggingface_hub.ModelCard.from_template` uses) rendered strictly: a field missing from
the context is an error, not an empty string. The metadata header comes from `huggingface_hub.ModelCardData`, so
the Hub reads the languages, license, tags and the results table (`model-index`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..common.file_writes import replace_text, writing_pattern
from ..common.hardware import device_name

logger = logging.getLogger(__name__)

TEMPLATE_PATH = Path(__file__).resolve().parent / "model_card.md"
MODEL_CARD_NAME = "README.md"  # the card's file in a model folder (and on the Hub)
CARD_WRITING_PATTERN = writing_pattern(MODEL_CARD_NAME)  # the file a card is written through (replace_text)

EVALUATION_HEADING = "## Evaluation: "  # then "<test set>, beam <n>": a section record_evaluation writes

PAPER_TAGS = ["translation", "transformer", "attention-is-all-you-need", "annotated-transformer", "custom_code"]


def card_data(
    model_name: str,
    results: Sequence[Mapping],
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    dataset_id: str | None = None,
    dataset_name: str | None = None,
    hub_dataset: str | None = None,
    license: str = "apache-2.0",
) -> ModelCardData:
    """The Hub metadata: languages, license, tags, the Hub dataset trained on (`datasets`, which the Hub links: only a
    Hub dataset id belongs there, not a local folder or the embedded synthetic task) and one `model-index` entry per
    result and metric (`dataset_id` names the data there, whatever it is)."""
    task_name = _task_name(source_lang, target_lang)
    dataset_type = dataset_id or "custom"
    eval_results = [
        result for row in results
        for result in _eval_results(row, task_name, dataset_type, dataset_name or dataset_type)
    ]
    languages = [language for language in (source_lang, target_lang) if language]
    return ModelCardData(
        model_name=model_name,
        language=languages or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(PAPER_TAGS),
        datasets=[hub_dataset] if hub_dataset else None,
        metrics=["bleu", "chrf"],
        eval_results=eval_results or None,
    )


def _local(corpus: str | os.PathLike) -> bool:
    """Whether a corpus name is a local folder or file: one here, or an absolute path (as evaluate.py records one,
    which may have moved since); anything else is a Hub dataset id."""
    return Path(corpus).exists() or Path(corpus).is_absolute()


def hub_dataset_id(dataset_name: str | None) -> str | None:
    """`--dataset_name` as the card's Hub `datasets` entry: a Hub id ("wmt14", "bentrevett/multi30k"), or None for
    no name or a local dataset folder or script (which the Hub could not link)."""
    return None if not dataset_name or _local(dataset_name) else dataset_name


def corpus_id(corpus: str | os.PathLike) -> str:
    """How a card names a corpus (`--data_dir` or `--dataset_name`), in training and in evaluation: a local one by
    its folder's name, a Hub dataset by its id ("bentrevett/multi30k")."""
    return Path(corpus).resolve().name if _local(corpus) else str(corpus)


def _task_name(source_lang: str | None, target_lang: str | None) -> str:
    return f"Translation {source_lang}-{target_lang}" if source_lang and target_lang else "Sequence transduction"


def _eval_results(
    row: Mapping, task_name: str, dataset_type: str, dataset_name: str, metric_config: str | None = None
) -> list[EvalResult]:
    """`model-index` entries for one scored split (`row`: its split, bleu and chrf): sacreBLEU and chrF."""
    return [
        EvalResult(
            task_type="translation",
            task_name=task_name,
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_split=row["split"],
            metric_type=metric_type,
            metric_name=metric_name,
            metric_config=metric_config,
            metric_value=row[metric_type],
        )
        for metric_type, metric_name in (("bleu", "sacreBLEU"), ("chrf", "chrF"))
    ]


def render_model_card(context: Mapping, template_path: str | os.PathLike | None = None) -> str:
    """Fill the template with `context` (which must provide every field it uses; `card_data` may be a
    `ModelCardData`) and check that the result parses as a Hub model card."""
    template_path = Path(template_path or TEMPLATE_PATH)
    if not template_path.is_file():
        raise FileNotFoundError(f"model card template {template_path} not found")
    context = dict(context)
    if isinstance(context.get("card_data"), ModelCardData):
        context["card_data"] = context["card_data"].to_yaml()
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
    )
    try:
        content = environment.from_string(template_path.read_text(encoding="utf-8")).render(**context)
    except jinja2.UndefinedError as error:
        raise ValueError(f"the model card template {template_path} needs a value the context lacks: {error}") from None
    ModelCard(content, ignore_metadata_errors=False)  # raises if the metadata header is not valid YAML
    return content


def write_model_card(
    output_dir: str | os.PathLike, context: Mapping, template_path: str | os.PathLike | None = None
) -> Path:
    """Render the card and write it as `output_dir/README.md`."""
    path = Path(output_dir) / MODEL_CARD_NAME
    replace_text(path, render_model_card(context, template_path))
    return path


def best_checkpoint_note(best: str, output_dir: Path, metric: str) -> str:
    """The note on the saved model's scores: the best checkpoint, by its folder name where it is this run's, by its
    path where it is not (a run resumed from another folder's checkpoint may keep that folder's best)."""
    shown = Path(best).name if Path(best).resolve().parent == Path(output_dir).resolve() else best
    return f" (the best on validation {metric}: {shown})"


def usage_example(model_id: str, source: str) -> dict[str, str]:
    """The "How to use" fields: the model's id, as a Python string and as one shell word, and a source sentence as a
    Python string literal (quotes, backslashes and newlines escaped) and as one shell word (no `$` expansion)."""
    return {
        "model_id": model_id, "model_id_shell": shlex.quote(model_id),
        "example_source_python": json.dumps(source, ensure_ascii=False), "example_source_shell": shlex.quote(source),
    }


def model_card_context(
    trainer, model_args, data_args, training_args, corpus, filter_report, results, signatures, *, config_path,
    command, schedule: str, training_seconds: float | None = None,
) -> dict:
    """Every field `model_card.md` uses, from a finished training run: the architecture and hyperparameters as
    trained (with the hardware and `training_seconds`, across resumptions), the learning-rate `schedule` as the
    training side describes it (`modeling.training.schedule.schedule_description`), the data and its filtering, the
    results with their sacreBLEU signatures, and the exact command."""
    config = trainer.model.config
    output_dir = Path(training_args.output_dir)
    model_name = training_args.hub_model_id or output_dir.name
    task = data_args.synthetic_task
    synthetic = task is not None
    dataset_id = (
        f"synthetic-{task}" if synthetic
        else corpus_id(data_args.dataset_name or data_args.data_dir)
    )
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    parameters = trainer.model.num_parameters()
    if config.norm_first:
        norm = "pre-norm: x + Sublayer(LayerNorm(x))"
    else:
        norm = "post-norm: LayerNorm(x + Sublayer(x)) (§3.1)"
    architecture = [
        ("preset", model_args.preset),
        ("d_model", config.d_model),
        ("layers (encoder + decoder)", f"{config.encoder_layers} + {config.decoder_layers}"),
        ("attention heads", f"{config.encoder_attention_heads} (encoder), {config.decoder_attention_heads} (decoder)"),
        ("d_ff", f"{config.encoder_ffn_dim} (encoder), {config.decoder_ffn_dim} (decoder)"),
        ("residual connections", norm),
        ("positional encoding", f"sinusoidal (§3.5), {config.max_position_embeddings} positions"),
        ("embeddings", "shared source/target/output matrix (§3.4)" if config.tie_word_embeddings else "separate"),
        ("vocabulary", config.vocab_size),
        ("parameters", f"{parameters:,}"),
    ]
    optimizer = str(getattr(training_args.optim, "value", training_args.optim))
    optimizer = (
        f"Adam ({optimizer}), beta1 {training_args.adam_beta1}, beta2 {training_args.adam_beta2}, epsilon "
        f"{training_args.adam_epsilon:g}" if "adam" in optimizer else optimizer
    ) + f", weight decay {training_args.weight_decay}"
    if training_args.max_tokens is not None:
        batch = f"at most {training_args.max_tokens} padded source and target tokens per process (§5.1)"
    else:
        batch = f"{training_args.per_device_train_batch_size} pairs per process"
    smoothing = (
        f"{config.label_smoothing} (§5.4, the model's loss, padding excluded)" if config.label_smoothing
        else f"{training_args.label_smoothing_factor} (transformers' LabelSmoother)"
    )
    dropout = f"{config.dropout} (§5.4)" + "".join(
        f"; {value} {place}" for value, place in ((config.attention_dropout, "on attention weights"),
                                                 (config.activation_dropout, "inside the feed-forward network"))
        if value
    )
    state = trainer.state
    hyperparameters = [
        ("optimizer", optimizer),
        ("learning-rate schedule", schedule),
        ("label smoothing", smoothing),
        ("dropout", dropout),
        ("batch", batch),
        ("processes x gradient accumulation",
         f"{training_args.world_size} x {training_args.gradient_accumulation_steps}"),
        ("optimizer steps", state.global_step),
        ("epochs", f"{state.epoch:.2f}" if state.epoch is not None else "n/a"),
        ("precision", trainer.precision),
        ("seed", training_args.seed),
        ("hardware", f"{device_name(trainer.args.device)}: {trainer.run_description}"),
    ]
    if training_seconds is not None:
        time_limit = ""
        hours = training_args.stop_time_hours
        if hours and training_seconds >= hours * 3600 and state.max_steps and state.global_step < state.max_steps:
            time_limit = f"; stopped there by --stop_time_hours {hours:g}, of {state.max_steps} planned steps"
        hyperparameters.append(
            ("training time", f"{training_seconds / 60:,.1f} min ({training_seconds:,.0f} s){time_limit}")
        )
    if synthetic:
        data_description = (
            f"The embedded synthetic {task} task of The Annotated Transformer: sequences of space-separated symbols, "
            f"the target being the source{' reversed' if task == 'reverse' else ''}."
        )
    else:
        where = data_args.dataset_name or data_args.data_dir
        pair = f"{source_lang or 'source'} -> {target_lang or 'target'}"
        data_description = f"Parallel corpus `{where}`, {pair}."
    data_splits = [{"split": split, **filter_report[split]} for split in filter_report]
    best = state.best_model_checkpoint
    best_note = best_checkpoint_note(best, output_dir, training_args.metric_for_best_model) \
        if best and training_args.load_best_model_at_end else ""
    example = corpus["test" if "test" in corpus else "train"][0]["source"]
    config_text = config_path.read_text(encoding="utf-8").strip() if config_path is not None else None
    return {
        "card_data": card_data(
            model_name, results, source_lang=source_lang, target_lang=target_lang, dataset_id=dataset_id,
            dataset_name=dataset_id, hub_dataset=None if synthetic else hub_dataset_id(data_args.dataset_name),
        ),
        "model_name": model_name,
        **usage_example(training_args.hub_model_id or str(output_dir), example),
        "task_description": (
            f"the {task} task" if synthetic else f"translation {source_lang or 'source'} -> {target_lang or 'target'}"
        ),
        "num_beams": training_args.generation_num_beams,
        "architecture": architecture,
        "hyperparameters": hyperparameters,
        "data_description": data_description,
        "data_splits": data_splits,
        "tokenizer_description": (
            f"byte-level BPE, {len(trainer.processing_class)} tokens, trained on the training split"
            if data_args.tokenizer_name_or_path is None else f"from {data_args.tokenizer_name_or_path}"
        ),
        "best_checkpoint_note": best_note,
        "results": [{**row, **{k: _format(row[k]) for k in ("bleu", "chrf", "exact_match")}} for row in results],
        "signatures": signatures or {"bleu": "n/a", "chrf": "n/a"},
        "command": command,
        "config_file": _display_path(config_path) if config_path is not None else None,
        "config_is_default": config_path is not None and " --config" not in command,
        "config_text": config_text,
        "intended_use": (
            "A demonstration that the training pipeline works end to end: it copies symbol sequences."
            if synthetic
            else "Research on and teaching of the Transformer; translation of text like the training corpus."
        ),
        "max_length": data_args.max_length,
    }


def _display_path(path: Path) -> str:
    """`path` relative to the current directory when it lies below it (as a user would type it)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _format(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not math.isnan(value) else str(value)


def check_card_writable(model_dir: str | os.PathLike) -> None:
    """Before an evaluation: a model folder's card that `record_evaluation` could not read (not UTF-8, metadata that
    is not YAML) or write (a read-only file or folder) is named now, before anything is translated (ValueError)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():  # a Hub id: no card is written
        return
    card = model_dir / MODEL_CARD_NAME
    if card.is_file():
        try:
            card.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{card} is not valid UTF-8 ({error}): the scores cannot be added to it; fix or move "
                             "it") from None
        load_card(card)  # its metadata, which the scores' model-index entries go into
        if not os.access(card, os.W_OK):
            raise ValueError(f"{card} is not writable: the scores cannot be added to it; make it writable, or "
                             "evaluate a writable copy of the folder")
    try:  # the card is written through a new file beside it: one made and removed again (os.access says yes to root)
        with tempfile.TemporaryFile(dir=Path(os.path.realpath(card)).parent):
            pass
    except OSError as error:
        raise ValueError(f"{model_dir} is not writable ({error.strerror or error}): the scores cannot be written "
                         f"into its card ({MODEL_CARD_NAME}); evaluate a writable copy of the folder") from None


def record_evaluation(model_dir: str | os.PathLike, results: Mapping, command: str) -> Path | None:
    """Write one evaluation (`modeling.inference.evaluation.evaluate_model`'s results) into the model folder's card
    (README.md) as a section `## Evaluation: <test set>, beam <n>`: scores, signatures, the command. The section of
    an earlier evaluation with the same test set and beam is replaced, in the text and in the card's Hub metadata (its
    `model-index`); a folder without a card (an average of an unfinished run's checkpoints) gets one that starts with
    its name. A Hub id, which is no folder here, is left alone (returns None)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return None
    card = model_dir / MODEL_CARD_NAME
    heading = f"{EVALUATION_HEADING}{results['split']}, beam {results['num_beams']}"
    signatures = results["signatures"]
    section = "\n".join([
        heading,
        "",
        "| sentences | sacreBLEU | chrF | lowercased BLEU | exact match (%) |",
        "| --- | --- | --- | --- | --- |",
        f"| {results['sentences']} | {results['bleu']:.2f} | {results['chrf']:.2f} | {results['bleu_lowercase']:.2f} "
        f"| {results['exact_match']:.2f} |",
        "",
        f"sacreBLEU signature: `{signatures['bleu']}`",
        f"chrF signature: `{signatures['chrf']}`",
        f"lowercased sacreBLEU signature: `{signatures['bleu_lowercase']}`",
        "",
        "```bash",
        command,
        "```",
        "",
    ])
    folder_name = model_dir.resolve().name
    text = card.read_text(encoding="utf-8") if card.is_file() else f"# {folder_name}\n"
    earlier = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if earlier.search(text):
        text = earlier.sub(lambda _: section + "\n", text, count=1).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + section
    replace_text(card, _with_evaluation_metadata(text, results, folder_name))
    return card


def _with_evaluation_metadata(text: str, results: Mapping, model_name: str) -> str:
    """`text` (a card) whose Hub metadata (`model-index`) also holds this evaluation's sacreBLEU and chrF, as
    entries for its test set with the metric config "beam <n>" that replace an earlier evaluation's. The dataset is
    the test set's corpus folder, named as training names it (`--data_dir`'s last part), or "custom" for a pair of
    files; the task is the card's own. A card without metadata is returned as it is."""
    if not text.startswith("---"):
        return text
    card = ModelCard(text, ignore_metadata_errors=True)
    data = card.data
    known = (data.eval_results or [None])[0]
    test_set = results.get("test_set") or {}
    dataset = corpus_id(test_set["data_dir"]) if test_set.get("data_dir") else "custom"
    languages = data.language if isinstance(data.language, list) and len(data.language) == 2 else (None, None)
    task_name = known.task_name if known else _task_name(test_set.get("source_lang") or languages[0],
                                                         test_set.get("target_lang") or languages[1])
    evaluation = _eval_results(results, task_name, dataset, dataset, metric_config=f"beam {results['num_beams']}")
    kept = [old for old in data.eval_results or [] if not any(old.is_equal_except_value(new) for new in evaluation)]
    data.eval_results = kept + evaluation
    data.model_name = data.model_name or model_name
    return card.content


def load_card(path: Path) -> ModelCard:
    """The model card at `path`; ValueError naming it when its metadata (the front matter) is not valid YAML, which
    `ignore_metadata_errors` does not cover."""
    try:
        return ModelCard.load(path, ignore_metadata_errors=True)
    except (yaml.YAMLError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        message = f"{path}: its metadata (the front matter between '---' lines) is not valid YAML: {reason}"
        raise ValueError(message) from None


def renamed_card(card: ModelCard, name: str, model_id: str) -> ModelCard:
    """`card` for the same model under another name: its heading and `model_name` become `name`, and the id its
    "How to use" section loads (a folder or a Hub repo id) becomes `model_id`. The rest stays as it is."""
    card.data.model_name = name
    text = re.sub(r"^# .*$", lambda _: f"# {name}", card.text, count=1, flags=re.M)
    usage = re.search(r"^## How to use\n.*?(?=^## |\Z)", text, re.S | re.M)
    loaded = re.search(r'from_pretrained\("([^"]+)"', usage.group(0)) if usage else None
    if loaded:  # only where the id stands (a short folder name such as "o" is part of other words too)
        old = loaded.group(1)
        section = usage.group(0).replace(f'from_pretrained("{old}"', f'from_pretrained("{model_id}"')
        for written in {shlex.quote(old), old}:  # quoted as cards are written, or as they were before (unquoted)
            section = section.replace(f"translate.py {written} ", f"translate.py {shlex.quote(model_id)} ")
        text = text[: usage.start()] + section + text[usage.end():]
    card.text = text
    return card


def averaged_model_card(
    run_dir: str | os.PathLike, output_dir: str | os.PathLike, checkpoints: Sequence[str | os.PathLike]
) -> Path | None:
    """Give an averaged model (`modeling.training.checkpoints.average_checkpoints`) the card of the run its checkpoints come
    from, as `output_dir/README.md`: the metadata, architecture, training (hardware and time), data and command stay;
    the name and the "How to use" id become the averaged folder's; the run's results and evaluations, which were its
    final model's, give way to a line naming the averaged checkpoints (`scripts/evaluate.py` then adds this model's
    own scores). Returns None, writing nothing, when the run has no card (it has not finished)."""
    run_card = Path(run_dir) / MODEL_CARD_NAME
    if not run_card.is_file():
        return None
    try:
        card = load_card(run_card)
    except ValueError as error:  # a hand-edited card must not stop the averaging
        logger.warning("The averaged model gets no model card: %s", error)
        return None
    output_dir = Path(output_dir)
    card = renamed_card(card, output_dir.resolve().name, str(output_dir))
    card.data.eval_results = None
    text = card.text
    names = ", ".join(Path(checkpoint).name for checkpoint in checkpoints)
    results = (
        f"## Results\n\nThe weights are the average (§6.1) of {len(checkpoints)} checkpoints of the run described "
        f"here: {names} of `{run_dir}`. The run's own scores were those of its final model, not of this average; "
        "`scripts/evaluate.py` adds this model's below.\n\n"
    )
    text = re.sub(rf"^{re.escape(EVALUATION_HEADING)}.*?(?=^## |\Z)", "", text, flags=re.S | re.M)  # the run's
    text, found = re.subn(r"^## Results\n.*?(?=^## )", lambda _: results, text, count=1, flags=re.S | re.M)
    if not found:
        text = text.rstrip("\n") + "\n\n" + results.rstrip("\n") + "\n"
    card.text = text
    path = output_dir / MODEL_CARD_NAME
    card.save(path)
    return path


__all__ = [
    "CARD_WRITING_PATTERN", "MODEL_CARD_NAME", "PAPER_TAGS", "TEMPLATE_PATH", "averaged_model_card", "card_data",
    "load_card", "model_card_context", "record_evaluation", "render_model_card", "renamed_card", "write_model_card",
]
