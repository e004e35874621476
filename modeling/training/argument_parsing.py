"""`train.py`'s command line: one `HfArgumentParser` over `ModelArguments`, `DataArguments` and
`TransformerTrainingArguments`, with an optional YAML/JSON file (`--config`) whose values become the defaults that
command-line flags override (`parse_arguments`). A run on a synthetic task that names no --config takes the copy
task's file as its defaults; a run on a corpus takes the flags' own. One training batch rule holds: token budgets
(--max_tokens) or a fixed number of pairs (--per_device_train_batch_size), a command-line choice overriding the
file's. A bad value raises `ConfigurationError` naming it; argparse's own errors exit with status 2 in one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from ..common.command_line import OneLineErrorParser
from .arguments import ARGUMENT_CLASSES, ConfigurationError, DataArguments, ModelArguments, \
    TransformerTrainingArguments

# Flags of earlier versions, and what replaced them: a config file naming one is told so.
RENAMED = {"lr_scheduler": "lr_scheduler_type"}


class TrainingArgumentParser(OneLineErrorParser, HfArgumentParser):
    """`HfArgumentParser` over `ARGUMENT_CLASSES` whose own errors (an unknown flag, a value of the wrong type) are
    one line, `train.py: error: ...`, with exit status 2."""


def build_parser(add_help: bool = True) -> TrainingArgumentParser:
    # allow_abbrev=False: a flag is spelled out (an abbreviation of one would change meaning when a flag is added)
    parser = TrainingArgumentParser(ARGUMENT_CLASSES, prog="train.py", allow_abbrev=False, add_help=add_help)
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
        raise ConfigurationError(f"--config {path}: the file does not exist")
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:  # UnicodeDecodeError is a ValueError
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigurationError(f"--config {path} is not valid {kind}: {' '.join(str(error).split())}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigurationError(
            f"--config {path} must hold a mapping of argument names to values, got a {type(values).__name__}"
        )
    return values


def config_value(name: str, value, action: argparse.Action, config_path: Path):
    """A config file's `value` for the flag `name` (parsed by `action`) checked as the command line checks it
    (set_defaults does not): a number for an int or float flag (YAML reads 1e-9 without a dot as a string; 5.5 is no
    integer; true is no number), text for a text flag or one of named choices. Lists and mappings go to the
    dataclasses' own checks."""
    converter = action.type
    if value is None or isinstance(value, (list, dict)):
        return value
    takes_text = converter is str or (action.choices is not None
                                      and all(isinstance(choice, str) for choice in action.choices))
    if takes_text and isinstance(value, bool):  # YAML 1.1: unquoted no/yes/off/on/false/true
        raise ConfigurationError(
            f"{name}: {value!r} in {config_path} is YAML's boolean (from an unquoted no, yes, off, on, false or "
            f"true), but {name} takes text: write the text you meant in quotes"
        )
    if converter is str:
        return value if isinstance(value, str) else str(value)
    if converter not in (int, float):
        return value
    kind = "an integer" if converter is int else "a number"
    if isinstance(value, bool) or (converter is int and isinstance(value, float) and not value.is_integer()):
        raise ConfigurationError(f"{name}: {value!r} in {config_path} is not {kind}")
    try:
        return converter(value)
    except ValueError:
        raise ConfigurationError(f"{name}: {value!r} in {config_path} is not {kind}") from None


def parse_arguments(
    argv: Sequence[str] | None = None, copy_task_config: str | os.PathLike | None = None
) -> tuple[ModelArguments, DataArguments, TransformerTrainingArguments, Path | None]:
    """Parse `argv` (default: sys.argv[1:]) with the values of `--config` as defaults; without --config, a run that
    names no corpus (no --data_dir, and no --dataset_name other than a synthetic task) takes `copy_task_config`'s.

    Returns the three argument dataclasses and the config file used (None if none). A bad value in the file or a
    check of the dataclasses raises `ConfigurationError`; argparse's own errors exit with status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(add_help=False)  # --help once the file's values are the defaults it shows
    namespace, _ = parser.parse_known_args(argv)
    config_path = Path(namespace.config) if namespace.config else None
    if config_path is None and copy_task_config is not None and DataArguments(
        data_dir=namespace.data_dir, dataset_name=namespace.dataset_name
    ).synthetic_task:
        config_path = Path(copy_task_config)
    file_values = {} if config_path is None else config_file_values(config_path, parser)
    parser.set_defaults(**file_values)
    parser.add_argument("-h", "--help", action="help", help="show this help message and exit")
    namespace, remaining = parser.parse_known_args(argv)
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    choose_batching(namespace, file_values)
    try:
        model_args, data_args, training_args = (
            dataclass_type(**{field.name: getattr(namespace, field.name)
                              for field in dataclasses.fields(dataclass_type) if field.init})
            for dataclass_type in ARGUMENT_CLASSES
        )
    except ValueError as error:  # raised by the dataclasses' __post_init__ checks
        raise ConfigurationError(str(error)) from error
    return model_args, data_args, training_args, config_path


def config_file_values(config_path: Path, parser: argparse.ArgumentParser) -> dict:
    """The values of the config file at `config_path`, each checked as the command line checks its flag."""
    values = read_config_file(config_path)
    actions = {action.dest: action for action in parser._actions}
    if "config" in values:
        raise ConfigurationError(
            f"config: {values['config']!r} in {config_path}: a config file cannot name another; give the one to use "
            "with --config"
        )
    renamed = sorted(set(values) & set(RENAMED))
    if renamed:
        raise ConfigurationError(
            f"{renamed[0]} in {config_path} is now {RENAMED[renamed[0]]} (transformers' name; its values are "
            f"transformers' schedules and noam): rename the key"
        )
    unknown = sorted(set(values) - set(actions))
    if unknown:
        raise ConfigurationError(
            f"unknown argument(s) {unknown} in {config_path}; arguments are the command-line flags without '--' "
            "(see scripts/train.py --help)"
        )
    return {name: config_value(name, value, actions[name], config_path) for name, value in values.items()}


def choose_batching(namespace: argparse.Namespace, file_values: dict) -> None:
    """One training batch rule: token budgets (--max_tokens) or a fixed number of pairs
    (--per_device_train_batch_size). Where the command line chose one and the config file the other, the command
    line's stands and the file's is dropped; both from one place are left for `TransformerTrainingArguments` to
    refuse. A value the command line gives is one that differs from the file's (its parser default)."""
    budget, size = namespace.max_tokens, namespace.per_device_train_batch_size
    if budget is None or size is None:
        return
    budget_from_file = file_values.get("max_tokens") == budget
    size_from_file = file_values.get("per_device_train_batch_size") == size
    if budget_from_file and not size_from_file:
        namespace.max_tokens = None
    elif size_from_file and not budget_from_file:
        namespace.per_device_train_batch_size = None


__all__ = ["RENAMED", "build_parser", "choose_batching", "parse_arguments", "read_config_file"]
