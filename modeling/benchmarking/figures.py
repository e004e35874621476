"""Every BLEU and speed figure of the README, docs/ and model_card.md, rendered from the measured JSON in benchmarks/.

A document holds each table of figures in a marker block, which only this module writes:

    <!-- figures: NAME -->
    (the table NAME, rendered from benchmarks/*.json)
    <!-- /figures -->

`render_table(NAME)` renders one table (`TABLES` lists them); `update_text` rewrites every block of a document, and
`check_text` names each block whose content is not what its JSON renders (stale), each unknown NAME, each broken
marker and each `benchmarks/....json` the document names that does not exist. `reference_model_card` renders the card
of the project's reference model (the de->en CPU recipe) from the same template as every trained model's card.
`scripts/render_figures.py` runs them over README.md, docs/*.md and model_card.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPOSITORY = Path(__file__).resolve().parents[2]
BENCHMARKS = "benchmarks"
REFERENCE_CARD = "model_card.md"  # the reference model's card, at the repository's root
REFERENCE_RUN = "multi30k_de_en_cpu"  # its run in results-recipes-cpu.json
CLOSE = "<!-- /figures -->"
# Where the runs read Multi30k, and where a user's copy is (docs/data.md downloads it there): commands are shown so.
RUN_DATA_DIR, USERS_DATA_DIR = "../shared/data/multi30k", "data/multi30k"
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
    line = f"Hardware: {machine} ({', '.join(details)}); software: {', '.join(software)}."
    return f"{line} {method}" if method else line


def _size(name: str) -> str:
    """A benchmark size as its dimensions (`modeling.benchmarking.models.SIZES`)."""
    from .models import benchmark_config

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


GPU_RECIPES = "results-gpu-h100-recipes.json"
GPU_RECIPES_SOFTWARE = "results-gpu-h100-recipes-software.json"
CPU_RECIPES = "results-recipes-cpu.json"
# The GPU recipes' runs: (file, step) of each run of an unchanged recipe (the pre-norm run is an ablation).
GPU_RECIPE_RUNS = (
    (GPU_RECIPES, "recipe:multi30k_de_en"),
    (GPU_RECIPES, "recipe:multi30k_en_de"),
    ("results-gpu-h100-recipes-2b.json", "recipe:multi30k_de_en:--save_total_limit=16"),
    ("results-gpu-h100-recipes-2b.json", "recipe:multi30k_en_de:--save_total_limit=16"),
)


@dataclass
class RecipeRun:
    """One recipe run's figures, from either recipes JSON."""

    recipe: str
    direction: str
    hardware: str
    software: str
    steps: int | None
    epochs: float
    training_seconds: float
    checkpoint: str
    num_beams: int
    validation: dict
    test: dict | None
    note: str
    signatures: dict
    repeat: bool = False


def cpu_recipe_runs(benchmarks: Benchmarks) -> dict[str, RecipeRun]:
    runs = {}
    for key, run in benchmarks(CPU_RECIPES)["runs"].items():
        software = run["software"]
        runs[key] = RecipeRun(
            recipe=run["recipe"], direction=_direction(run["source_lang"], run["target_lang"]),
            hardware=run["hardware"],
            software=f"{run['precision']}; torch {software['torch']}, transformers {software['transformers']}",
            steps=run["steps"], epochs=run["epochs"], training_seconds=run["training_seconds"],
            checkpoint=run["checkpoint"],
            num_beams=run["num_beams"], validation=run["validation"], test=run.get("test"),
            note=f"a repeat: {run['processes']} process, {run['threads']} threads" if run.get("repeat_of")
            else f"{run['processes']} process, {run['threads']} threads",
            signatures=run["signatures"], repeat="repeat_of" in run,
        )
    return runs


