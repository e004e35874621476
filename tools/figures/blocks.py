"""The marker blocks of a document (`<!-- figures: NAME -->` ... `<!-- /figures -->`): found, checked against what
their JSON renders, and rewritten; the documents that hold them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .formats import (
    _BENCHMARK_FILE,
    _MARKER,
    _OPEN,
    CLOSE,
    REFERENCE_CARD,
    REPOSITORY,
    Benchmarks,
    FiguresError,
    render_table,
)
from .reference_card import reference_model_card

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


def _rendered_blocks(text: str, benchmarks: Benchmarks) -> tuple[list[tuple[Block, str]], list[str]]:
    """Each marker block of `text` with what its JSON renders now, and the problems that leave a block unrendered
    (an unknown table, a broken marker, a JSON that cannot be read)."""
    blocks, problems = find_blocks(text)
    rendered = []
    for block in blocks:
        try:
            rendered.append((block, render_table(block.name, benchmarks=benchmarks)))
        except FiguresError as error:
            problems.append(f"line {block.line}: block {block.name!r}: {error}")
    return rendered, problems


def update_text(
    text: str, root: str | Path = REPOSITORY, benchmarks: Benchmarks | None = None
) -> tuple[str, list[str]]:
    """`text` with every marker block's content rendered afresh, and the problems that leave a block as it was."""
    rendered, problems = _rendered_blocks(text, benchmarks or Benchmarks(root))
    pieces, position = [], 0
    for block, content in rendered:
        pieces += [text[position:block.start], content]
        position = block.end
    pieces.append(text[position:])
    return "".join(pieces), problems


def check_text(text: str, root: str | Path = REPOSITORY, benchmarks: Benchmarks | None = None) -> list[str]:
    """What is wrong with a document's figures: each stale block (its content is not what its JSON renders), each
    unknown table, each broken marker, each `benchmarks/....json` named that does not exist."""
    rendered, problems = _rendered_blocks(text, benchmarks or Benchmarks(root))
    problems += [f"line {block.line}: block {block.name!r} is stale: it differs from what its JSON renders "
                 "(python scripts/render_figures.py rewrites it)"
                 for block, content in rendered if block.content(text) != content]
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
    if model_card:
        rendered = None
        for card in reference_cards(root):
            rendered = reference_model_card(root) if rendered is None else rendered
            if card.read_text(encoding="utf-8") != rendered:
                problems.append(f"{card.relative_to(root)}: differs from the card its template, config and JSON "
                                "render (python scripts/render_figures.py rewrites it)")
    return problems


def reference_cards(root: str | Path = REPOSITORY, *, written: bool = True) -> list[Path]:
    """The reference model's card and its copy in the model folder the repository ships (SHIPPED_MODEL/README.md,
    where that folder exists); with `written`, only those that exist."""
    from modeling.inference.translation import SHIPPED_MODEL

    root = Path(root)
    cards = [root / REFERENCE_CARD]
    if (root / SHIPPED_MODEL).is_dir():
        cards.append(root / SHIPPED_MODEL / "README.md")
    return [card for card in cards if card.is_file() or not written]


def update_documents(root: str | Path = REPOSITORY, *, model_card: bool = True) -> tuple[list[Path], list[str]]:
    """Rewrite model_card.md (with `model_card`) and every marker block of every document; returns the files
    changed and the problems left (unknown tables, broken markers, missing JSON files named)."""
    from modeling.common.file_writes import replace_text

    root = Path(root)
    changed = []
    if model_card:
        text = reference_model_card(root)
        for card in reference_cards(root, written=False):
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
