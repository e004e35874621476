"""Table 3 of the paper ("Variations on the Transformer architecture") as runs: every row of a rows file trained by
`scripts/train.py` from one base config, its last checkpoints averaged, scored with beam search on the validation
split (BLEU and perplexity per target token) and the test split (BLEU), into one results JSON.

A rows file (configs/table3/rows.yaml) names the base config, what every row shares (checkpoints averaged, beam),
the step budget of each device, and the rows: a name, the paper's group (A-E), what it sets (train.py's flags, by
name) and its seeds. `run_table` goes through the runs in order and:
- skips a run the results file already holds with the same settings and budget;
- resumes a run whose folder holds checkpoints (train.py's exact resume: a run killed at any point continues to the
  weights an uninterrupted run gives), and leaves a finished training alone;
- trains the first run's tokenizer once and gives it to every other run (`tokenizer/` in the output folder), so all
  rows share the data, the tokenizer, the budget, the averaging and the beam;
- writes the results file after each run (one whole-file write), with each run's difference from the base row's
  mean and the base row's seed-to-seed range, a difference inside which is called a tie.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from tools.processes import as_typed
from modeling.common.file_writes import replace_text
from modeling.common.hardware import cpu_model
from modeling.common.run_folders import list_checkpoints
from modeling.inference.evaluation import corpus_scores, read_test_set_split, stored_score
from modeling.inference.translation import corpus_perplexity, load_translation_model, translate
from modeling.learning.table3_results import BASE_ROW
from modeling.tokenization import load_tokenizers, save_tokenizers
from modeling.training.checkpoints import average_checkpoints, last_checkpoints

TOKENIZER_DIR = "tokenizer"
DEVICES = ("cpu", "cuda")
ROW_KEYS = {"name", "group", "description", "set", "seeds"}


@dataclasses.dataclass
class PlannedRow:
    """One row of the rows file: what it sets (train.py flags without `--`) and its seeds."""

    name: str
    group: str
    description: str
    settings: dict
    seeds: list[int]

    def runs(self) -> list[tuple[str, int]]:
        """(run name, seed) of each of its runs: the row's name, with `-seed<N>` when it has several seeds."""
        if len(self.seeds) == 1:
            return [(self.name, self.seeds[0])]
        return [(f"{self.name}-seed{seed}", seed) for seed in self.seeds]


@dataclasses.dataclass
class RowsFile:
    """A rows file: the base config (a train.py config file), what every row shares, the budgets and the rows."""

    path: Path
    config: Path
    averaged_checkpoints: int
    num_beams: int
    budgets: dict[str, dict]
    rows: list[PlannedRow]

    def row(self, name: str) -> PlannedRow:
        return next(row for row in self.rows if row.name == name)


def load_rows_file(path: str | os.PathLike) -> RowsFile:
    """Read and check a rows file (ValueError naming what is wrong)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: cannot be read as YAML ({error})") from None
    if not isinstance(data, dict) or not {"config", "rows", "budgets"} <= set(data):
        raise ValueError(f"{path}: a rows file maps config, budgets and rows (and optionally averaged_checkpoints, "
                         "num_beams)")
    rows = []
    for entry in data["rows"]:
        unknown = set(entry) - ROW_KEYS
        if unknown or "name" not in entry:
            raise ValueError(f"{path}: a row has name, group, description, set and seeds; got {sorted(entry)}")
        settings = {key.replace("-", "_"): value for key, value in (entry.get("set") or {}).items()}
        rows.append(PlannedRow(entry["name"], str(entry.get("group", entry["name"])), entry.get("description", ""),
                        settings, [int(seed) for seed in entry.get("seeds", [0])]))
    names = [row.name for row in rows]
    if len(set(names)) != len(names) or BASE_ROW not in names:
        raise ValueError(f"{path}: row names must be unique and include {BASE_ROW!r}; got {names}")
    config = (path.parent / data["config"]) if not Path(data["config"]).is_absolute() else Path(data["config"])
    if not config.is_file():
        config = Path(data["config"])  # relative to the working folder, as train.py's --config
    if not config.is_file():
        raise ValueError(f"{path}: its config {data['config']} does not exist")
    budgets = data["budgets"]
    if not isinstance(budgets, dict) or not set(budgets) <= set(DEVICES):
        raise ValueError(f"{path}: budgets maps a device ({', '.join(DEVICES)}) to train.py settings")
    return RowsFile(path, config, int(data.get("averaged_checkpoints", 5)), int(data.get("num_beams", 4)), budgets,
                 rows)


def flags(settings: dict) -> list[str]:
    """train.py's command-line flags for `settings` (booleans as true/false)."""
    words = []
    for key, value in settings.items():
        words += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return words