def gpu_recipe_runs(benchmarks: Benchmarks) -> dict[str, RecipeRun]:
    runs = {}
    for file, step in GPU_RECIPE_RUNS:
        run = benchmarks(file)["recipes"][step]
        software = benchmarks(GPU_RECIPES_SOFTWARE)[file]
        name = step.split(":")[1]
        source, target = name.split("_")[1:3]
        chosen = run["chosen"]
        validation = run.get("validation_chosen_beam6") if run["beam"] == 6 else (
            run["validation_averaged"] if chosen.startswith("average") else run["validation_best_checkpoint"])
        steps = run["trainer_state"]["global_step"] if "trainer_state" in run else None
        note = software["shared"]
        if "validation_averaged_from_log" in run:
            note += (f"; the average of the last 5 scored {_bleu(run['validation_averaged_from_log']['bleu'])} on "
                     "validation (beam 4, from its log) but its process was stopped, so the run chose its best "
                     "checkpoint")
        runs[f"{file}#{step}"] = RecipeRun(
            recipe=f"configs/{name}.yaml", direction=_direction(source, target), hardware=run["device"],
            software=f"{software['precision']}; torch {run['torch']}, transformers {software['transformers']}",
            steps=steps, epochs=run["train"]["epoch"], training_seconds=run["train"]["train_runtime"],
            checkpoint=chosen, num_beams=run["beam"],
            validation=validation, test=run.get("test_chosen"), note=note,
            signatures={k: v for k, v in run["test_chosen"]["signatures"].items() if k in ("bleu", "chrf")},
            repeat=file != GPU_RECIPES,
        )
    return runs


class _Hardware:
    """Short names for the hardware of a table's rows, each defined once in a line above the table."""

    def __init__(self):
        self.names: dict[tuple[str, str], str] = {}

    def __call__(self, hardware: str, software: str) -> str:
        if (hardware, software) not in self.names:
            short = next((word for word in ("H100", "Xeon", "EPYC") if word in hardware), "CPU")
            taken = sum(name.startswith(short) for name in self.names.values())
            self.names[(hardware, software)] = short if not taken else f"{short} {taken + 1}"
        return self.names[(hardware, software)]

    def line(self) -> str:
        return "Hardware: " + "; ".join(
            f"**{name}**: {hardware}, {software}" if software else f"**{name}**: {hardware}"
            for (hardware, software), name in self.names.items()
        ) + "."


def _signatures_line(runs) -> str:
    signatures = {(run.signatures["bleu"], run.signatures.get("chrf")) for run in runs}
    bleu = _joined(sorted(s for s, _ in signatures))
    chrf = _joined(sorted(c for _, c in signatures if c))
    return f"Cased detokenized sacreBLEU (`{bleu}`) and chrF (`{chrf}`)."


def _score(scores: dict | None) -> str:
    if not scores:
        return "—"
    chrf = scores.get("chrf")
    return f"{_bleu(scores['bleu'])} ({_bleu(chrf)})" if chrf is not None else _bleu(scores["bleu"])


@table("headline")
def headline(benchmarks: Benchmarks) -> str:
    """README: the recipes' Multi30k test BLEU, and the speed against MarianMTModel, each row with its hardware."""
    rows = []
    for runs, kind in ((cpu_recipe_runs(benchmarks), "CPU"), (gpu_recipe_runs(benchmarks), "GPU")):
        for run in runs.values():
            if not run.repeat:
                rows.append((
                    f"Multi30k {run.direction} test BLEU, {kind} recipe `{run.recipe}` ({run.checkpoint}, "
                    f"beam {run.num_beams})",
                    f"**{_bleu(run.test['bleu'])}**", f"{run.hardware}, {run.software}",
                ))

    def speed(label: str, result: dict, ratios: list[float]) -> tuple:
        environment = result["environment"]
        return (label, " / ".join(_times(ratio) for ratio in ratios),
                f"{_machine(environment)}, {environment['dtype']}; torch {environment['torch']}, transformers "
                f"{environment['transformers']}")

    train = benchmarks("results-cpu-recipe-train-intel.json")
    steady = train["train"]["cpu_recipe"]["label_smoothing_0.1"]["steady"]
    rows.append(speed("training vs MarianMTModel: the CPU recipes' model, label smoothing 0.1, steady target tokens/s",
                      train, [steady["ratio"]["target_tokens_per_s"]]))
    for file in ("results-cpu-generate-intel.json", "results-cpu-generate.json"):
        result = benchmarks(file)
        base = result["generate"]["base"]
        rows.append(speed("generation vs MarianMTModel: base, batch 32, greedy / beam 4 tokens/s", result,
                          [base["greedy_batch32"]["ratio"]["tokens_per_s"],
                           base["beam4_batch32"]["ratio"]["tokens_per_s"]]))
    profile = benchmarks("results-gpu-h100-profile.json")
    rows.append(speed("training vs MarianMTModel: base, label smoothing 0.1, steady target tokens/s", profile,
                      [profile["train"]["base"]["label_smoothing_0.1"]["steady"]["ratio"]["target_tokens_per_s"]]))
    generated = benchmarks("results-gpu-h100-generate-profile.json")
    base = generated["generate"]["base"]
    rows.append(speed("generation vs MarianMTModel: base, batch 512, greedy / beam 4 tokens/s", generated,
                      [base[setting]["ratio"]["tokens_per_s"] for setting in ("greedy_batch512", "beam4_batch512")]))
    return _table(("figure", "value", "hardware"), rows)


