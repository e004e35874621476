"""Every measured figure a user reads has a source: a marker block rendered from the JSON in benchmarks/, or a source
note right after the figure that names the JSON value it states, which the check reads and compares.

A measured figure is a number with a unit of time (ms, s, seconds, minutes, min, hours, h), a percentage, a ratio
(`1.3x`, `0.98×`) or a size in bytes (KiB, MiB, GiB, MB, GB). A bound or a setting is not a measurement: a figure
after "at least", "at most", "up to", "under", "within", "every", "target(s)" or "budget" is left alone, and so is
one in a table's header row or a code span. Anywhere else it needs a source:

    the run takes 34 s<!-- source: results-cpu-quick-intel.json#/main_job/launch_to_exit_seconds --> to exit
    0.93-0.98×<!-- source: results-cpu-packing.json#/runs/0/ratio, results-cpu-packing.json#/runs/1/ratio -->
    25.8 min<!-- source: results-recipes-cpu.json#/runs/x/training_seconds / 60 -->

The note (an HTML comment, which Markdown does not show) follows the figure it sources, on the same line; it gives
one value per number of the figure (two for a range "a-b"), each a JSON pointer into a file of benchmarks/,
optionally divided or multiplied by a number or by another pointer. A value matches when it rounds to the figure as
written (to its decimals). A bound's words make no measurement of an approximation: "within about 10 minutes" needs a
source as "about 10 minutes" does.

Two kinds of figure are checked beyond those with a unit. A time in words that approximates a measurement ("about a
minute", "a minute or two", "a few minutes", "well over an hour") cannot carry a source: it is named, to be written
as the measured figure with its note, or left out. A score, a number with decimals within a few words of "BLEU",
"chrF" or "perplexity", needs a source too, unless it is one of the paper's own figures (benchmarks/paper-table3.json,
or the difference of two of them), which the docs quote. `unsourced_figures` names each figure without a source and each source that does not
match; `user_texts` lists what a user reads: README.md, docs/*.md but the experiments' log (each of its entries is
a measurement in its own right, with its version and JSON) and the recipes' comments in configs/; model_card.md is
rendered whole from its template, its recipe's config and JSON (`render_figures.py --check` compares it).
"""

from __future__ import annotations

import re
from pathlib import Path

from modeling.learning.table3_results import PAPER_FILE

from .formats import REPOSITORY, Benchmarks, FiguresError

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNIT = r"ms|seconds?|s|minutes?|min|hours?|h|%|KiB|MiB|GiB|MB|GB"
# a number or a range, then a unit (spaced or not), or a ratio's x/× written against the number
FIGURE = re.compile(
    rf"(?<![\w.,/#-])(?P<figure>(?P<first>{_NUMBER})(?:\s?[-–]\s?(?P<second>{_NUMBER}))?"
    rf"(?:\s?(?P<unit>{_UNIT})(?![\w/])|(?P<ratio>[x×])(?!\w)))"
)
SOURCE = re.compile(r"<!-- source: (?P<expression>[^>]*?) -->")
_TERM = re.compile(
    r"^(?P<file>[\w.-]+\.json)#(?P<pointer>/\S*)"
    r"(?:\s*(?P<operator>[/*])\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<file2>[\w.-]+\.json)#(?P<pointer2>/\S*)))?$"
)
BOUNDS = re.compile(r"\b(?:at least|at most|up to|under|within|every|targets?|budget|limit|over)\s+$", flags=re.I)
_COUNT_WORD = r"(?:a|an|one|two|three|four|five|ten|a few|a couple of|several|some)"
_TIME_WORD = r"(?:seconds?|minutes?|hours?)"
TIME_IN_WORDS = re.compile(
    rf"\b(?:(?:about|around|roughly|nearly|almost|well over|well under|just over|just under)\s+{_COUNT_WORD}\s+"
    rf"{_TIME_WORD}|(?:a few|a couple of|several)\s+{_TIME_WORD}|an? {_TIME_WORD} or (?:two|so))\b",
    flags=re.I,
)
SCORE = re.compile(r"(?<![\w.,/#§-])(?P<score>\d+\.\d+)(?![\w.]*\d)(?!\s?(?:[x×%]|e-))")
_METRIC = re.compile(r"\b(?:BLEU|chrF|perplexit(?:y|ies))\b", flags=re.I)
METRIC_REACH = 40  # characters between a score and its metric's name
_BLOCK_OPEN = re.compile(r"^<!-- (?:figures|output|excerpt): \S+ -->$")
_BLOCK_CLOSE = re.compile(r"^<!-- /(?:figures|output|excerpt) -->$")
LOG = "docs/experiments.md"