def train_command(table: RowsFile, row: PlannedRow, seed: int, run_dir: Path, device: str, data_dir: str | None,
                  tokenizer_dir: Path | None, train_script: Path) -> list[str]:
    """The `python scripts/train.py` command of one run (one process, as `accelerate launch` runs it on one device,
    without a launcher between: the training process is the runner's own child, and ends with it), resuming its last
    checkpoint if it has one. The device's budget says its precision (`bf16: true` on a GPU)."""
    command = [sys.executable, str(train_script), "--config", str(table.config), "--output_dir", str(run_dir),
               "--seed", str(seed), *flags(table.budgets[device]), *flags(row.settings)]
    if device == "cpu":
        command += ["--use_cpu", "true"]
    if data_dir is not None:
        command += ["--data_dir", str(data_dir)]
    if tokenizer_dir is not None:
        command += ["--tokenizer_name_or_path", str(tokenizer_dir)]
    if run_dir.is_dir() and list_checkpoints(run_dir):
        command += ["--resume_from_checkpoint", "last"]
    return command


def _die_with_parent() -> None:
    """In the training process, before it starts: end it when the runner dies (a killed runner leaves no training
    running on; Linux's parent-death signal, nothing elsewhere)."""
    if platform.system() == "Linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def train(command: list[str], run_dir: Path, log: Callable[[str], None]) -> None:
    """Run one training launch to its end, its output appended to `<run>.train.log` beside the run's folder (train.py
    takes an output folder of its own files only). RuntimeError when it fails."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.with_name(f"{run_dir.name}.train.log")
    start = time.perf_counter()
    with open(log_path, "a", encoding="utf-8") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        try:
            status = process.wait()
        except BaseException:  # Ctrl-C or SIGTERM to the runner: the training process stops as train.py does
            process.send_signal(signal.SIGTERM)
            process.wait()
            raise
    if status != 0:
        raise RuntimeError(f"training {run_dir.name} failed (exit status {status}); its log: {log_path}")
    log(f"{run_dir.name}: trained in {time.perf_counter() - start:.0f} s")


def check_same_run(run_dir: Path, plan: dict) -> None:
    """Note what a run trains with beside its folder (`<run>.plan.json`) before it starts, and refuse to go on with a
    folder an earlier launch began with other settings or another budget (its checkpoints would resume the wrong
    run)."""
    path = run_dir.with_name(f"{run_dir.name}.plan.json")
    if path.is_file() and json.loads(path.read_text()) != plan:
        raise ValueError(f"{run_dir} was begun with other settings or another budget ({path}): delete both to "
                         "train it afresh, or give another --output_dir")
    if not path.is_file():
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps(plan) + "\n")


def average_whole(checkpoints: list[Path], averaged: Path) -> None:
    """Average `checkpoints` into `averaged`, which appears only once the average is whole: it is written beside it
    (`<name>.partial`, begun again if a killed run left one) and renamed into place last."""
    partial = averaged.with_name(f"{averaged.name}.partial")
    if partial.exists():
        shutil.rmtree(partial)
    average_checkpoints(checkpoints, partial)
    partial.rename(averaged)


def training_seconds(run_dir: Path) -> float | None:
    """The run's training time across its launches, as its final trainer_state.json records it (`TrainingClock`:
    the time after the last checkpoint of a killed launch is not counted, its steps being trained again)."""
    state = json.loads((run_dir / "trainer_state.json").read_text())
    seconds = state.get("stateful_callbacks", {}).get("TrainingClock", {}).get("args", {}).get("seconds_before")
    return round(seconds, 1) if isinstance(seconds, (int, float)) else None


def finished(run_dir: Path, max_steps: int) -> bool:
    """Whether the run's folder holds its final model after `max_steps` steps."""
    state = run_dir / "trainer_state.json"
    if not (run_dir / "config.json").is_file() or not state.is_file():
        return False
    return json.loads(state.read_text()).get("global_step") == max_steps