@table("recipes")
def recipes(benchmarks: Benchmarks) -> str:
    """docs/results.md: every run of every recipe, the model it scored, its validation and test scores."""
    runs = [*cpu_recipe_runs(benchmarks).values(), *gpu_recipe_runs(benchmarks).values()]
    hardware = _Hardware()
    rows = [
        (f"`{run.recipe}`", run.direction, hardware(run.hardware, run.software),
         (f"{run.steps:,} steps, " if run.steps else "") + f"{run.epochs:.2f} epochs, {run.training_seconds:,.0f} s",
         run.checkpoint, run.num_beams, _score(run.validation), _score(run.test), run.note)
        for run in runs
    ]
    header = ("recipe", "direction", "on", "training", "model scored", "beam",
              "validation BLEU (chrF)", "test_2016_flickr BLEU (chrF)", "run")
    return _block(hardware.line() + " " + _signatures_line(runs), _table(header, rows))


@table("recipes-gpu-choices")
def recipes_gpu_choices(benchmarks: Benchmarks) -> str:
    """docs/results.md: the GPU recipes' choices on validation (best checkpoint or average; beam 4 or 6)."""
    rows = []
    environment = None
    for file, step in GPU_RECIPE_RUNS:
        run = benchmarks(file)["recipes"][step]
        software = benchmarks(GPU_RECIPES_SOFTWARE)[file]
        environment = (run["device"], f"{software['precision']}; torch {run['torch']}, transformers "
                                      f"{software['transformers']}")
        averaged = run.get("validation_averaged") or run.get("validation_averaged_from_log")
        beam6 = run.get("validation_chosen_beam6")
        name = step.split(":")[1]
        rows.append((
            f"`configs/{name}.yaml`", _direction_of("-".join(name.split("_")[1:3])),
            f"{run['trainer_state']['global_step']:,}" if "trainer_state" in run else "—",
            _bleu(run["validation_best_checkpoint"]["bleu"]), _bleu(averaged["bleu"] if averaged else None),
            run["chosen"], _bleu(beam6["bleu"]) if beam6 else "—", run["beam"], _bleu(run["test_chosen"]["bleu"]),
        ))
    header = ("recipe", "direction", "steps", "validation: best checkpoint, beam 4",
              "validation: average of the last 5, beam 4", "chosen", "validation: chosen, beam 6", "beam tested",
              "test_2016_flickr BLEU")
    line = f"Hardware: {environment[0]}, {environment[1]}."
    return _block(line, _table(header, rows))


@table("ablations")
def ablations(benchmarks: Benchmarks) -> str:
    """docs/results.md: every ablation reported in BLEU, each score against its comparison, and the decision."""
    data = benchmarks("results-ablations.json")
    hardware = _Hardware()
    names = {}
    for key, machine in data["hardware"].items():
        software = ", ".join(f"{package} {benchmarks.value(version)}"
                             for package, version in machine["software"].items())
        names[key] = hardware(machine["description"], software)
    rows = []
    study = None
    for record in data["ablations"]:
        for index, score in enumerate(record["scores"]):
            first = index == 0
            setting = record["setting"] + (f" (against: {record['against']})" if record.get("against") else "")
            decision = ("yes: " if record["adopted"] else "no: ") + record["decision"]
            search = "greedy" if score["num_beams"] == 1 else f"beam {score['num_beams']}"
            rows.append((
                record["study"] if first and record["study"] != study else "",
                (_direction_of(record["direction"]) + ", " + setting) if first else "",
                f"{score['split']}, {score['checkpoint']}, {search}",
                _bleu(benchmarks.value(score["bleu"])),
                _bleu(benchmarks.value(score["against"])) if "against" in score else "—",
                names[record["hardware"]] if first else "",
                decision if first else "",
            ))
            study = record["study"]
    header = ("study", "ablation", "scored", "BLEU", "against", "on", "adopted")
    return _block(hardware.line() + " BLEU: cased detokenized sacreBLEU.", _table(header, rows))


