"""The training pipeline behind `scripts/train.py`: arguments, data, tokenizer, model, `Seq2SeqTrainer`, outputs.

text -> tokenizer (trained on the training split unless given) -> filtered, tokenized pairs -> token-budget batches
-> model with the paper's label-smoothed loss -> `TransformerSeq2SeqTrainer` (Noam schedule, evaluation with
`generate`, sacreBLEU/chrF, best checkpoint on BLEU) -> model folder with custom code, tokenizer and model card.

Arguments come from `HfArgumentParser` over three dataclasses, with an optional YAML/JSON file (`--config`) whose
values become the defaults that command-line flags override. Every argument is checked before the model is built,
so bad values fail in seconds with a message naming the value.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import yaml
from transformers import DataCollatorForSeq2Seq, HfArgumentParser, set_seed

from .batching import TokenBudgetBatchSampler, token_lengths
from .checkpoints import checkpoint_problem, list_checkpoints
from .configuration_annotated_transformer import PRESETS, AnnotatedTransformerConfig
from .data import SYNTHETIC_TASKS, filter_pairs, load_parallel_corpus, tokenize_pairs
from .evaluation import build_compute_metrics
from .hub import push_folder_to_hub
from .model_card import model_card_context, write_model_card
from .modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration
from .schedule import NOAM
from .tokenization import dataset_texts, load_tokenizers, train_tokenizer
from .trainer import TransformerSeq2SeqTrainer, TransformerTrainingArguments, cpu_threads_per_process

logger = logging.getLogger(__name__)



class ConfigurationError(ValueError):
    """A bad argument or unusable data, found before training starts; the message names the value."""


# ----------------------------------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ModelArguments:
    """The model: a size preset (Table 3) whose values explicit dimensions override."""

    preset: str = field(default="tiny", metadata={"help": f"Model size preset: one of {', '.join(PRESETS)}."})
    d_model: int | None = field(default=None, metadata={"help": "Model width (overrides the preset)."})
    encoder_layers: int | None = field(default=None, metadata={"help": "Encoder layers N (overrides the preset)."})
    decoder_layers: int | None = field(default=None, metadata={"help": "Decoder layers N (overrides the preset)."})
    attention_heads: int | None = field(
        default=None, metadata={"help": "Attention heads h of encoder and decoder (overrides the preset)."}
    )
    ffn_dim: int | None = field(
        default=None, metadata={"help": "Feed-forward inner size d_ff of encoder and decoder (overrides the preset)."}
    )
    dropout: float | None = field(default=None, metadata={"help": "P_drop of §5.4 (overrides the preset)."})
    attention_dropout: float | None = field(default=None, metadata={"help": "Dropout on attention weights."})
    max_position_embeddings: int | None = field(
        default=None, metadata={"help": "Longest sequence the positional encoding covers (overrides the preset)."}
    )
    norm_first: bool = field(
        default=False, metadata={"help": "Pre-norm x + Sublayer(LayerNorm(x)) instead of the paper's post-norm."}
    )
    tie_word_embeddings: bool = field(
        default=True, metadata={"help": "Share source/target embeddings and the output projection (§3.4)."}
    )
    label_smoothing: float = field(
        default=0.1,
        metadata={
            "help": "epsilon_ls of §5.4, applied by the model's loss (padding excluded). Set 0 to use "
            "--label_smoothing_factor (transformers' LabelSmoother) instead."
        },
    )

    def config_overrides(self) -> dict:
        """Config fields set explicitly (None = keep the preset's value)."""
        overrides = {
            "d_model": self.d_model,
            "encoder_layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "encoder_attention_heads": self.attention_heads,
            "decoder_attention_heads": self.attention_heads,
            "encoder_ffn_dim": self.ffn_dim,
            "decoder_ffn_dim": self.ffn_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_position_embeddings": self.max_position_embeddings,
        }
        overrides = {name: value for name, value in overrides.items() if value is not None}
        overrides.update(
            norm_first=self.norm_first,
            tie_word_embeddings=self.tie_word_embeddings,
            label_smoothing=self.label_smoothing,
        )
        return overrides


@dataclass
class DataArguments:
    """The corpus, its tokenizer and the length filter. With neither --data_dir nor --dataset_name: the copy task."""

    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A local parallel corpus: a directory of {split}.{lang}[.gz] files (e.g. ../shared/data/multi30k), "
            "of {split}.tsv/.jsonl files, or a DatasetDict saved with save_to_disk."
        },
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": f"A `datasets` name (e.g. wmt14), or a synthetic task: {', '.join(SYNTHETIC_TASKS)}."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset configuration (e.g. de-en)."})
    source_lang: str | None = field(default=None, metadata={"help": "Source language code (e.g. de)."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code (e.g. en)."})
    source_column: str | None = field(default=None, metadata={"help": "Source text column, when not inferable."})
    target_column: str | None = field(default=None, metadata={"help": "Target text column, when not inferable."})
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A tokenizer folder (tokenizer.json); default: train a BPE tokenizer on the training split."},
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of the tokenizer trained here."})
    max_length: int = field(
        default=128, metadata={"help": "Pairs with a side longer than this many tokens are removed (and counted)."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})


ARGUMENT_CLASSES = (ModelArguments, DataArguments, TransformerTrainingArguments)


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(ARGUMENT_CLASSES)
    parser.add_argument(
        "--config",
        default=None,
        help="A YAML or JSON file of arguments (names as on the command line, without --); flags given on the "
        "command line override its values.",
    )
    return parser


def read_config_file(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"config file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigurationError(
            f"config file {path} must hold a mapping of argument names to values, got a {type(values).__name__}"
        )
    return values


def parse_arguments(
    argv: Sequence[str] | None = None, default_config: str | os.PathLike | None = None
) -> tuple[ModelArguments, DataArguments, TransformerTrainingArguments, Path | None]:
    """Parse `argv` (default: sys.argv[1:]) with the values of `--config` (else `default_config`) as defaults.

    Returns the three argument dataclasses and the config file used (None if none).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", default=None)
    known, _ = config_parser.parse_known_args(argv)
    config_path = Path(known.config) if known.config else (Path(default_config) if default_config else None)
    if config_path is not None:
        values = read_config_file(config_path)
        actions = {action.dest: action for action in parser._actions}
        unknown = sorted(set(values) - set(actions) - {"config"})
        if unknown:
            raise ConfigurationError(
                f"unknown argument(s) {unknown} in {config_path}; arguments are the command-line flags without "
                "'--' (see scripts/train.py --help)"
            )
        for name, value in values.items():
            converter = actions[name].type
            if isinstance(value, str) and converter in (int, float):
                values[name] = converter(value)  # YAML reads 1e-9 (no dot) as a string
        parser.set_defaults(**values)
    try:
        outputs = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # raised by the dataclasses' __post_init__ checks
        raise ConfigurationError(str(error)) from error
    model_args, data_args, training_args = outputs[:3]
    return model_args, data_args, training_args, config_path


# ----------------------------------------------------------------------------------------------------------------------
# Checks that run before anything heavy
# ----------------------------------------------------------------------------------------------------------------------


def validate_arguments(model_args: ModelArguments, data_args: DataArguments, training_args) -> None:
    """Fail early, naming the bad value and what would be accepted."""
    if model_args.preset not in PRESETS:
        raise ConfigurationError(f"Unknown model preset {model_args.preset!r}; choose one of {sorted(PRESETS)}.")
    if data_args.data_dir is not None and data_args.dataset_name is not None:
        raise ConfigurationError(
            "give either --data_dir (a local corpus) or --dataset_name (a datasets name), not both"
        )
    if data_args.data_dir is not None and not Path(data_args.data_dir).exists():
        raise ConfigurationError(
            f"--data_dir {data_args.data_dir} does not exist (from {Path.cwd()}); give a directory of "
            "{split}.{lang} files such as ../shared/data/multi30k, or leave it out to train on the copy task"
        )
    if data_args.tokenizer_name_or_path is not None and not Path(data_args.tokenizer_name_or_path).is_dir():
        raise ConfigurationError(
            f"--tokenizer_name_or_path {data_args.tokenizer_name_or_path} is not a directory with a tokenizer.json; "
            "leave it out to train a tokenizer on the training data"
        )
    if data_args.max_length < 1:
        raise ConfigurationError(f"--max_length must be >= 1 token, got {data_args.max_length}")
    positions = model_positions(model_args)
    if data_args.max_length + 1 > positions:
        raise ConfigurationError(
            f"--max_length {data_args.max_length} (+1 for the decoder start token) exceeds the "
            f"{positions} positions of the model; lower --max_length or raise --max_position_embeddings"
        )
    if model_args.label_smoothing > 0 and training_args.label_smoothing_factor > 0:
        raise ConfigurationError(
            f"label smoothing is set twice: --label_smoothing {model_args.label_smoothing} (the model's loss) and "
            f"--label_smoothing_factor {training_args.label_smoothing_factor} (transformers'); set one of them to 0"
        )
    if training_args.push_to_hub and not training_args.hub_model_id:
        raise ConfigurationError("--push_to_hub needs --hub_model_id (e.g. your-name/transformer-multi30k-de-en)")
    if training_args.lr_scheduler != NOAM and training_args.learning_rate > 0.05:
        logger.warning(
            "--learning_rate %s with --lr_scheduler %s: that is the Noam factor default; transformers' schedules "
            "take the peak rate (e.g. 5e-4)", training_args.learning_rate, training_args.lr_scheduler,
        )


def resolve_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint` as a path: a checkpoint folder, or 'last'/'true' for the newest complete one in
    output_dir. Checkpoints whose save was cut short (no trainer_state.json, a truncated weights file) are skipped
    with a warning naming them; an explicit one is refused."""
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("last", "latest", "true"):
        output_dir = Path(training_args.output_dir)
        checkpoints = list_checkpoints(output_dir) if output_dir.is_dir() else []
        for checkpoint in reversed(checkpoints):
            problem = checkpoint_problem(checkpoint)
            if problem is None:
                return str(checkpoint)
            logger.warning("Skipping the incomplete checkpoint %s: %s", checkpoint, problem)
        raise ConfigurationError(
            f"--resume_from_checkpoint {value}: no complete checkpoint-* folder in {output_dir}"
            + (f" (incomplete: {', '.join(path.name for path in checkpoints)})" if checkpoints else "")
        )
    problem = checkpoint_problem(value)
    if problem is not None:
        raise ConfigurationError(f"--resume_from_checkpoint {value} cannot be resumed from: {problem}")
    return str(value)


def prepare_output_dir(training_args, resuming: bool) -> None:
    """Refuse to train into a folder that holds an earlier run (its checkpoints would mix with this run's and
    `--resume_from_checkpoint last` could pick one of them), unless resuming; with --overwrite_output_dir delete the
    earlier run's checkpoints first."""
    output_dir = Path(training_args.output_dir)
    entries = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
    if resuming or not entries:
        return
    if not training_args.overwrite_output_dir:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ConfigurationError(
            f"--output_dir {output_dir} already holds an earlier run ({shown}); choose a new folder, continue it with "
            "--resume_from_checkpoint last, or replace it with --overwrite_output_dir"
        )
    if training_args.process_index == 0:
        for checkpoint in list_checkpoints(output_dir):
            shutil.rmtree(checkpoint)


def check_token_budget(train_dataset, training_args) -> None:
    """Build the token-budget batches once now, so a sentence longer than --max_tokens fails before training."""
    source_lengths, target_lengths = token_lengths(train_dataset)
    try:
        TokenBudgetBatchSampler(
            source_lengths, target_lengths, training_args.max_tokens,
            num_replicas=training_args.world_size, rank=None, pad_to_multiple_of=training_args.pad_to_multiple_of,
        )
    except ValueError as error:
        raise ConfigurationError(
            f"--max_tokens {training_args.max_tokens} is too small for the training data: {error}"
        ) from None


# ----------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# ----------------------------------------------------------------------------------------------------------------------


def load_corpus(data_args: DataArguments):
    data = data_args.data_dir if data_args.data_dir is not None else data_args.dataset_name
    try:
        corpus = load_parallel_corpus(
            data, data_args.source_lang, data_args.target_lang, dataset_config=data_args.dataset_config,
            source_column=data_args.source_column, target_column=data_args.target_column,
        )
    except (ValueError, KeyError, FileNotFoundError) as error:
        raise ConfigurationError(f"cannot load the corpus {data!r}: {error}") from error
    if "train" not in corpus:
        raise ConfigurationError(f"the corpus {data!r} has no train split (it has {list(corpus)})")
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples),
                         ("test", data_args.max_test_samples)):
        if limit is not None and split in corpus and len(corpus[split]) > limit:
            corpus[split] = corpus[split].select(range(limit))
    return corpus


