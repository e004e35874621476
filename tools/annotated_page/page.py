"""docs/annotated.md's generated parts: code excerpts and printed results, each in a marker block that only this
module writes.

    <!-- excerpt: modeling.modeling_annotated_transformer.SublayerConnection -->
    (a python code block: the object's live source, see `excerpts`)
    <!-- /excerpt -->

    <!-- output: masks -->
    (a text code block: what `printouts.OUTPUTS["masks"]` prints)
    <!-- /output -->

`update_text` rewrites every block; `check_text` names each block whose content is not what the code gives now
(an excerpt must match exactly; a printout's numbers may differ in the last digits, as floating point does between
machines), each unknown name and each broken marker. The pictures the page shows are `figures/<name>.png`
(`figure_names`), written by `figures.write_figures`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from modeling.common.file_writes import replace_text

from .excerpts import REPOSITORY, excerpt
from .printouts import printout

PAGE = REPOSITORY / "docs" / "annotated.md"
FIGURES_DIR = REPOSITORY / "docs" / "figures"
KINDS = {"excerpt": "python", "output": "text"}  # marker word -> the code block's language
_OPEN = re.compile(r"^<!-- (?P<kind>excerpt|output): (?P<name>\S+) -->$")
_CLOSE = re.compile(r"^<!-- /(?P<kind>excerpt|output) -->$")
_MARKER = re.compile(r"<!--\s*/?\s*(?:excerpt|output)\b")  # any line that looks like a marker, well-formed or not
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?")
_FIGURE = re.compile(r"\]\(figures/(?P<name>[\w-]+)\.png\)")


@dataclass
class Block:
    kind: str  # "excerpt" or "output"
    name: str
    line: int  # the opening marker's line number, from 1
    start: int  # the content's first and last character offsets in the text
    end: int

    def label(self) -> str:
        return f"line {self.line}: <!-- {self.kind}: {self.name} -->"


def find_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The marker blocks of `text`, and a description of each broken marker."""
    blocks, problems, opened = [], [], None
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if _MARKER.search(stripped):
            if (match := _OPEN.match(stripped)) is not None:
                if opened is not None:
                    problems.append(f"line {number}: a block opens inside {opened[0].label()}, which is not closed")
                opened = (Block(match["kind"], match["name"], number, offset + len(line), -1), number)
            elif (match := _CLOSE.match(stripped)) is not None:
                if opened is None or opened[0].kind != match["kind"]:
                    problems.append(f"line {number}: {stripped} closes no open {match['kind']} block")
                else:
                    opened[0].end = offset
                    blocks.append(opened[0])
                opened = None
            else:
                problems.append(f"line {number}: a malformed marker {stripped!r} (write <!-- excerpt: NAME --> or "
                                "<!-- output: NAME -->, and <!-- /excerpt --> or <!-- /output -->)")
        offset += len(line)
    if opened is not None:
        problems.append(f"{opened[0].label()} is not closed")
    return blocks, problems


def render_block(kind: str, name: str) -> str:
    """The content of a block: a fenced code block with the excerpt or the printout."""
    body = excerpt(name) if kind == "excerpt" else printout(name)
    return f"```{KINDS[kind]}\n{body}```\n"


def same_printout(expected: str, actual: str, rel_tol: float = 0.05, abs_tol: float = 1e-6) -> bool:
    """Whether two printouts say the same: equal text between the numbers, and numbers equal within the
    tolerances (floating point differs in the last digits from one CPU or library version to another)."""
    if _NUMBER.sub("#", expected) != _NUMBER.sub("#", actual):
        return False
    return all(math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)
               for a, b in zip(_NUMBER.findall(expected), _NUMBER.findall(actual)))


def _render_all(text: str) -> tuple[list[tuple[Block, str]], list[str]]:
    blocks, problems = find_blocks(text)
    rendered = []
    for block in blocks:
        try:
            rendered.append((block, render_block(block.kind, block.name)))
        except ValueError as error:
            problems.append(f"{block.label()}: {error}")
    return rendered, problems


def update_text(text: str) -> tuple[str, list[str]]:
    """`text` with every block rendered anew, and the problems that left blocks as they were."""
    rendered, problems = _render_all(text)
    for block, content in reversed(rendered):
        text = text[: block.start] + content + text[block.end :]
    return text, problems


def check_text(text: str) -> list[str]:
    """Each block whose content is not what the code gives now, and every other problem; [] when the page is
    current."""
    rendered, problems = _render_all(text)
    for block, content in rendered:
        current = text[block.start : block.end]
        same = current == content if block.kind == "excerpt" else same_printout(current, content)
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


def check_page(path: str | Path = PAGE, figures_dir: str | Path | None = None) -> list[str]:
    """`check_text` of the page at `path`, and each picture it shows that is missing from `figures_dir` (default:
    the folder `figures` beside the page)."""
    text = Path(path).read_text(encoding="utf-8")
    folder = Path(figures_dir) if figures_dir is not None else Path(path).parent / "figures"
    missing = [f"the page shows figures/{name}.png, which is not in {folder}" for name in figure_names(text)
               if not (folder / f"{name}.png").is_file()]
    return check_text(text) + missing


__all__ = [
    "FIGURES_DIR",
    "PAGE",
    "Block",
    "check_page",
    "check_text",
    "figure_names",
    "find_blocks",
    "render_block",
    "same_printout",
    "update_page",
    "update_text",
]