def user_texts(root: str | Path = REPOSITORY) -> list[Path]:
    """What a user reads, apart from help texts and the rendered model_card.md: README.md, docs/*.md but the
    experiments' log, and the recipes in configs/ (their comments)."""
    root = Path(root)
    candidates = [root / "README.md", *sorted((root / "docs").glob("*.md")),
                  *sorted((root / "configs").glob("*.yaml")), *sorted((root / "configs").glob("*/*.yaml"))]
    return [path for path in candidates if path.is_file() and path.relative_to(root).as_posix() != LOG]


def _value(term: str, benchmarks: Benchmarks) -> float:
    match = _TERM.match(term.strip())
    if not match:
        raise FiguresError(f"{term.strip()!r} is not FILE.json#/pointer, optionally '/ N', '* N' or '/ FILE.json#/p'")
    value = benchmarks.value(f"{match['file']}#{match['pointer']}")
    if match["operator"]:
        other = float(match["number"]) if match["number"] else benchmarks.value(
            f"{match['file2']}#{match['pointer2']}")
        value = value / other if match["operator"] == "/" else value * other
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise FiguresError(f"{term.strip()} is {value!r}, not a number")
    return float(value)


def _matches(written: str, value: float) -> bool:
    """Whether `value` rounds to the number as `written` (to its decimals)."""
    number = written.replace(",", "")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return f"{value:.{decimals}f}" == f"{float(number):.{decimals}f}"


