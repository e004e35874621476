"""docs/annotated.md as a program: its code excerpts, its cells and what they print, each in a block that only this
module writes, and the notebooks made from it (`notebook`).

    <!-- excerpt: modeling.modeling_annotated_transformer.SublayerConnection -->
    (a python code block: the object's live source, see `excerpts`)
    <!-- /excerpt -->

    <!-- keep: self.embeddings( | for layer in -->   right before an excerpt: abridge it to the statements that hold
    <!-- excerpt: NAME -->                          these strings (`excerpts.abridge`), `# …` for the rest, and
                                                    link the whole source after it

    ```python                       a cell: every python code block outside an excerpt; the cells run in order,
    print(...)                      in one namespace, as a notebook's do
    ```
    <!-- output: NAME -->           right after a cell: what it prints (a text code block)
    <!-- /output -->

    <!-- slow -->                   right before a cell: it trains a model (seconds); the default test run skips it
    <!-- exercise: NAME -->         around an exercise: its statement, a stub cell and a check cell
    <!-- /exercise -->
    <!-- solution: NAME -->         the break after which the page may show exercise NAME's answer; until it, the
                                    page gives it away nowhere, in code or in a printout (`giveaways`). It opens a
    (prose, excerpts)               region that shows the reference solution (consecutive breaks share one): the
    <!-- /solution -->              page shows it, the learner's notebook leaves it out (no cell there)
    <!-- page only -->             around what the notebooks leave out (how to regenerate the page, its contents)
    <!-- /page only -->

`update_text` rewrites every excerpt and runs the cells to rewrite every output; `check_text` names each block whose
content is not what the code gives now (an excerpt must match exactly; a printout's numbers may differ in the last
digits, as floating point does between machines), each unknown name and each broken marker. The pictures the page
shows are `figures/<name>.png` (`figure_names`), each drawn by the cell just above it.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import posixpath
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from modeling.common.file_writes import replace_text

from .excerpts import REPOSITORY, excerpt, resolve, source_file

PAGE = REPOSITORY / "docs" / "annotated.md"
FIGURES_DIR = REPOSITORY / "docs" / "figures"
KINDS = {"excerpt": "python", "output": "text"}  # marker word -> the code block's language
_OPEN = re.compile(r"^<!-- (?P<kind>excerpt|output|exercise): (?P<name>\S+) -->$")
_CLOSE = re.compile(r"^<!-- /(?P<kind>excerpt|output|exercise) -->$")
_PAGE_ONLY, _END_PAGE_ONLY, _SLOW = "<!-- page only -->", "<!-- /page only -->", "<!-- slow -->"
_KEEP = re.compile(r"^<!-- keep: (?P<strings>.+?) -->$")
_SOLUTION = re.compile(r"^<!-- solution: (?P<name>\S+) -->$")
_END_SOLUTION = "<!-- /solution -->"
_MARKER = re.compile(r"<!--\s*/?\s*(?:excerpt|output|exercise|page only|slow|keep|solution)\b")  # well-formed or not
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?")
_FIGURE = re.compile(r"\]\(figures/(?P<name>[\w-]+)\.png\)")
_FIGURE_LINE = re.compile(r"^!\[[^\]]*\]\(figures/(?P<name>[\w-]+)\.png\)$")


@dataclass
class Block:
    kind: str  # "excerpt" or "output"
    name: str
    line: int  # the opening marker's line number, from 1
    start: int  # the content's first and last character offsets in the text
    end: int
    keep: tuple[str, ...] = ()  # an abridged excerpt's: the strings whose statements it keeps

    def label(self) -> str:
        return f"line {self.line}: <!-- {self.kind}: {self.name} -->"


@dataclass
class Cell:
    source: str  # the code, without its fence
    line: int  # the opening fence's line number, from 1
    start: int  # the fenced block's first and last character offsets in the text
    end: int
    slow: bool = False
    exercise: str | None = None  # the exercise it belongs to
    role: str | None = None  # in an exercise: "stub" or "check"
    output: Block | None = None  # the output block right after it
    figure: str | None = None  # the picture `figures/<figure>.png` shown after it: what it draws

    def label(self) -> str:
        return f"the cell at line {self.line}"


def only_definitions(source: str) -> bool:
    """Whether a cell only imports and defines (functions, classes): what the solutions notebook carries over from
    the walk, for the exercises that build on it."""
    try:
        statements = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(statements) and all(isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                           ast.AsyncFunctionDef, ast.ClassDef))
                                    for statement in statements)


def only_choices(source: str) -> bool:
    """Whether a cell only imports and takes exercises' answers, `name = yours_or_reference("name", name)`: the
    learner's answer where its check passes, else the reference solution."""
    try:
        statements = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(statements) and all(
        isinstance(statement, (ast.Import, ast.ImportFrom)) or (
            isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)
            and getattr(statement.value.func, "id", None) == "yours_or_reference")
        for statement in statements)


