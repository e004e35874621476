"""docs/results.md's Table 3: each row of configs/table3/rows.yaml as measured (benchmarks/results-table3-cpu.json,
written by scripts/table3.py) beside the paper's own row (benchmarks/paper-table3.json)."""

from __future__ import annotations

from modeling.learning.table3_results import BASE_ROW, PAPER_FILE, PAPER_NOISE, RESULTS_FILE, agreement, load_table3

from .formats import Benchmarks, FiguresError, _block, _table, table


def _figure(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _difference(entry: dict | None) -> str:
    """A difference from the base row's mean, marked "tie" when inside the base seeds' range."""
    if entry is None:
        return "—"
    return f"{entry['difference']:+.2f}" + (" (tie)" if entry["tie"] else "")


def _mean(statistic: dict, seeds: int) -> str:
    """The base row's mean, and its seeds' range (max - min) beside it (the one figure while one seed is measured)."""
    if seeds == 1:
        return f"{statistic['mean']:.2f}"
    return f"{statistic['mean']:.2f} (range {statistic['range']:.2f})"


def _params(count) -> str:
    return "—" if count is None else f"{count / 1e6:.2f}M"


@table("table3")
def table3(benchmarks: Benchmarks) -> str:
    """Ours (validation perplexity and BLEU, test BLEU, the differences from the base row) beside the paper's."""
    paper = benchmarks(PAPER_FILE)
    try:
        results = benchmarks(RESULTS_FILE)
    except FiguresError:
        results = {"runs": {}, "summary": {}}
    runs, summary = results["runs"], results.get("summary") or {}
    differences = summary.get("differences", {})
    rows = []
    for name, theirs in paper["rows"].items():
        measured = {key: run for key, run in runs.items() if run["row"] == name}
        compared = ""  # our difference in BLEU against the paper's, for a measured row other than the base
        if name == "base" and measured:
            base = summary["base"]
            ours = (*(_mean(base[key], summary["base_runs"]) for key in ("validation_perplexity", "validation_bleu",
                                                                          "test_bleu")), "", "")
            parameters = next(iter(measured.values()))["parameters"]
        elif measured:
            (key, run), = measured.items()
            bleu = differences.get(key, {}).get("validation_bleu")
            ours = (_figure(run["validation"]["perplexity"]), _figure(run["validation"]["bleu"]),
                    _figure(run["test"]["bleu"]), _difference(differences.get(key, {}).get("validation_perplexity")),
                    _difference(bleu))
            compared = agreement(bleu and bleu["difference"], bleu and bleu["tie"],
                                 round(theirs["bleu"] - paper["rows"]["base"]["bleu"], 4), PAPER_NOISE)
            parameters = run["parameters"]
        else:
            ours, parameters = ("not measured yet", "", "", "", ""), None
        description = next((run["description"] for run in measured.values()), "")
        rows.append((f"`{name}`", description, _params(parameters), *ours, theirs["paper_row"], theirs["setting"],
                     _figure(theirs["ppl"]), _figure(theirs["bleu"], 1),
                     "—" if theirs["params"] is None else f"{theirs['params']}M", compared))
    header = ("row", "ours", "params", "PPL (val)", "BLEU (val)", "BLEU (test)", "Δ PPL", "Δ BLEU (val)", "paper",
              "paper's setting", "PPL (dev)", "BLEU (dev)", "params", "Δ BLEU against the paper's")
    environments = [run["environment"] for run in runs.values()]
    if environments:
        environment = environments[0]
        budget = results["budget"]
        hours = sum(run["training_seconds"] for run in runs.values()) / 3600
        languages = f"{results['base_config']['source_lang']}→{results['base_config']['target_lang']}"
        line = (f"Hardware: {environment['hardware']}, {environment['device']}"
                f"{', %d threads' % environment['threads'] if environment.get('threads') else ''}; software: torch "
                f"{environment['torch']}, transformers {environment['transformers']}; measured with version "
                f"{', '.join(sorted({e['package_version'] for e in environments if e.get('package_version')}))}. "
                f"Each run: {budget['max_steps']:,} steps, the average of its last {budget['averaged_checkpoints']} "
                f"saves, beam {budget['num_beams']}; Multi30k {languages}, validation = val, test = test_2016_flickr; "
                f"perplexity per target BPE token. The base row: the mean of its seeds and their range, max - min "
                f"({summary['base_runs']} measured); a difference inside the range is a tie; the paper's own BLEU "
                f"differences of at most {PAPER_NOISE} (one run per row) show no clear effect. Measured: {len(runs)} of "
                f"{results['planned_runs']} runs, trained in {hours:.1f} hours in all.")
    else:
        line = "Hardware: none yet; software: torch and transformers as installed. No run measured yet."
    return _block(line, _table(header, rows), paper["source"] + ".", *_reading(benchmarks))


def _reading(benchmarks: Benchmarks) -> list[str]:
    """Paragraphs under the table: the measured rows grouped by how their BLEU and perplexity move against the
    paper's, and which of the paper's differences are no bigger than the base seeds' range (where a tie here is what
    the paper's effect predicts)."""
    if not (benchmarks.folder / RESULTS_FILE).is_file():
        return []
    table = load_table3(benchmarks.folder)
    varied = [row for row in table.rows if row.name != BASE_ROW]
    measured = [row for row in varied if row.bleu_difference is not None]
    if table.base_bleu is None or not measured:
        return []
    parts = [f"How the rows read against the paper's. Measured: {len(measured)} of the {len(varied)} varied rows, "
             f"against a base row of {table.base_seeds} seed(s) whose validation BLEU spans {table.bleu_range:.2f} "
             f"and perplexity {table.perplexity_range:.2f}."]
    for metric, ours, tie, paper, digits, noise in (
        ("BLEU", "bleu_difference", "bleu_tie", "paper_bleu_difference", 1, PAPER_NOISE),
        ("perplexity", "perplexity_difference", "perplexity_tie", "paper_perplexity_difference", 2, 0.0),
    ):
        found: dict[str, list[str]] = {}
        for row in measured:
            compared = agreement(getattr(row, ours), getattr(row, tie), getattr(row, paper), noise)
            found.setdefault(compared or "the paper gives none", []).append(
                f"`{row.name}` ({getattr(row, ours):+.2f}; paper "
                + ("—" if getattr(row, paper) is None else f"{getattr(row, paper):+.{digits}f}") + ")")
        said = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in found.items())
        parts.append(f"{metric[0].upper()}{metric[1:]}, each row against the paper's: {said}.")
    small = [f"`{row.name}` ({row.paper_bleu_difference:+.1f})" for row in varied
             if row.paper_bleu_difference is not None and abs(row.paper_bleu_difference) <= table.bleu_range]
    if small:
        parts.append(f"The paper's rows whose BLEU moves by no more than that range, so that a tie here is what their "
                     f"effect predicts: {', '.join(small)}.")
    unmeasured = [f"`{row.name}`" for row in varied if row.bleu_difference is None]
    if unmeasured:
        parts.append(f"Not measured yet: {', '.join(unmeasured)}.")
    return parts


__all__ = ["table3"]
