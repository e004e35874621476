"""The walk's checks beside its rendering: `check_page` (what `scripts/make_figures.py --check` runs on the page) and
`given_away`, each place where the page or its learner's notebook shows an exercise's answer too early (what would
give one away: `giveaways`). On top of `page` and `notebook`, which import neither."""

from __future__ import annotations

import re
from pathlib import Path

from modeling.learning.exercises import checked_values

from .giveaways import GIVEAWAYS, shows
from .notebook import build_notebook
from .page import PAGE, check_text, figure_names, parse

_DETAILS = re.compile(r"<details>.*?</details>", flags=re.DOTALL)


def given_away(text: str, notebook=None) -> list[str]:
    """Each place where the page `text`, or its learner's notebook (`notebook`, default: built from `text`), gives an
    exercise's answer away (see the module's doc), as 'line N: ...' or 'the learner's notebook, cell N: ...'; []
    when none does."""
    page, found = parse(text), []
    outputs = [block for block in page.blocks if block.kind == "output"]
    for name, _, end in page.exercises:
        stop = page.solutions.get(name, len(text))
        if stop < end:
            found.append(f"exercise {name}: its <!-- solution: {name} --> break comes before it")
            continue
        if name in GIVEAWAYS and (match := re.search(GIVEAWAYS[name], text[end:stop])):
            line = text.count("\n", 0, end + match.start()) + 1
            found.append(f"line {line}: {match.group(0)!r} gives away the answer of exercise {name} before its "
                         f"<!-- solution: {name} --> break: show the package's version there, or move the break")
        for value in checked_values(name):
            for block in (block for block in outputs if block.start < stop):
                if (number := shows(text[block.start:block.end], value)) is not None:
                    found.append(f"{block.label()} prints {number}, a value the check of exercise {name} expects, "
                                 f"before its <!-- solution: {name} --> break: print it after the break")
    if notebook is None and page.problems:
        return found  # no notebook to build: `page.check_text` names the broken markers
    notebook = build_notebook(text) if notebook is None else notebook
    for index, cell in enumerate(notebook.cells):
        source = cell.source if cell.cell_type == "code" else _DETAILS.sub("", cell.source)
        for name, pattern in GIVEAWAYS.items():
            if match := re.search(pattern, source):
                where = "code" if cell.cell_type == "code" else "prose, outside a <details> block"
                found.append(f"the learner's notebook, cell {index}: its {where} shows {match.group(0)!r}, the "
                             f"answer of exercise {name}: the learner's notebook holds no answer")
    return found



def check_page(path: str | Path = PAGE, figures_dir: str | Path | None = None, run: bool = True) -> list[str]:
    """`check_text` of the page at `path`, each picture it shows that is missing from `figures_dir` (default: the
    folder `figures` beside the page), and each exercise whose answer it shows before the exercise's solution break,
    in code or in a printout, or its learner's notebook shows at all (`given_away`)."""
    text = Path(path).read_text(encoding="utf-8")
    folder = Path(figures_dir) if figures_dir is not None else Path(path).parent / "figures"
    missing = [f"the page shows figures/{name}.png, which is not in {folder}" for name in figure_names(text)
               if not (folder / f"{name}.png").is_file()]
    return check_text(text, run) + missing + given_away(text)


__all__ = ["check_page", "given_away"]
