"""What Table 3 of the paper teaches, read from the runs the repository measured (benchmarks/results-table3-cpu.json,
which `scripts/table3.py` writes) beside the paper's own rows (benchmarks/paper-table3.json). Nothing is trained here.

`load_table3()` finds both files in a checkout and gives the rows in the paper's order (`Table3Row`): our validation
BLEU and perplexity as differences from the base row's mean, whether each is a tie (inside the base seeds' range,
as `tools.benchmarking.table3_runner.summarise` decided when the run was scored), and the paper's differences from its
own base row (newstest2013, English→German).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

# The one home of Table 3's names. Each role has one home: the rows to train, configs/table3/rows.yaml; the runner,
# tools/benchmarking/table3_runner.py (scripts/table3.py its command); the results, RESULTS_FILE, read here; the paper's
# rows, PAPER_FILE; the docs' table, tools/figures/table3_table.py; the walk's picture, `figures.table3_figure`.
RESULTS_FILE = "results-table3-cpu.json"  # the measured runs, in benchmarks/ (scripts/table3.py writes it)
PAPER_FILE = "paper-table3.json"  # the paper's own rows, in benchmarks/
BASE_ROW = "base"
# The paper reports one run per row: a difference of at most this much BLEU from its base row is within what another
# seed could move it, so it shows no clear effect, and only larger ones give a direction to agree with.
PAPER_NOISE = 0.3


@dataclass(frozen=True)
class Table3Row:
    """One row of Table 3: ours (None while it is not measured) and the paper's, as differences from each base."""

    name: str
    group: str  # "base", "A" ... "E", the paper's groups
    setting: str  # ours, scaled to the CPU recipes' model (configs/table3/rows.yaml)
    paper_setting: str
    bleu_difference: float | None  # validation BLEU minus the base row's mean
    perplexity_difference: float | None  # validation perplexity (per target token) minus the base row's mean
    bleu_tie: bool | None
    perplexity_tie: bool | None
    paper_bleu_difference: float | None  # dev BLEU minus the paper's base row
    paper_perplexity_difference: float | None


@dataclass(frozen=True)
class Table3:
    rows: list[Table3Row]
    base_bleu: float | None  # our base row's mean validation BLEU
    bleu_range: float  # the base seeds' range (max - min) of validation BLEU: a smaller difference is a tie
    perplexity_range: float
    base_seeds: int
    measured_runs: int
    planned_runs: int

    def group(self, name: str) -> list[Table3Row]:
        return [row for row in self.rows if row.group == name]


def agreement(ours: float | None, tie: bool | None, paper: float | None, paper_noise: float = 0.0) -> str:
    """How a row's difference from its base row compares with the paper's: "paper: no clear effect" where the paper's
    difference is at most `paper_noise` (`PAPER_NOISE` for BLEU: the paper's own noise) or nothing, "tie" (ours
    inside the base seeds' range), else "same direction" or "opposite direction"; "" while ours is not measured."""
    if ours is None or paper is None:
        return ""
    if abs(paper) <= paper_noise or paper == 0:
        return "paper: no clear effect"
    if tie:
        return "tie"
    return "same direction" if (ours > 0) == (paper > 0) else "opposite direction"


def benchmarks_folder(start: str | Path | None = None) -> Path:
    """The repository's benchmarks/ folder holding Table 3's results, in `start` (default: the current folder) or a
    folder above it; the walk starts from `modeling.__file__`, which is in the clone it runs from."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "benchmarks" / RESULTS_FILE).is_file():
            return folder / "benchmarks"
    raise FileNotFoundError(f"benchmarks/{RESULTS_FILE} is not in {here} or a folder above it: run the walk in a "
                            "clone of the repository")


def _difference(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None else round(value - base, 4)


def load_table3(folder: str | Path | None = None) -> Table3:
    """Table 3's rows, ours beside the paper's (see the module doc); `folder`: where both JSON files are (default:
    `benchmarks_folder()`)."""
    folder = Path(folder) if folder is not None else benchmarks_folder()
    results = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))
    paper = json.loads((folder / PAPER_FILE).read_text(encoding="utf-8"))
    runs, summary = results.get("runs", {}), results.get("summary") or {}
    rows_file = folder.parent / results.get("rows_file", "configs/table3/rows.yaml")
    settings = ({row["name"]: row["description"] for row in yaml.safe_load(rows_file.read_text(encoding="utf-8"))["rows"]}
                if rows_file.is_file() else {})
    differences = summary.get("differences", {})
    base = summary.get("base", {})
    paper_base = paper["rows"][BASE_ROW]
    rows = []
    for name, theirs in paper["rows"].items():
        measured = [key for key, run in runs.items() if run["row"] == name]
        ours = {}
        if name == BASE_ROW and measured:
            ours = {"validation_bleu": {"difference": 0.0, "tie": True},
                    "validation_perplexity": {"difference": 0.0, "tie": True}}
        elif measured:
            ours = differences.get(measured[0], {})
        bleu, perplexity = ours.get("validation_bleu", {}), ours.get("validation_perplexity", {})
        rows.append(Table3Row(
            name=name, group=theirs["paper_row"].strip("()"),
            setting=runs[measured[0]]["description"] if measured else settings.get(name, theirs["setting"]),
            paper_setting=theirs["setting"],
            bleu_difference=bleu.get("difference"), perplexity_difference=perplexity.get("difference"),
            bleu_tie=bleu.get("tie"), perplexity_tie=perplexity.get("tie"),
            paper_bleu_difference=_difference(theirs["bleu"], paper_base["bleu"]),
            paper_perplexity_difference=_difference(theirs["ppl"], paper_base["ppl"]),
        ))
    return Table3(
        rows=rows, base_bleu=base.get("validation_bleu", {}).get("mean"),
        bleu_range=base.get("validation_bleu", {}).get("range", 0.0),
        perplexity_range=base.get("validation_perplexity", {}).get("range", 0.0),
        base_seeds=summary.get("base_runs", 0), measured_runs=len(runs),
        planned_runs=results.get("planned_runs", len(runs)),
    )


def table3_lines(table: Table3, groups=("A", "B", "E")) -> list[str]:
    """The rows of `groups` as text: our difference in validation BLEU (a tie marked) beside the paper's in dev BLEU."""
    lines = [f"base: validation BLEU {table.base_bleu:.2f} over {table.base_seeds} seed(s), range "
             f"{table.bleu_range:.2f}" if table.base_bleu is not None else "base: not measured yet"]
    for group in groups:
        for row in table.group(group):
            ours = "not measured yet" if row.bleu_difference is None else f"{row.bleu_difference:+.2f}"
            paper = "—" if row.paper_bleu_difference is None else f"{row.paper_bleu_difference:+.1f}"
            compared = agreement(row.bleu_difference, row.bleu_tie, row.paper_bleu_difference, PAPER_NOISE)
            lines.append(f"({group}) {row.setting:<20} ours {ours:<16} paper {paper:<5} ({row.paper_setting})"
                         + (f": {compared}" if compared else ""))
    return lines


__all__ = ["BASE_ROW", "PAPER_FILE", "PAPER_NOISE", "RESULTS_FILE", "Table3", "Table3Row", "agreement", "benchmarks_folder",
           "load_table3", "table3_lines"]