def paper_figures(benchmarks: Benchmarks) -> set[float]:
    """The paper's own figures the docs may quote without a source: every number of benchmarks/paper-table3.json,
    and the difference of two of one kind (two rows' BLEU, or two rows' perplexity: a row against its base)."""
    by_kind: dict[str, set[float]] = {}

    def collect(value, kind: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                collect(item, key)
        elif isinstance(value, list):
            for item in value:
                collect(item, kind)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            by_kind.setdefault(kind, set()).add(float(value))

    try:
        collect(benchmarks(PAPER_FILE), "")
    except FiguresError:
        return set()
    numbers = set().union(*by_kind.values())
    return numbers | {round(abs(a - b), 6) for kind in by_kind.values() for a in kind for b in kind}


def _scores_of_line(line: str, spans: list[tuple[int, int]]) -> list[re.Match]:
    """The numbers with decimals of `line` within METRIC_REACH characters of a metric's name, outside code spans."""
    metrics = [match.span() for match in _METRIC.finditer(line)]
    return [match for match in SCORE.finditer(line)
            if not any(start <= match.start() < end for start, end in spans)
            and any(start - METRIC_REACH <= match.end() and match.start() <= end + METRIC_REACH
                    for start, end in metrics)]


def _figures_of_line(line: str) -> list[re.Match]:
    """The measured figures of a line: outside code spans, not after a bound's words."""
    spans = [match.span() for match in re.finditer(r"`[^`]*`", line)]
    found = []
    for match in FIGURE.finditer(line):
        if any(start <= match.start() < end for start, end in spans):
            continue
        if BOUNDS.search(line[: match.start()]):
            continue
        found.append(match)
    return found


def line_problems(line: str, benchmarks: Benchmarks) -> list[str]:
    """Each figure of `line` without a source note right after it, and each note whose values do not match."""
    problems = []
    blanked = SOURCE.sub(lambda m: " " * len(m.group()), line)
    figures = _figures_of_line(blanked)
    sources = list(SOURCE.finditer(line))
    spans = [match.span() for match in re.finditer(r"`[^`]*`", blanked)]
    for words in TIME_IN_WORDS.finditer(blanked):
        if not any(start <= words.start() < end for start, end in spans):
            problems.append(f"{words.group()!r} is a measured time in words: write the measured figure with its "
                            f"source note, or leave it out")
    covered = [(figure.start(), figure.end()) for figure in figures]
    paper = None
    for score in _scores_of_line(blanked, spans):
        if any(start <= score.start() < end for start, end in covered):
            continue  # a figure with a unit, checked below
        if any(source.start() == score.end() for source in sources):
            figures.append(score)  # sourced: checked below as any figure
            continue
        paper = paper_figures(benchmarks) if paper is None else paper
        if not any(_matches(score["score"], value) for value in paper):
            problems.append(f"{score['score']!r} is a score with no source (a rendered block, or "
                            f"'<!-- source: FILE.json#/pointer -->' right after it) and not one of the paper's figures")
    for figure in figures:
        note = next((source for source in sources if source.start() == figure.end()), None)
        if note is None:
            problems.append(f"{figure.group()!r} has no source (a rendered block, or "
                            f"'<!-- source: FILE.json#/pointer -->' right after it)")
            continue
        groups = figure.groupdict()
        numbers = [number for number in (groups.get("first"), groups.get("second"), groups.get("score")) if number]
        try:
            values = [_value(term, benchmarks) for term in note["expression"].split(",")]
        except FiguresError as error:
            problems.append(f"{figure.group()!r}: {error}")
            continue
        if len(values) != len(numbers):
            problems.append(f"{figure.group()!r} states {len(numbers)} number(s), its source gives {len(values)}")
        elif not all(_matches(number, value) for number, value in zip(numbers, values)):
            shown = ", ".join(f"{value:g}" for value in values)
            problems.append(f"{figure.group()!r} is not what its source holds ({shown})")
    return problems


def unsourced_figures(text: str, benchmarks: Benchmarks, *, markdown: bool = True) -> list[str]:
    """'line N: problem' for each figure of `text` without a source, outside marker blocks (rendered), a table's
    header row, and (`markdown`) the page's printed results and excerpts."""
    problems, inside, lines = [], False, text.splitlines()
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if markdown and _BLOCK_OPEN.match(stripped):
            inside = True
            continue
        if markdown and _BLOCK_CLOSE.match(stripped):
            inside = False
            continue
        if inside:
            continue
        if markdown and number < len(lines) and re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", lines[number].strip()):
            continue  # a table's header row
        problems += [f"line {number}: {problem}" for problem in line_problems(line, benchmarks)]
    return problems


def check_sources(root: str | Path = REPOSITORY, help_texts: dict[str, str] | None = None) -> list[str]:
    """Every unsourced or mismatched figure of what a user reads (`user_texts`, and `help_texts`: script name ->
    its --help output), each starting with the file's path."""
    root = Path(root)
    benchmarks = Benchmarks(root)
    problems = [f"{path.relative_to(root).as_posix()}: {problem}"
                for path in user_texts(root)
                for problem in unsourced_figures(path.read_text(encoding="utf-8"), benchmarks,
                                                 markdown=path.suffix == ".md")]
    for name, text in (help_texts or {}).items():
        problems += [f"{name} --help: {problem}" for problem in unsourced_figures(text, benchmarks, markdown=False)]
    return problems


__all__ = ["FIGURE", "SCORE", "SOURCE", "TIME_IN_WORDS", "check_sources", "line_problems", "paper_figures",
           "unsourced_figures", "user_texts"]