def _training_rows(result: dict, size: str, losses: dict) -> list[tuple]:
    rows = []
    described = f"{_size(size)}, {result['settings']['max_tokens']:,}-token batches, {_lengths(result)}"
    for loss in losses.values():
        name = "cross-entropy" if loss["label_smoothing"] == 0 else f"label smoothing {loss['label_smoothing']:g}"
        for phase, label in (("steady", "steady"), ("first_epoch", "first epoch (a fresh process each)")):
            figures = loss[phase]
            rows.append((described, f"{name}, {label}, target tokens/s",
                         _rate(figures["ours"]["target_tokens_per_s"]), _rate(figures["marian"]["target_tokens_per_s"]),
                         _ratio(figures["ratio"]["target_tokens_per_s"])))
            described = ""
        steady = loss["steady"]
        peak = _flops(result["matmul_peak"]["flops_per_s"])
        rows.append(("", f"{name}, steady, % of the measured matmul peak ({peak})",
                     _percent(steady["ours"]["peak_fraction"]), _percent(steady["marian"]["peak_fraction"]),
                     _ratio(steady["ratio"]["peak_fraction"])))
        first = loss["first_epoch"]
        rows.append(("", f"{name}, peak training memory, MiB", _mib(first["ours"]["peak_memory_bytes"]),
                     _mib(first["marian"]["peak_memory_bytes"]), _ratio(first["ratio"]["peak_memory_bytes"])))
    return rows


def _training_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    results = [benchmarks(file) for file in files]
    rows = [row for result in results for size, losses in result["train"].items()
            for row in _training_rows(result, size, losses)]
    steps = _joined(result["settings"]["steps"] for result in results)
    repetitions = _joined(result["settings"]["repetitions"] for result in results)
    method = (f"Steady: the median of {repetitions} alternating passes of {steps} steps per model; first epoch: the "
              "same steps once in a fresh process per model; memory: " + _joined(
                  result["environment"]["memory_method"] for result in results) + ".")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "figure", "ours", "MarianMTModel", "ours/Marian"), rows))


def _generation_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    results = [benchmarks(file) for file in files]
    rows = []
    for result in results:
        for size, settings in result["generate"].items():
            for generated in settings.values():
                search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
                cache = "" if generated.get("cache", "dynamic") == "dynamic" else f", {generated['cache']} cache"
                rows.append((_size(size), f"{search}, batch {generated['batch_size']}{cache}",
                             _rate(generated["ours"]["tokens_per_s"]), _rate(generated["marian"]["tokens_per_s"]),
                             _ratio(generated["ratio"]["tokens_per_s"]),
                             "yes" if generated["same_output"] else "no"))
    new_tokens = _joined(g["max_new_tokens"] for r in results for s in r["generate"].values() for g in s.values())
    repetitions = _joined(result["settings"]["repetitions"] for result in results)
    method = (f"Generated tokens/s of {new_tokens} new tokens per sentence, the median of {repetitions} alternating "
              f"calls per model, {_joined(_lengths(result) for result in results)}.")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "setting", "ours, tokens/s", "MarianMTModel, tokens/s", "ours/Marian",
                          "same tokens"), rows))


def _compile_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    """Ours and Marian, eager and through torch.compile, from one run each (`scripts/benchmark.py --only compile`)."""
    results = [benchmarks(file) for file in files]
    columns = ("ours eager", "marian eager", "ours compiled", "marian compiled")
    formats = {"tokens/s": _rate, "seconds": _seconds, "FLOP/s": _flops, "share": _percent, "bytes": _mib}
    rows = []
    for result in results:
        for size, losses in result["compile"].items():
            described = f"{_size(size)}, {result['settings']['max_tokens']:,}-token batches, {_lengths(result)}"
            for loss in losses.values():
                for label, row in loss["side_by_side"].items():
                    shown = next(render for key, render in formats.items() if key in label)
                    ratio = row["ratio to marian eager"].get("ours compiled")
                    rows.append((described, label.replace(" bytes", ", MiB"),
                                 *("-" if row[name] is None else shown(row[name]) for name in columns), _ratio(ratio)))
                    described = ""
    backend = _joined(result["environment"].get("compile_backend") for result in results)
    method = (f"torch.compile with the {backend} backend (the Trainer's --torch_compile); first epoch: the steps once "
              "in a fresh process per model, its compile seconds measured by torch.compile, and its speed with them "
              "left out; steady: the median of alternating passes after one untimed pass.")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "figure", *columns, "ours compiled / Marian eager"), rows))