def get_tokenizer(data_args: DataArguments, corpus, training_args, checkpoint: str | None, model_args: ModelArguments):
    """The given tokenizer, the checkpoint's when resuming, else one trained on the training split (by the main
    process, saved to output_dir, then loaded by the others so every process has the same vocabulary)."""
    if data_args.tokenizer_name_or_path is not None:
        return load_tokenizers(data_args.tokenizer_name_or_path)
    if checkpoint is not None:
        return load_tokenizers(checkpoint)
    tokenizer_dir = Path(training_args.output_dir)
    per_node = training_args.save_on_each_node  # whether nodes share the output_dir's file system
    with training_args.main_process_first(local=per_node, desc="training the tokenizer"):
        if (training_args.local_process_index if per_node else training_args.process_index) == 0:
            tokenizer = train_tokenizer(
                dataset_texts(corpus["train"]), vocab_size=data_args.vocab_size,
                model_max_length=model_positions(model_args) - 1,
            )
            tokenizer_dir.mkdir(parents=True, exist_ok=True)
            tokenizer.save_pretrained(tokenizer_dir)
        else:
            tokenizer = load_tokenizers(tokenizer_dir)
    return tokenizer


def model_positions(model_args: ModelArguments) -> int:
    """The number of positions the model's sinusoidal table will cover."""
    if model_args.max_position_embeddings is not None:
        return model_args.max_position_embeddings
    preset = PRESETS[model_args.preset]
    return preset.get("max_position_embeddings", AnnotatedTransformerConfig().max_position_embeddings)