@dataclass
class Page:
    """The parsed page: marker blocks, cells, the spans the notebooks leave out, and every broken marker."""

    text: str
    blocks: list[Block] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    page_only: list[tuple[int, int]] = field(default_factory=list)  # character spans, markers included
    exercises: list[tuple[str, int, int]] = field(default_factory=list)  # (name, start, end), markers included
    solutions: dict[str, int] = field(default_factory=dict)  # exercise name -> the offset of its solution break
    solution_regions: list[tuple[int, int]] = field(default_factory=list)  # character spans, markers included
    problems: list[str] = field(default_factory=list)


def parse(text: str) -> Page:
    """The blocks, cells and regions of `text`, with a description of each broken marker."""
    page = Page(text)
    opened: Block | None = None  # the excerpt or output block open
    exercise: tuple[str, int, int] | None = None  # (name, line, start offset)
    page_only: tuple[int, int] | None = None  # (line, start offset)
    solution: tuple[int, int] | None = None  # (line, start offset) of the solution region open
    fence: tuple[str, int, int] | None = None  # (language, line, start offset) of the code block open
    slow_line = last_cell = keep = None  # keep: (line, strings) of a keep line waiting for its excerpt
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if fence is not None:
            if stripped == "```":
                language, fence_line, start = fence
                if language == "python" and (opened is None or opened.kind != "excerpt"):
                    if page_only is not None:
                        page.problems.append(f"line {fence_line}: a cell inside {_PAGE_ONLY}, which the notebooks "
                                             "leave out")
                    if solution is not None:
                        page.problems.append(f"line {fence_line}: a cell inside the solution region of line "
                                             f"{solution[0]}, which the learner's notebook leaves out: put it after "
                                             f"{_END_SOLUTION}")
                    cell = Cell(text[start:offset].split("\n", 1)[1], fence_line, start, offset + len(line))
                    cell.slow, slow_line = slow_line is not None, None
                    if exercise is not None:
                        cell.exercise = exercise[0]
                        cell.role = "stub" if not any(c.exercise == exercise[0] for c in page.cells) else "check"
                    page.cells.append(cell)
                    last_cell = cell
                fence = None
            offset += len(line)
            continue
        if stripped.startswith("```"):
            fence = (stripped[3:].strip(), number, offset)
            if slow_line is not None and fence[0] != "python":
                page.problems.append(f"line {slow_line}: {_SLOW} is not followed by a python cell")
                slow_line = None
        elif stripped == _SLOW:
            slow_line = number
        elif (match := _FIGURE_LINE.match(stripped)) is not None:
            after = 0 if last_cell is None else last_cell.output.end if last_cell.output else last_cell.end
            between = re.sub(r"^<!-- /output -->$", "", text[after:offset], flags=re.MULTILINE)
            if last_cell is None or last_cell.figure is not None or between.strip():
                page.problems.append(f"line {number}: figures/{match['name']}.png does not follow the cell that "
                                     "draws it: put it right after that cell (and its output)")
            else:
                last_cell.figure = match["name"]
        elif stripped == _PAGE_ONLY:
            page_only = (number, offset)
        elif stripped == _END_PAGE_ONLY:
            if page_only is None:
                page.problems.append(f"line {number}: {_END_PAGE_ONLY} closes nothing")
            else:
                page.page_only.append((page_only[1], offset + len(line)))
                page_only = None
        elif (match := _KEEP.match(stripped)) is not None:
            keep = (number, tuple(string.strip() for string in match["strings"].split(" | ")))
            offset += len(line)
            continue
        elif (match := _SOLUTION.match(stripped)) is not None:
            if match["name"] not in {name for name, _, _ in page.exercises}:
                page.problems.append(f"line {number}: {stripped} follows no exercise {match['name']}")
            if solution is not None and text[solution[1]:offset].strip() and not all(
                    _SOLUTION.match(line.strip()) for line in text[solution[1]:offset].splitlines()):
                page.problems.append(f"line {number}: a solution break inside the region of line {solution[0]}: "
                                     f"close it first with {_END_SOLUTION}")
            page.solutions[match["name"]] = offset
            solution = solution or (number, offset)
        elif stripped == _END_SOLUTION:
            if solution is None:
                page.problems.append(f"line {number}: {_END_SOLUTION} closes no solution region")
            else:
                page.solution_regions.append((solution[1], offset + len(line)))
                solution = None
        elif _MARKER.search(stripped):
            if (match := _OPEN.match(stripped)) is not None and match["kind"] == "exercise":
                if exercise is not None:
                    page.problems.append(f"line {number}: an exercise opens inside the one of line {exercise[1]}")
                exercise = (match["name"], number, offset)
            elif match is not None:
                if opened is not None:
                    page.problems.append(f"line {number}: a block opens inside {opened.label()}, which is not closed")
                opened = Block(match["kind"], match["name"], number, offset + len(line), -1)
                if keep is not None and match["kind"] == "excerpt":
                    opened.keep, keep = keep[1], None
                if opened.kind == "output":
                    if last_cell is None or last_cell.output is not None or text[last_cell.end:offset].strip():
                        page.problems.append(f"{opened.label()} does not follow a cell: put it right after the "
                                             "cell whose printout it holds")
                    else:
                        last_cell.output = opened
            elif (match := _CLOSE.match(stripped)) is not None and match["kind"] == "exercise":
                if exercise is None:
                    page.problems.append(f"line {number}: {stripped} closes no open exercise")
                else:
                    page.exercises.append((exercise[0], exercise[2], offset + len(line)))
                    roles = [cell.role for cell in page.cells if cell.exercise == exercise[0]]
                    if roles != ["stub", "check"]:
                        page.problems.append(f"line {exercise[1]}: exercise {exercise[0]} holds {len(roles)} cells; "
                                             "give it a stub cell and a check cell")
                    exercise = None
            elif match is not None:
                if opened is None or opened.kind != match["kind"]:
                    page.problems.append(f"line {number}: {stripped} closes no open {match['kind']} block")
                else:
                    opened.end = offset
                    page.blocks.append(opened)
                opened = None
            else:
                page.problems.append(f"line {number}: a malformed marker {stripped!r} (write <!-- excerpt: NAME -->, "
                                     "<!-- output: NAME -->, <!-- exercise: NAME -->, <!-- slow -->, "
                                     "<!-- page only --> and their closing <!-- /... -->, <!-- keep: A | B --> or "
                                     "<!-- solution: NAME --> ... <!-- /solution -->)")
        if keep is not None:
            page.problems.append(f"line {keep[0]}: <!-- keep: ... --> is not followed by an excerpt: put it right "
                                 "before the <!-- excerpt: NAME --> it abridges")
            keep = None
        offset += len(line)
    unclosed = [(opened, lambda: opened.label()), (exercise, lambda: f"line {exercise[1]}: exercise {exercise[0]}"),
                (page_only, lambda: f"line {page_only[0]}: {_PAGE_ONLY}"),
                (solution, lambda: f"line {solution[0]}: the solution region"),
                (fence, lambda: f"line {fence[1]}: a code block")]
    page.problems += [f"{label()} is not closed" for still_open, label in unclosed if still_open is not None]
    names = [block.name for block in page.blocks if block.kind == "output"]
    page.problems += [f"output {name} appears more than once" for name in sorted({n for n in names
                                                                                  if names.count(n) > 1})]
    return page