@table("performance-cpu-compile")
def performance_cpu_compile(benchmarks: Benchmarks) -> str:
    """Training eager and compiled, ours and Marian, on the CPU."""
    return _compile_table(benchmarks, ("results-cpu-compile.json",))


@table("performance-cpu-training")
def performance_cpu_training(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the Intel Xeon: the CPU recipes' model and the small one."""
    return _training_table(benchmarks, ("results-cpu-recipe-train-intel.json", "results-cpu-quick-intel.json"))


@table("performance-cpu-training-amd")
def performance_cpu_training_amd(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the AMD EPYC (before dropout's cheaper CPU mask)."""
    return _training_table(benchmarks, ("results-cpu-recipe-train.json", "results-cpu-quick.json"))


@table("performance-cpu-generation")
def performance_cpu_generation(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the Intel Xeon (plain nn.Linear)."""
    return _generation_table(benchmarks, ("results-cpu-generate-intel.json",))


@table("performance-cpu-generation-amd")
def performance_cpu_generation_amd(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the AMD EPYC (with the prepacked weights)."""
    return _generation_table(benchmarks, ("results-cpu-generate.json",))


@table("ctranslate2-cpu")
def ctranslate2_cpu(benchmarks: Benchmarks) -> str:
    """The CTranslate2 export against our PyTorch generate(), same weights, same process."""
    result = benchmarks("results-cpu-ctranslate2.json")
    rows = []
    for size, settings in result["ctranslate2"].items():
        for name, generated in settings.items():
            if name == "compute_types":
                continue
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            for engine, ratio in generated["ratio"].items():
                rows.append((_size(size), f"{engine.removeprefix('ctranslate2_')}, {search}, batch "
                                          f"{generated['batch_size']}",
                             _rate(generated[engine]["tokens_per_s"]), _rate(generated["pytorch"]["tokens_per_s"]),
                             _ratio(ratio), "yes" if generated[engine]["same_output"] else "no"))
    method = (f"Generated tokens/s of {result['settings']['max_new_tokens']} new tokens per sentence, the median of "
              f"{result['settings']['repetitions']} alternating calls, both engines in one process.")
    return _block(_measured_on(result, ctranslate2=True, method=method),
                  _table(("model", "compute type, setting", "CTranslate2, tokens/s",
                          "our PyTorch generate(), tokens/s", "CTranslate2/PyTorch", "same tokens as PyTorch"), rows))


@table("performance-cpu-data")
def performance_cpu_data(benchmarks: Benchmarks) -> str:
    """The data pipeline: text files to token-budget batches, and launch to the first training step."""
    results = [benchmarks("results-cpu-quick.json"), benchmarks("results-cpu-data-4.5M.json")]
    rows = []
    for result in results:
        data = result["data"]
        pipeline, cached = data["pipeline"], data["pipeline_cached"]
        stages = " + ".join(_seconds(seconds) for seconds in pipeline["stage_seconds"].values())
        rows.append((
            f"{data['corpus']['pairs']:,}", f"{_seconds(pipeline['seconds'])} ({stages})",
            _mib(pipeline["peak_rss_bytes"]), _seconds(cached["seconds"]),
            f"{_seconds(data['first_step']['setup_seconds'])} / {_seconds(data['first_step']['first_step_seconds'])}",
            f"{_seconds(data['first_step_cached']['setup_seconds'])} / "
            f"{_seconds(data['first_step_cached']['first_step_seconds'])}",
        ))
    header = ("synthetic pairs", "load + prepare + index, s", "peak RSS, MiB", "the same on the cache it left, s",
              "`accelerate launch scripts/train.py`: setup done / first step, s", "a second launch (cached), s")
    return _block(_measured_on(*results), _table(header, rows))


@table("performance-gpu-training")
def performance_gpu_training(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the H100: Multi30k's lengths (label smoothing), and synthetic lengths."""
    return _training_table(benchmarks, ("results-gpu-h100-profile.json", "results-gpu-h100.json"))


@table("performance-gpu-training-profile")
def performance_gpu_training_profile(benchmarks: Benchmarks) -> str:
    """Where a steady training pass's GPU time goes, by kind of kernel."""
    result = benchmarks("results-gpu-h100-profile.json")
    rows = []
    for size, losses in result["train"].items():
        for loss in losses.values():
            profile = loss["profile"]
            ours, marian = profile["ours"], profile["marian"]
            steps = loss["workload"]["steps"]
            rows.append((f"kernel time of one {steps}-step pass, ms (GPU busy, % of a steady pass)",
                         f"{1e3 * ours['profiled_seconds']:,.0f} ({_percent(ours['busy_fraction'])})",
                         f"{1e3 * marian['profiled_seconds']:,.0f} ({_percent(marian['busy_fraction'])})",
                         _ratio(ours["profiled_seconds"] / marian["profiled_seconds"])))
            for kind in dict.fromkeys([*ours["kinds"], *marian["kinds"]]):
                mine, theirs = ours["kinds"].get(kind, 0.0), marian["kinds"].get(kind, 0.0)
                rows.append((f"{kind}, ms", f"{1e3 * mine:,.0f}", f"{1e3 * theirs:,.0f}",
                             _ratio(mine / theirs if theirs else None)))
    method = (f"{_size(size)}, label smoothing 0.1, {_lengths(result)}: one more training pass per model under "
              "torch.profiler, its GPU kernels' time summed by kind.")
    return _block(_measured_on(result, method=method),
                  _table(("figure", "ours", "MarianMTModel", "ours/Marian"), rows))


@table("performance-gpu-generation")
def performance_gpu_generation(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the H100, with the dynamic and the static (compiled) cache."""
    return _generation_table(benchmarks, ("results-gpu-h100.json",))


@table("performance-gpu-generation-profile")
def performance_gpu_generation_profile(benchmarks: Benchmarks) -> str:
    """generate() on the H100 with Multi30k's lengths, and how much of a call the GPU computes."""
    result = benchmarks("results-gpu-h100-generate-profile.json")
    rows = []
    for size, settings in result["generate"].items():
        for generated in settings.values():
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            ours, marian, profile = generated["ours"], generated["marian"], generated["profile"]
            rows.append((
                f"{search}, batch {generated['batch_size']}",
                f"{_rate(ours['tokens_per_s'])} / {_rate(marian['tokens_per_s'])}",
                _ratio(generated["ratio"]["tokens_per_s"]),
                f"{ours['generated_tokens'] / ours['tokens_per_s']:.3f} / "
                f"{marian['generated_tokens'] / marian['tokens_per_s']:.3f}",
                " / ".join(f"{1e3 * profile[model]['profiled_seconds']:,.1f}" for model in ("ours", "marian")),
                f"{_percent(profile['ours']['busy_fraction'])} / {_percent(profile['marian']['busy_fraction'])}",
            ))
    method = (f"{_size(size)}, {result['settings']['caches'][0]} cache, {result['settings']['max_new_tokens']} new "
              f"tokens, {_lengths(result)}; the median of {result['settings']['repetitions']} alternating calls; one "
              "more call per model and setting under torch.profiler gives its kernels' time, and GPU busy is that time "
              "over a timed call's.")
    return _block(_measured_on(result, method=method),
                  _table(("setting", "tokens/s, ours / Marian", "ours/Marian", "a call, s, ours / Marian",
                          "its kernels, ms, ours / Marian", "GPU busy, ours / Marian"), rows))


@table("model-card")
def model_card_results(benchmarks: Benchmarks) -> str:
    """model_card.md: the reference model's (the de->en CPU recipe's) scores, in the template's columns."""
    run = benchmarks(CPU_RECIPES)["runs"][REFERENCE_RUN]
    software = run["software"]
    line = (f"Hardware: {run['hardware']}, {run['processes']} process of {run['threads']} threads, "
            f"{run['precision']}; software: torch {software['torch']}, transformers {software['transformers']}, "
            f"sacreBLEU {software['sacrebleu']}. Scored: {run['checkpoint']}, beam {run['num_beams']}.")
    rows = [(scores["split"], f"{scores['sentences']:,}", _bleu(scores["bleu"]), _bleu(scores.get("chrf")))
            for scores in (run["validation"], run["test"])]
    return _block(line, _table(("split", "sentences", "sacreBLEU", "chrF"), rows))


# --- the blocks in a document -----------------------------------------------------------------------------------


@dataclass
class Block:
    """One marker block: its table's name, the line of its opening marker (from 1) and its content's span."""

    name: str
    line: int
    start: int
    end: int

    def content(self, text: str) -> str:
        return text[self.start:self.end]


def find_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The marker blocks of `text`, and a problem for each marker that does not open or close a block (a line that
    looks like a marker but is not one exactly, a block not closed before the next opens or the text ends, a closing
    marker without an opening one)."""
    blocks, problems = [], []
    opened = None  # (name, line, content start)
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.rstrip("\r\n")
        match = _OPEN.fullmatch(stripped)
        if match:
            if opened:
                problems.append(f"line {opened[1]}: block {opened[0]!r} is not closed before line {number} opens "
                                f"another (close it with a line {CLOSE})")
            opened = (match["name"], number, offset + len(line))
        elif stripped == CLOSE:
            if opened:
                blocks.append(Block(opened[0], opened[1], opened[2], offset))
                opened = None
            else:
                problems.append(f"line {number}: {CLOSE} closes no block")
        elif _MARKER.match(stripped.lstrip()):
            problems.append(f"line {number}: {stripped.strip()!r} is not a figures marker: a block opens with a line "
                            f"'<!-- figures: NAME -->' and closes with a line '{CLOSE}'")
        offset += len(line)
    if opened:
        problems.append(f"line {opened[1]}: block {opened[0]!r} is not closed (close it with a line {CLOSE})")
    return blocks, problems


def missing_benchmark_files(text: str, root: str | Path = REPOSITORY) -> list[str]:
    """The `benchmarks/....json` files `text` names (in prose or a link) that do not exist under `root`."""
    return [name for name in dict.fromkeys(_BENCHMARK_FILE.findall(text)) if not (Path(root) / name).is_file()]


def update_text(
    text: str, root: str | Path = REPOSITORY, benchmarks: Benchmarks | None = None
) -> tuple[str, list[str]]:
    """`text` with every marker block's content rendered afresh, and the problems that leave a block as it was (an
    unknown table, a broken marker, a JSON that cannot be read)."""
    benchmarks = benchmarks or Benchmarks(root)
    blocks, problems = find_blocks(text)
    pieces, position = [], 0
    for block in blocks:
        try:
            rendered = render_table(block.name, benchmarks=benchmarks)
        except FiguresError as error:
            problems.append(f"line {block.line}: block {block.name!r}: {error}")
            continue
        pieces += [text[position:block.start], rendered]
        position = block.end
    pieces.append(text[position:])
    return "".join(pieces), problems


def check_text(text: str, root: str | Path = REPOSITORY, benchmarks: Benchmarks | None = None) -> list[str]:
    """What is wrong with a document's figures: each stale block (its content is not what its JSON renders), each
    unknown table, each broken marker, each `benchmarks/....json` named that does not exist."""
    benchmarks = benchmarks or Benchmarks(root)
    blocks, problems = find_blocks(text)
    for block in blocks:
        try:
            rendered = render_table(block.name, benchmarks=benchmarks)
        except FiguresError as error:
            problems.append(f"line {block.line}: block {block.name!r}: {error}")
            continue
        if block.content(text) != rendered:
            problems.append(f"line {block.line}: block {block.name!r} is stale: it differs from what its JSON renders "
                            "(python scripts/render_figures.py rewrites it)")
    problems += [f"names {name}, which does not exist" for name in missing_benchmark_files(text, root)]
    return problems


def documents(root: str | Path = REPOSITORY) -> list[Path]:
    """The documents whose figures are rendered: README.md, docs/*.md and model_card.md (those that exist)."""
    root = Path(root)
    candidates = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / REFERENCE_CARD]
    return [path for path in candidates if path.is_file()]


def check_documents(root: str | Path = REPOSITORY, *, model_card: bool = True) -> list[str]:
    """Every problem of every document, each starting with the document's path (relative to `root`); with
    `model_card`, also whether model_card.md is what its template, config and JSON render."""
    root = Path(root)
    benchmarks = Benchmarks(root)
    problems = [
        f"{path.relative_to(root)}: {problem}"
        for path in documents(root)
        for problem in check_text(path.read_text(encoding="utf-8"), root, benchmarks)
    ]
    card = root / REFERENCE_CARD
    if model_card and card.is_file() and card.read_text(encoding="utf-8") != reference_model_card(root):
        problems.append(f"{REFERENCE_CARD}: differs from the card its template, config and JSON render "
                        "(python scripts/render_figures.py rewrites it)")
    return problems


def update_documents(root: str | Path = REPOSITORY, *, model_card: bool = True) -> tuple[list[Path], list[str]]:
    """Rewrite model_card.md (with `model_card`) and every marker block of every document; returns the files
    changed and the problems left (unknown tables, broken markers, missing JSON files named)."""
    from ..common.file_writes import replace_text

    root = Path(root)
    changed = []
    if model_card:
        card = root / REFERENCE_CARD
        text = reference_model_card(root)
        if not card.is_file() or card.read_text(encoding="utf-8") != text:
            replace_text(card, text)
            changed.append(card)
    benchmarks = Benchmarks(root)
    problems = []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        updated, found = update_text(text, root, benchmarks)
        problems += [f"{path.relative_to(root)}: {problem}" for problem in found]
        problems += [f"{path.relative_to(root)}: names {name}, which does not exist"
                     for name in missing_benchmark_files(updated, root)]
        if updated != text:
            replace_text(path, updated)
            changed.append(path)
    return changed, problems


# --- the reference model's card ---------------------------------------------------------------------------------


_RESULTS_TABLE = re.compile(r"^\| split \| sentences \| sacreBLEU \|.*\n(?:\|.*\n)*", re.MULTILINE)


def users_command(command: str) -> str:
    """A recorded command as a user runs it: with Multi30k where docs/data.md puts it."""
    return command.replace(RUN_DATA_DIR, USERS_DATA_DIR)


def reference_model_card_context(root: str | Path = REPOSITORY) -> dict:
    """Every field of `model_card.md`'s template for the reference model, the averaged de->en CPU recipe, without
    its model folder: the recipe's config (as `scripts/train.py` parses it) gives the architecture and training,
    `benchmarks/results-recipes-cpu.json` the run (steps, time, hardware, data, scores and their signatures).
    `model_card_context` builds it, as for any trained model, from stand-ins for the finished run."""
    import torch

    from .. import AnnotatedTransformerForConditionalGeneration
    from ..inference import model_card as card
    from ..training.arguments import model_config, parse_arguments
    from ..training.schedule import schedule_description

    root = Path(root)
    recipes = Benchmarks(root)(CPU_RECIPES)
    run, data = recipes["runs"][REFERENCE_RUN], recipes["data"]
    config_path = root / run["recipe"]
    model_args, data_args, training_args, _ = parse_arguments(
        ["--config", str(config_path), "--data_dir", USERS_DATA_DIR]
    )
    output_dir = run["commands"][1].split("--output_dir ")[1].split()[0]  # the averaged model's folder
    training_args.output_dir = output_dir
    with torch.device("meta"):  # the parameter count, without allocating the weights
        model = AnnotatedTransformerForConditionalGeneration(model_config(model_args, data_args))
    trainer = SimpleNamespace(
        model=model, args=SimpleNamespace(device=torch.device("cpu")), precision="fp32",
        run_description=f"{run['processes']} process(es) on cpu (NO, fp32, {run['threads']} thread(s))",
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
        splits, results, run["signatures"], config_path=config_path, command="\n".join(users_command(command) for command in run["commands"]),
        schedule=schedule_description(training_args.lr_scheduler, training_args.learning_rate,
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
    from ..inference.model_card import TEMPLATE_PATH, render_model_card

    text = render_model_card(reference_model_card_context(root))
    block = f"<!-- figures: model-card -->\n{render_table('model-card', root)}{CLOSE}\n"
    text, found = _RESULTS_TABLE.subn(lambda _: block, text, count=1)
    if not found:
        raise FiguresError(f"the model card template {TEMPLATE_PATH} has no results table "
                           "('| split | sentences | sacreBLEU | ...') for the block 'model-card' to replace")
    return text


__all__ = [
    "REPOSITORY", "TABLES", "Benchmarks", "Block", "FiguresError", "check_documents", "check_text", "documents",
    "find_blocks", "load", "missing_benchmark_files", "reference_model_card", "reference_model_card_context",
    "render_table", "update_documents", "update_text",
]