def score(model_dir: Path, data_dir: str | None, source_lang: str | None, target_lang: str | None, num_beams: int,
          device: str, test_split: str) -> dict:
    """Validation BLEU and perplexity, test BLEU of a model folder, beam `num_beams` (evaluate.py's scoring)."""
    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device=device)
    scores = {}
    for name, split in (("validation", "validation"), ("test", test_split)):
        if data_dir is None:
            test_set = _synthetic_split(split)
        else:
            test_set = read_test_set_split(data_dir, split, source_lang, target_lang)
        hypotheses = translate(test_set.sources, model, tokenizer, target_tokenizer, num_beams=num_beams,
                               max_tokens=4096)
        bleu = corpus_scores(hypotheses, test_set.references)[0]["bleu"]
        scores[name] = {"split": split, "sentences": len(test_set.sources), "bleu": stored_score(bleu)}
        if name == "validation":
            perplexity = corpus_perplexity(test_set.sources, test_set.references, model, tokenizer,
                                           target_tokenizer)
            scores[name]["perplexity"] = round(perplexity, 4)
    scores["parameters"] = model.num_parameters()
    return scores


def _synthetic_split(split: str):
    """A split of the embedded copy task (the rows file's config trains on it when no --data_dir is given)."""
    from modeling.data.corpus import synthetic_task_dataset
    from modeling.inference.evaluation import EvaluationSet

    pairs = synthetic_task_dataset()[split][:]
    return EvaluationSet(split, pairs["source"], pairs["target"], {"synthetic": "copy", "split": split})


def summarise(runs: dict) -> dict:
    """The base row's mean and seed-to-seed range (max - min) of each figure, and each run's difference from that
    mean, called a tie when inside the range."""
    figures = {"validation_perplexity": ("validation", "perplexity"), "validation_bleu": ("validation", "bleu"),
               "test_bleu": ("test", "bleu")}
    base = [run for run in runs.values() if run["row"] == BASE_ROW]
    if not base:
        return {}
    summary = {"base_runs": len(base), "base": {}, "differences": {}}
    for figure, (split, key) in figures.items():
        values = [run[split][key] for run in base]
        summary["base"][figure] = {"mean": round(statistics.fmean(values), 4),
                                   "range": round(max(values) - min(values), 4)}
    for name, run in runs.items():
        summary["differences"][name] = {}
        for figure, (split, key) in figures.items():
            base_figure = summary["base"][figure]
            difference = round(run[split][key] - base_figure["mean"], 4)
            summary["differences"][name][figure] = {
                "difference": difference, "tie": abs(difference) <= base_figure["range"]}
    return summary


def _environment(device: str) -> dict:
    import transformers

    from .run import _git_commit, _version

    return {
        "hardware": torch.cuda.get_device_name() if device == "cuda" else f"{os.cpu_count()}-core {cpu_model()}",
        "device": device, "threads": torch.get_num_threads() if device == "cpu" else None,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "package_version": _version("annotated-transformer-hf"), "git_commit": _git_commit(),
        "python": platform.python_version(),
    }