def build_model(model_args: ModelArguments, tokenizer, training_args) -> AnnotatedTransformerForConditionalGeneration:
    config = AnnotatedTransformerConfig.from_preset(
        model_args.preset,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **model_args.config_overrides(),
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    generation = model.generation_config
    generation.num_beams = training_args.generation_num_beams or 1
    generation.max_length = training_args.generation_max_length
    generation.decoder_start_token_id = tokenizer.bos_token_id
    generation.bos_token_id = tokenizer.bos_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    return model


def _default_generation_settings(training_args, data_args: DataArguments) -> None:
    if training_args.generation_max_length is None:
        # Targets were filtered to max_length tokens; +1 for the decoder start token that generate counts.
        training_args.generation_max_length = data_args.max_length + 1
    if training_args.generation_num_beams is None:
        training_args.generation_num_beams = 4


# ----------------------------------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------------------------------


def launch_command(argv: Sequence[str], world_size: int, distributed_type: str) -> str:
    """The command line of this run, for the model card (accelerate's config file, if any, is not visible here)."""
    launcher = "accelerate launch"
    if distributed_type == "FSDP":
        launcher += f" --use_fsdp --num_processes {world_size}"
    elif world_size > 1:
        launcher += f" --multi_gpu --num_processes {world_size}"
    return f"{launcher} scripts/train.py {shlex.join(argv)}".strip()


@dataclass
class TrainingSetup:
    """Everything `train` runs, built and checked by `setup_training` before any training step."""

    trainer: TransformerSeq2SeqTrainer
    tokenizer: object
    corpus: object  # DatasetDict of raw text pairs (after filtering)
    tokenized: object  # the same pairs as token ids
    filter_report: dict
    checkpoint: str | None
    push_to_hub: bool


def setup_training(
    model_args: ModelArguments, data_args: DataArguments, training_args: TransformerTrainingArguments
) -> TrainingSetup:
    """Check the arguments, load and filter the corpus, get the tokenizer, tokenize, build the model and the trainer.

    Every problem with the arguments or the data raises `ConfigurationError` here, before training.
    """
    validate_arguments(model_args, data_args, training_args)
    checkpoint = resolve_checkpoint(training_args)
    prepare_output_dir(training_args, resuming=checkpoint is not None)
    if training_args.distributed_state is not None:
        training_args.distributed_state.wait_for_everyone()  # every process checked the folder before any writes
    _default_generation_settings(training_args, data_args)
    push_to_hub, training_args.push_to_hub = training_args.push_to_hub, False  # pushed once, after saving
    set_seed(training_args.seed)
    if training_args.use_cpu:
        torch.set_num_threads(training_args.cpu_threads or cpu_threads_per_process())
    if training_args.disable_tqdm:
        datasets.disable_progress_bars()  # `datasets`' own bars (map, filter) too, not only the Trainer's

    corpus = load_corpus(data_args)
    tokenizer = get_tokenizer(data_args, corpus, training_args, checkpoint, model_args)
    if isinstance(tokenizer, tuple):
        raise ConfigurationError(
            "separate source/target tokenizers are not supported by scripts/train.py; give a joint tokenizer"
        )
    corpus, filter_report = filter_pairs(corpus, max_length=data_args.max_length, tokenizer=tokenizer)
    for split in corpus:
        if len(corpus[split]) == 0:
            raise ConfigurationError(
                f"no {split} pairs are left after filtering ({filter_report[split]}); raise --max_length"
            )
    with training_args.main_process_first(desc="tokenizing"):
        tokenized = tokenize_pairs(corpus, tokenizer)
    if training_args.max_tokens is not None:
        check_token_budget(tokenized["train"], training_args)
    has_validation = "validation" in tokenized
    if training_args.eval_strategy != "no" and not has_validation:
        raise ConfigurationError(
            f"evaluation needs a validation split, but the corpus has {list(corpus)}; add one or set --eval_strategy no"
        )
    if not has_validation:
        training_args.load_best_model_at_end = False

    model = build_model(model_args, tokenizer, training_args)
    collator = DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=training_args.pad_to_multiple_of
    )
    trainer = TransformerSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"] if has_validation else None,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer, corpus["validation"]["target"]) if has_validation else None,
    )
    return TrainingSetup(trainer, tokenizer, corpus, tokenized, filter_report, checkpoint, push_to_hub)


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TransformerTrainingArguments,
    *,
    config_path: Path | None = None,
    argv: Sequence[str] = (),
) -> dict:
    """Train, evaluate the saved model on validation and test, write the model folder with its card, optionally push.

    Returns the final metrics ({"eval_bleu": ..., "test_exact_match": ..., ...}).
    """
    setup = setup_training(model_args, data_args, training_args)
    trainer, tokenizer, corpus, tokenized = setup.trainer, setup.tokenizer, setup.corpus, setup.tokenized
    if trainer.is_world_process_zero():
        model = trainer.model
        parameters = sum(parameter.numel() for parameter in model.parameters())
        print(
            f"Model: preset {model_args.preset!r}, d_model {model.config.d_model}, {model.config.encoder_layers}+"
            f"{model.config.decoder_layers} layers, {parameters:,} parameters; vocabulary {len(tokenizer)}; "
            f"pairs {', '.join(f'{split} {len(corpus[split])}' for split in corpus)}; "
            + trainer.run_description
        )

    if setup.checkpoint is not None and trainer.is_world_process_zero():
        print(f"Resuming from {setup.checkpoint}")
    train_result = trainer.train(resume_from_checkpoint=setup.checkpoint)
    trainer.save_model()  # the best checkpoint's weights when load_best_model_at_end
    trainer.save_state()
    metrics = dict(train_result.metrics)
    trainer.log_metrics("train", train_result.metrics)
    trainer.save_metrics("train", train_result.metrics)

    results, signatures = [], {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in tokenized:
            continue
        trainer.compute_metrics = build_compute_metrics(tokenizer, corpus[split]["target"])
        output = trainer.predict(tokenized[split], metric_key_prefix=prefix)
        trainer.log_metrics(prefix, output.metrics)
        trainer.save_metrics(prefix, output.metrics)
        metrics.update(output.metrics)
        signatures = trainer.compute_metrics.signatures
        scores = {key.removeprefix(f"{prefix}_"): value for key, value in output.metrics.items()}
        results.append({"split": split, **scores})

    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
        command = launch_command(argv, training_args.world_size, trainer.accelerator.distributed_type.value)
        context = model_card_context(
            trainer, model_args, data_args, training_args, corpus, setup.filter_report, results, signatures,
            config_path=config_path, command=command,
        )
        write_model_card(training_args.output_dir, context)
        print_summary(training_args.output_dir, results, corpus)
        if setup.push_to_hub:
            push_folder_to_hub(
                training_args.output_dir, training_args.hub_model_id, token=training_args.hub_token,
                private=training_args.hub_private_repo, revision=training_args.hub_revision,
            )
            print(f"Pushed {training_args.output_dir} to https://huggingface.co/{training_args.hub_model_id}")
    return metrics


def print_summary(output_dir: str, results: list[dict], corpus) -> None:
    print()
    for row in results:
        print(
            f"{row['split']}: exact match {row['exact_match']:.2f}% | sacreBLEU {row['bleu']:.2f} | chrF "
            f"{row['chrf']:.2f} | {row['sentences']} sentences"
        )
    example = corpus["test" if "test" in corpus else "train"][0]["source"]
    print(f"\nThe model is in {output_dir}. Translate with it:")
    print(f"  python scripts/translate.py {shlex.quote(str(output_dir))} {shlex.quote(example)}")


__all__ = [
    "ARGUMENT_CLASSES",
    "ConfigurationError",
    "TrainingSetup",
    "setup_training",
    "DataArguments",
    "ModelArguments",
    "build_model",
    "build_parser",
    "check_token_budget",
    "parse_arguments",
    "train",
    "validate_arguments",
]
