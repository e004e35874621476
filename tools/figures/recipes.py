"""The BLEU tables: the recipes' scores (README's headline, docs/results.md), the ablations and the reference model
card's results."""

from __future__ import annotations

from dataclasses import dataclass

from .formats import (
    REFERENCE_RECIPE,
    Benchmarks,
    _bleu,
    _block,
    _direction,
    _direction_of,
    _joined,
    _machine,
    _table,
    _times,
    table,
)

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
    version: str | None = None  # the package's, where the run recorded it
    model_folder: str | None = None  # where the repository ships the model it scored, if it does


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
            note=("a repeat: " if run.get("repeat_of") else "")
            + f"{run['processes']} process, {run['threads']} threads"
            + (f", version {run['package_version']}" if run.get("package_version") else "")
            + (f"; {run['not_alone']}" if run.get("not_alone") else ""),
            signatures=run["signatures"], repeat="repeat_of" in run, version=run.get("package_version"),
            model_folder=run.get("model_folder"),
        )
    return runs


def _newest(runs: dict[str, RecipeRun]) -> list[RecipeRun]:
    """Each recipe's run with the newest package version (the first of its version where there are several), in the
    order of the recipes' first runs: the scores today's code reproduces."""
    def version(run: RecipeRun) -> tuple[int, ...]:
        return tuple(int(part) for part in (run.version or "0").split("."))

    chosen = {}
    for run in runs.values():
        if run.recipe not in chosen or version(run) > version(chosen[run.recipe]):
            chosen[run.recipe] = run
    return list(chosen.values())


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
            repeat=file != GPU_RECIPES, version=benchmarks(file).get("package_version"),
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
    gpu_runs = [(run, "; " + benchmarks(GPU_RECIPES_SOFTWARE)[key.split("#")[0]]["shared"])
                for key, run in gpu_recipe_runs(benchmarks).items() if not run.repeat]
    cpu_runs = [(run, f"; the model in `{run.model_folder}`" if run.model_folder else "")
                for run in _newest(cpu_recipe_runs(benchmarks))]
    for runs, kind in ((cpu_runs, "CPU"), (gpu_runs, "GPU")):
        for run, settings in runs:  # settings: how a run differed from its config's, where it did
            version = f", version {run.version}" if run.version else ""
            rows.append((
                f"Multi30k {run.direction} test BLEU, {kind} recipe `{run.recipe}` ({run.checkpoint}, "
                f"beam {run.num_beams}{version}{settings})",
                f"**{_bleu(run.test['bleu'])}**", f"{run.hardware}, {run.software}",
            ))

    def speed(label: str, result: dict, ratios: list[float]) -> tuple:
        environment = result["environment"]
        version = f", version {environment['package_version']}" if environment.get("package_version") else ""
        return (label + version, " / ".join(_times(ratio) for ratio in ratios),
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


def reference_run(benchmarks: Benchmarks) -> dict:
    """The reference model's run: the de->en CPU recipe's with the newest package version, the run the README's
    headline shows (`_newest`)."""
    runs = cpu_recipe_runs(benchmarks)
    chosen = next(run for run in _newest(runs) if run.recipe == REFERENCE_RECIPE)
    return benchmarks(CPU_RECIPES)["runs"][next(key for key, run in runs.items() if run is chosen)]


@table("model-card")
def model_card_results(benchmarks: Benchmarks) -> str:
    """model_card.md: the reference model's (the de->en CPU recipe's) scores, in the template's columns."""
    run = reference_run(benchmarks)
    software = run["software"]
    version = f", version {run['package_version']}" if run.get("package_version") else ""
    line = (f"Hardware: {run['hardware']}, {run['processes']} process of {run['threads']} threads, "
            f"{run['precision']}; software: torch {software['torch']}, transformers {software['transformers']}, "
            f"sacreBLEU {software['sacrebleu']}. Scored: {run['checkpoint']}, beam {run['num_beams']}{version}.")
    rows = [(scores["split"], f"{scores['sentences']:,}", _bleu(scores["bleu"]), _bleu(scores.get("chrf")))
            for scores in (run["validation"], run["test"])]
    return _block(line, _table(("split", "sentences", "sacreBLEU", "chrF"), rows))