def find_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The excerpt and output blocks of `text`, and a description of each broken marker."""
    page = parse(text)
    return page.blocks, page.problems


class CellError(Exception):
    """A cell of the page raised: which one, and the error."""


def run_cells(cells: list[Cell], skip: Callable[[Cell], bool] = lambda cell: False) -> list[str | None]:
    """Run `cells` in order in one fresh namespace, as a notebook's kernel would, and return what each printed (None
    for a skipped one); CellError names the cell that raised. The caller's random state is left as it was."""
    namespace: dict = {"__name__": "__main__"}
    printed = []
    with torch.random.fork_rng():
        for cell in cells:
            if skip(cell):
                printed.append(None)
                continue
            buffer = io.StringIO()
            try:
                with contextlib.redirect_stdout(buffer):
                    exec(compile(cell.source, filename := f"<docs/annotated.md, {cell.label()}>", "exec"), namespace)
            except Exception as error:
                lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                         if frame.filename == filename]  # the cell's own frames, not the library's
                raise CellError(f"{cell.label()} raised {type(error).__name__} (its line {lines[-1]}): "
                                f"{str(error).splitlines()[0] if str(error) else ''}") from error
            printed.append(buffer.getvalue())
    return printed


def walk_namespace(text: str) -> dict:
    """What the page's cells define, without what they compute: its first cell (the imports), then, in order, each
    exercise's stub, each cell that only defines (`only_definitions`) and each that only takes answers
    (`only_choices`), as a notebook whose exercises are left as they are: every exercise's name is then its
    reference solution. What the choices print is left out."""
    cells = parse(text).cells
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for cell in cells:
            if cell is cells[0] or cell.role == "stub" or (not cell.exercise and (
                    only_definitions(cell.source) or only_choices(cell.source))):
                exec(compile(cell.source, f"<docs/annotated.md, {cell.label()}>", "exec"), namespace)
    return namespace


