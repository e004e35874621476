"""The figures' sources and their Markdown: the measured JSON in benchmarks/ (`Benchmarks`), the registry of named
tables (`table`, `TABLES`, `render_table`) and the formatting every table shares."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
BENCHMARKS = "benchmarks"
REFERENCE_CARD = "model_card.md"  # the reference model's card, at the repository's root
REFERENCE_RECIPE = "configs/multi30k_de_en_cpu.yaml"  # its newest run in results-recipes-cpu.json is the card's
CLOSE = "<!-- /figures -->"
USERS_DATA_DIR = "data/multi30k"  # where docs/data.md puts Multi30k; the recorded commands read it there
_OPEN = re.compile(r"<!-- figures: (?P<name>\S+) -->")
_MARKER = re.compile(r"<!--\s*/?\s*figures\b")  # any line that looks like a marker, well-formed or not
_BENCHMARK_FILE = re.compile(r"benchmarks/[\w./-]*?\.json")
_REFERENCE = re.compile(r"^(?P<file>[\w.-]+\.json)#(?P<pointer>/.*)$")  # a figure held by another JSON file
MIB = 2**20


class FiguresError(ValueError):
    """A figures block or JSON reference that cannot be rendered (an unknown table, a broken marker, a missing file)."""


# --- the JSON ---------------------------------------------------------------------------------------------------


class Benchmarks:
    """The JSON files of `root/benchmarks`, each read once."""

    def __init__(self, root: str | Path = REPOSITORY):
        self.folder = Path(root) / BENCHMARKS
        self._loaded: dict[str, dict] = {}

    def __call__(self, name: str) -> dict:
        if name not in self._loaded:
            path = self.folder / name
            if not path.is_file():
                raise FiguresError(f"{BENCHMARKS}/{name} does not exist (the JSON files there: "
                                   f"{', '.join(sorted(p.name for p in self.folder.glob('*.json')))})")
            self._loaded[name] = json.loads(path.read_text(encoding="utf-8"))
        return self._loaded[name]

    def value(self, value):
        """`value` itself, or, for a reference "FILE.json#/json/pointer", the value that file holds there."""
        if not isinstance(value, str) or not (match := _REFERENCE.match(value)):
            return value
        found = self(match["file"])
        for key in match["pointer"][1:].split("/"):
            key = key.replace("~1", "/").replace("~0", "~")
            try:
                found = found[int(key)] if isinstance(found, list) else found[key]
            except (KeyError, IndexError, ValueError):
                raise FiguresError(f"{value}: {match['file']} holds nothing at {match['pointer']}") from None
        return found


def load(name: str, root: str | Path = REPOSITORY) -> dict:
    """The JSON file `benchmarks/<name>` of the repository at `root`."""
    return Benchmarks(root)(name)


# --- formatting -------------------------------------------------------------------------------------------------


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _block(*parts: str) -> str:
    """Paragraphs and tables of one block, a blank line between them, ending in a newline."""
    return "\n".join(part.rstrip("\n") + "\n" for part in parts if part)


def _bleu(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _ratio(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _times(value) -> str:
    return f"{value:.2f}×"


def _rate(value) -> str:
    return f"{value:,.0f}"


def _mib(value) -> str:
    return f"{value / MIB:,.0f}"


def _seconds(value) -> str:
    return f"{value:.2f}" if value < 1 else f"{value:,.1f}"


def _flops(value) -> str:
    return f"{value / 1e12:,.0f} TFLOP/s" if value >= 1e12 else f"{value / 1e9:,.0f} GFLOP/s"


def _percent(value) -> str:
    return f"{100 * value:.0f}%"


def _direction(source: str, target: str) -> str:
    return f"{source}→{target}"


def _direction_of(key: str) -> str:
    source, target = key.split("-")
    return _direction(source, target)


def _machine(environment: dict) -> str:
    """The hardware a benchmark JSON ran on: the GPU, or the CPU with its cores."""
    if environment["device"] == "cuda":
        return environment["device_name"]
    cpu = " ".join(re.sub(r"\((R|TM)\)|\bProcessor\b", "", environment["cpu"]).split())
    return f"{environment['cpu_count']}-core {cpu}"


def _joined(values) -> str:
    return " / ".join(dict.fromkeys(str(value) for value in values))


def _measured_on(*results: dict, ctranslate2: bool = False, method: str = "") -> str:
    """The line above a benchmark table: hardware and versions, once, from the JSON files the table shows."""
    environments = [result["environment"] for result in results]
    machine = _joined(_machine(environment) for environment in environments)
    details = [f"{_joined(e['threads'] for e in environments)} threads"] if environments[0]["device"] == "cpu" else []
    details.append(_joined(e["dtype"] for e in environments))
    software = [f"torch {_joined(e['torch'] for e in environments)}",
                f"transformers {_joined(e['transformers'] for e in environments)}"]
    if ctranslate2:
        software.append(f"CTranslate2 {_joined(e['ctranslate2'] for e in environments)}")
    versions = [e["package_version"] for e in environments if e.get("package_version")]
    measured = f"; measured with version {_joined(versions)}" if versions else ""
    line = f"Hardware: {machine} ({', '.join(details)}); software: {', '.join(software)}{measured}."
    return f"{line} {method}" if method else line


def _size(name: str) -> str:
    """A benchmark size as its dimensions (`tools.benchmarking.models.SIZES`)."""
    from tools.benchmarking.models import benchmark_config

    config = benchmark_config(name)
    return (f"{name} (d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, "
            f"d_ff {config.encoder_ffn_dim})")


def _lengths(result: dict) -> str:
    origin = result["lengths"]["origin"]
    return "Multi30k's de-en lengths" if "multi30k" in origin.lower() and "synthetic" not in origin else \
        "synthetic Multi30k-like lengths"


# --- the tables -------------------------------------------------------------------------------------------------

TABLES: dict[str, Callable[[Benchmarks], str]] = {}


def table(name: str):
    """Register a table renderer under the block name `name`."""
    def register(render: Callable[[Benchmarks], str]):
        TABLES[name] = render
        return render
    return register


def render_table(name: str, root: str | Path = REPOSITORY, benchmarks: Benchmarks | None = None) -> str:
    """The Markdown of the table `name`, rendered from the JSON in `root/benchmarks`."""
    if name not in TABLES:
        raise FiguresError(f"unknown figures table {name!r}; the tables are: {', '.join(sorted(TABLES))}")
    return TABLES[name](benchmarks or Benchmarks(root))