def run_table(rows_file: str | os.PathLike, output_dir: str | os.PathLike, results_path: str | os.PathLike, *,
              train_script: str | os.PathLike, data_dir: str | None = None, device: str = "cpu",
              only: list[str] | None = None, log: Callable[[str], None] = print) -> dict:
    """Train, average and score every run of the rows file not yet in `results_path` (see the module docstring)
    with `train_script` (scripts/train.py); returns the results. `only`: the names of the rows to run (the base row's
    runs are needed for differences)."""
    if device not in DEVICES:
        raise ValueError(f"--device {device}: choose one of {', '.join(DEVICES)}")
    table = load_rows_file(rows_file)
    if device not in table.budgets:
        raise ValueError(f"{table.path} has no budget for {device}: add one under budgets")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is available")
    unknown = sorted(set(only or []) - {row.name for row in table.rows})
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: no such row in {table.path}; rows: "
                         f"{', '.join(row.name for row in table.rows)}")
    if data_dir is not None and not Path(data_dir).exists():
        raise ValueError(f"--data_dir {data_dir} does not exist")
    output_dir, results_path = Path(output_dir), Path(results_path)
    train_script = Path(train_script)
    base_config = yaml.safe_load(table.config.read_text(encoding="utf-8"))
    budget = table.budgets[device]
    max_steps = int(budget.get("max_steps", base_config.get("max_steps")))
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if results.get("runs") and results.get("base_config") != base_config:
        raise ValueError(f"{results_path} holds runs of another base config than {table.config}: give another "
                         "--results, or move it away to run the table again")
    results.update({
        "about": "Table 3 of the paper at this corpus's scale: every row trained from the base config, the last "
                 f"{table.averaged_checkpoints} checkpoints averaged, scored with beam {table.num_beams}; "
                 "perplexity per target token on the validation split.",
        "command": as_typed(["python", "scripts/table3.py", "--rows", str(table.path), "--device", device,
                             *(["--data_dir", str(data_dir)] if data_dir is not None else [])]),
        "rows_file": str(table.path), "config": str(table.config), "base_config": base_config,
        "planned_runs": sum(len(row.runs()) for row in table.rows), "device": device,
        "budget": {"max_steps": max_steps, **budget, "averaged_checkpoints": table.averaged_checkpoints,
                   "num_beams": table.num_beams},
    })
    runs = results.setdefault("runs", {})
    tokenizer_dir = output_dir / TOKENIZER_DIR
    for row in table.rows:
        if only and row.name not in only:
            continue
        for name, seed in row.runs():
            settings = {"seed": seed, **row.settings}
            done = runs.get(name)
            if done and done.get("settings") == settings and done.get("budget") == results["budget"]:
                log(f"{name}: done already (in {results_path})")
                continue
            run_dir = output_dir / name
            check_same_run(run_dir, {"settings": settings, "budget": results["budget"]})
            if not finished(run_dir, max_steps):
                command = train_command(table, row, seed, run_dir, device, data_dir,
                                        tokenizer_dir if tokenizer_dir.is_dir() else None, train_script)
                log(f"{name}: training ({as_typed(command)})")
                train(command, run_dir, log)
            if not tokenizer_dir.is_dir():  # the first run trained it: every other run uses it
                save_tokenizers(load_tokenizers(run_dir), tokenizer_dir)
            averaged = output_dir / f"{name}-avg{table.averaged_checkpoints}"
            if not averaged.is_dir():  # the folder's name is the "done" mark: given last, to a whole average
                average_whole(last_checkpoints(run_dir, table.averaged_checkpoints), averaged)
            scores = score(averaged, data_dir, base_config.get("source_lang"), base_config.get("target_lang"),
                           table.num_beams, device, "test_2016_flickr" if data_dir is not None else "test")
            runs[name] = {
                "row": row.name, "group": row.group, "description": row.description, "settings": settings,
                "budget": results["budget"], "parameters": scores.pop("parameters"),
                "training_seconds": training_seconds(run_dir),
                **scores, "environment": _environment(device),
            }
            results["summary"] = summarise(runs)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            replace_text(results_path, json.dumps(results, indent=1, ensure_ascii=False) + "\n")
            log(f"{name}: validation BLEU {scores['validation']['bleu']:.2f}, perplexity "
                f"{scores['validation']['perplexity']:.2f}; test BLEU {scores['test']['bleu']:.2f}")
    results["summary"] = summarise(runs)
    return results


__all__ = ["PlannedRow", "RowsFile", "average_whole", "finished", "load_rows_file", "run_table", "summarise",
           "train_command"]