def render_block(kind: str, name: str, printed: str | None = None, keep: tuple[str, ...] = ()) -> str:
    """The content of a block: a fenced code block with the excerpt (abridged to `keep`, then a link to the whole
    source), or with what a cell `printed`."""
    body = excerpt(name, keep) if kind == "excerpt" else printed
    if kind == "output" and not body:
        raise ValueError("its cell prints nothing")
    block = f"```{KINDS[kind]}\n{body.rstrip(chr(10))}\n```\n"
    if kind == "excerpt" and keep:
        obj = resolve(name)
        path = source_file(obj)
        link = posixpath.relpath(path, PAGE.parent.relative_to(REPOSITORY).as_posix())
        block += f"\nThe whole of `{getattr(obj, '__qualname__', name)}`: [{path}]({link}).\n"
    return block


# The relative tolerance of printed numbers: a computation's differ in the last digits from one CPU, thread count or
# library version to another; a training's (a slow cell's) drift further as those differences grow over its steps
# (where the loss falls fastest, the same step's loss differs by a factor of two or three between two thread counts),
# so its numbers are checked for their order of magnitude (within a factor of ten), which still tells a model that
# learns from one that does not.
PRINTOUT_TOLERANCE = {False: 0.05, True: 0.9}  # trains? -> relative tolerance


def same_printout(expected: str, actual: str, rel_tol: float = PRINTOUT_TOLERANCE[False],
                  abs_tol: float = 1e-6) -> bool:
    """Whether two printouts say the same: equal text between the numbers, and numbers equal within the
    tolerances (see PRINTOUT_TOLERANCE)."""
    if _NUMBER.sub("#", expected) != _NUMBER.sub("#", actual):
        return False
    return all(math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)
               for a, b in zip(_NUMBER.findall(expected), _NUMBER.findall(actual)))


def _render_all(page: Page, run: bool) -> tuple[list[tuple[Block, str]], list[str]]:
    """Each block with the content the code gives now (output blocks only when `run`), and the problems."""
    rendered, problems = [], list(page.problems)
    for block in page.blocks:
        if block.kind == "excerpt":
            try:
                rendered.append((block, render_block("excerpt", block.name, keep=block.keep)))
            except ValueError as error:
                problems.append(f"{block.label()}: {error}")
    if run and not page.problems:
        try:
            printed = run_cells(page.cells)
        except CellError as error:
            return rendered, problems + [str(error)]
        for cell, text in zip(page.cells, printed):
            if cell.output is not None:
                try:
                    rendered.append((cell.output, render_block("output", cell.output.name, text)))
                except ValueError as error:
                    problems.append(f"{cell.output.label()}: {error}")
    return sorted(rendered, key=lambda item: item[0].start), problems


def update_text(text: str, run: bool = True) -> tuple[str, list[str]]:
    """`text` with every excerpt rendered anew and (with `run`) every output, and the problems that left blocks as
    they were."""
    rendered, problems = _render_all(parse(text), run)
    for block, content in reversed(rendered):
        text = text[: block.start] + content + text[block.end :]
    return text, problems


def check_text(text: str, run: bool = True) -> list[str]:
    """Each block whose content is not what the code gives now (outputs only with `run`), and every other problem;
    [] when the page is current."""
    page = parse(text)
    trained = {cell.output.name for cell in page.cells if cell.slow and cell.output is not None}
    rendered, problems = _render_all(page, run)
    for block, content in rendered:
        current = text[block.start : block.end]
        same = current == content if block.kind == "excerpt" else same_printout(
            current, content, rel_tol=PRINTOUT_TOLERANCE[block.name in trained])
        if not same:
            problems.append(f"{block.label()} is stale: run `python scripts/make_figures.py --page`")
    return problems


def figure_names(text: str) -> list[str]:
    """The names of the pictures `figures/<name>.png` that the page shows, in order."""
    return [match["name"] for match in _FIGURE.finditer(text)]


def update_page(path: str | Path = PAGE) -> tuple[bool, list[str]]:
    """Render every block of the page at `path` anew; (whether the file changed, the problems left)."""
    text = Path(path).read_text(encoding="utf-8")
    updated, problems = update_text(text)
    if updated != text:
        replace_text(path, updated)
    return updated != text, problems


__all__ = [
    "FIGURES_DIR",
    "PAGE",
    "Block",
    "Cell",
    "CellError",
    "Page",
    "check_text",
    "figure_names",
    "find_blocks",
    "only_choices",
    "only_definitions",
    "parse",
    "render_block",
    "run_cells",
    "PRINTOUT_TOLERANCE",
    "same_printout",
    "update_page",
    "update_text",
    "walk_namespace",
]
