"""The notebooks of the walk, generated from docs/annotated.md so that they cannot drift from it.

`build_notebook(text)` turns the page into a notebook: its prose (excerpts included, as code to read) into markdown
cells, each of its cells into a code cell, after a first markdown cell that says how to open it and a first code
cell that installs what the walk needs where the package is not installed. Its output blocks become the cells'
outputs, its pictures the figures the cells draw. It holds no exercise's answer: the page's solution regions (the
reference solutions, shown after each exercise's break) are left out, the cell after each, `yours_or_reference`,
takes the learner's answer or imports the reference, and an excerpt of the package's code that holds an answer is
folded in a `<details>` block, to open once the check passes (`giveaways` checks all of it).
`build_notebook(text, solutions=True)` is the solutions notebook: the walk's definitions the exercises build on, and
each exercise's statement, its reference solution (modeling/learning/solutions.py) in place of the stub, and its
check.

The repository's address is read from one place, `[project.urls] Repository` of pyproject.toml (`repository_url`).
With it, the first cell is a Colab badge, the install cell installs the package from it (without its training
dependencies) and the links lead to it; without it, the first cell says how to open the notebook from a clone or on
Colab, the install cell puts a checkout's source on the path, and the links are relative, working in a clone. What
the install cell installs is the `notebook` extra of pyproject.toml (`notebook_requirements`). `execute_notebook` runs a notebook in a Jupyter kernel
(nbclient), `output_problems` names each cell whose output is not what the page says, and `source_problems` each
difference between a committed notebook and the one the page gives now.

Why the page's own blocks and not jupytext: the page mixes code to read (live excerpts, which must not run in a
learner's namespace) with code to run, holds each cell's printed output for the tests to compare, and wraps its
exercises with their checks; its markers already say which is which.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import posixpath
import re
import tempfile
import tomllib
from pathlib import Path

from .excerpts import REPOSITORY
from .giveaways import GIVEAWAYS
from .page import PRINTOUT_TOLERANCE, Cell, only_definitions, parse, render_block, same_printout

PYPROJECT = REPOSITORY / "pyproject.toml"
DISTRIBUTION = "annotated-transformer-hf"
BRANCH = "main"
NOTEBOOKS_DIR = REPOSITORY / "notebooks"
NOTEBOOK = NOTEBOOKS_DIR / "annotated_transformer.ipynb"
SOLUTIONS = NOTEBOOKS_DIR / "annotated_transformer_solutions.ipynb"
PAGE_PATH = "docs/annotated.md"  # where the page is in the repository: its relative links start there
KERNEL = "python3"
KEY = "walk"  # the cells' metadata this module writes: {"output": NAME}, {"figure": NAME}, {"exercise": ...}
_LINK = re.compile(r"(?P<image>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
_FIGURE_IMAGE = re.compile(r"^!\[[^\]]*\]\(figures/[\w-]+\.png\)\n?", flags=re.MULTILINE)
_MARKER_LINE = re.compile(r"^<!--.*-->\n?", flags=re.MULTILINE)


def require_jupyter():
    """(nbformat, nbclient), or ImportError with the one line that says how to install them."""
    if importlib.util.find_spec("nbclient") is None or importlib.util.find_spec("ipykernel") is None:
        raise ImportError("nbclient and ipykernel are not installed: pip install -e '.[notebook]'")
    import nbclient
    import nbformat

    return nbformat, nbclient


def _project(pyproject: str | Path) -> dict:
    path = Path(pyproject)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot read it ({error})") from None


def repository_url(pyproject: str | Path = PYPROJECT) -> str | None:
    """The repository's address, `[project.urls] Repository` of pyproject.toml; None while it has none."""
    url = _project(pyproject).get("urls", {}).get("Repository")
    if url is not None and not re.fullmatch(r"https://\S+", url):
        raise ValueError(f"{pyproject}: [project.urls] Repository is {url!r}: give an https:// address")
    return url.rstrip("/") if url else None


def notebook_requirements(pyproject: str | Path = PYPROJECT) -> list[str]:
    """The `notebook` extra of pyproject.toml: what the walk needs, without the package's training dependencies."""
    requirements = _project(pyproject).get("optional-dependencies", {}).get("notebook")
    if not requirements:
        raise ValueError(f"{pyproject}: no `notebook` extra in [project.optional-dependencies]: list what the walk "
                         "needs there")
    named = [requirement for requirement in requirements if requirement.startswith(DISTRIBUTION)]
    if named:
        raise ValueError(f"{pyproject}: the `notebook` extra names {named[0]!r}, which would install every "
                         "dependency of the package: list the packages themselves")
    return list(requirements)


def colab_url(path: Path, url: str) -> str:
    """The address that opens the committed notebook at `path` on Colab, the repository being at `url`."""
    repository = url.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repository}/blob/{BRANCH}/{path.relative_to(REPOSITORY)}"


def install_source(url: str | None, requirements: list[str]) -> str:
    """The notebooks' first code cell: where the package is not installed, install what the walk needs and make the
    package's source importable (a checkout's, or with `url` the repository's, without its dependencies); then draw
    inline."""
    if url is None:
        fetch = ("raise RuntimeError(\"no `modeling` folder here or above: open this notebook in a clone of the \"\n"
                 "                           \"repository (its notebooks/ folder), or put the repository's files "
                 "beside it\")")
    else:
        fetch = (f"package = \"{DISTRIBUTION} @ git+{url}\"  # the package alone: what it needs is installed above\n"
                 "        subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"--quiet\", \"--no-deps\", "
                 "package], check=True)")
    lines, line = [], "   "
    for requirement in requirements:  # the list, wrapped
        item = f" {json.dumps(requirement)},"
        if len(line) + len(item) > 116:
            lines, line = [*lines, line], "   "
        line += item
    needs = "\n".join([*lines, line])
    where = "a clone without the README's install" if url is None else "Colab, or a clone without the README's install"
    return f'''# Where this package is not installed ({where}): installs what the walk
# needs (pyproject.toml's `notebook` extra, not the package's training dependencies) and makes the package importable.
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

NEEDS = [
{needs}
]
try:
    importlib.metadata.version("{DISTRIBUTION}")  # installed: nothing to do
except importlib.metadata.PackageNotFoundError:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *NEEDS], check=True)
    checkout = next((folder for folder in (Path.cwd(), *Path.cwd().parents) if (folder / "modeling").is_dir()), None)
    if checkout is not None:
        sys.path.insert(0, str(checkout))
    else:
        {fetch}
    importlib.invalidate_caches()
%matplotlib inline'''


def opening_cell(url: str | None, path: Path) -> str:
    """The notebook's first markdown: a Colab badge with `url`, else how to open it from a clone or on Colab."""
    if url is not None:
        return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(path, url)})"
    return (f"**To run this notebook**, open it in a clone of the repository after the README's install, with Jupyter "
            f"(`pip install jupyterlab`, then `jupyter lab notebooks/{path.name}`). Its first code cell makes the "
            "clone's package importable where it is not installed, with what the walk needs.")


def _link(match: re.Match, url: str | None) -> str:
    """A link of the page as it must read in a notebook: to the repository at `url` (a notebook: on Colab), or
    without one relative to notebooks/, which works in a clone."""
    target = match["target"]
    if re.match(r"[a-z]+:", target):
        return match.group(0)
    path, _, anchor = target.partition("#")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(PAGE_PATH), path)) if path else PAGE_PATH
    if url is None:
        address = posixpath.relpath(path, NOTEBOOKS_DIR.relative_to(REPOSITORY).as_posix())
    elif path.endswith(".ipynb"):
        address = colab_url(REPOSITORY / path, url)
    else:
        address = f"{url}/{'raw' if match['image'] else 'blob'}/{BRANCH}/{path}"
    return f"{match['image']}[{match['text']}]({address}{'#' + anchor if anchor else ''})"


def notebook_markdown(text: str, url: str | None = None) -> str:
    """A stretch of the page's prose for a notebook: markers and the pictures the cells draw left out, links made
    to work from the notebook (`_link`; code blocks are left as they are)."""
    text = _FIGURE_IMAGE.sub("", _MARKER_LINE.sub("", text))
    parts = re.split(r"(^```.*?^```$)", text, flags=re.MULTILINE | re.DOTALL)
    text = "".join(part if part.startswith("```") else _LINK.sub(lambda match: _link(match, url), part)
                   for part in parts)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _segments(text: str) -> list[str | Cell]:
    """The page in order, as stretches of prose (str) and cells, without its page-only regions, solution regions and
    output blocks."""
    page = parse(text)
    if page.problems:
        raise ValueError(f"{PAGE_PATH}: {page.problems[0]}")
    cut = [*page.page_only, *page.solution_regions]
    for cell in page.cells:
        cut.append((cell.start, cell.end))
        if cell.output is not None:  # from its opening marker's line to the end of its closing marker's
            cut.append((text.rfind("\n", 0, cell.output.start - 1) + 1, text.find("\n", cell.output.end) + 1))
    cells = {cell.start: cell for cell in page.cells}
    segments, position = [], 0
    for start, end in sorted(cut):
        segments.append(text[position:start])
        if start in cells:
            segments.append(cells[start])
        position = end
    segments.append(text[position:])
    return segments


def _markdown_cells(nbformat, text: str, url: str | None) -> list:
    """Markdown cells of a stretch of prose, a new one at each section (## heading)."""
    text = notebook_markdown(text, url)
    parts = re.split(r"(?=^## )", text, flags=re.MULTILINE) if text else []
    return [nbformat.v4.new_markdown_cell(part.strip()) for part in parts if part.strip()]


def _code_cell(nbformat, source: str, cell: Cell | None = None, role: str | None = None):
    code = nbformat.v4.new_code_cell(source.rstrip("\n"))
    if cell is not None:
        walk = {key: value for key, value in (("output", cell.output and cell.output.name), ("figure", cell.figure),
                                              ("exercise", cell.exercise), ("role", role or cell.role)) if value}
        if walk:
            code.metadata[KEY] = walk
        if cell.slow:
            code.metadata["tags"] = ["slow"]
    return code


def _solution(name: str) -> str:
    from modeling.learning import solutions

    if not hasattr(solutions, name):
        raise ValueError(f"modeling/learning/solutions.py has no {name}: write the solution of exercise {name}")
    return inspect.getsource(getattr(solutions, name))


def folded(text: str) -> str:
    """The page `text` with each excerpt of the package's code that holds an exercise's answer (`giveaways.GIVEAWAYS`)
    folded in a `<details>` block, for the learner's notebook: the package's code is there to read, once the
    exercise is done."""

    page = parse(text)
    numbers = {name: index for index, (name, _, _) in enumerate(page.exercises, start=1)}
    for block in sorted((block for block in page.blocks if block.kind == "excerpt"), key=lambda b: -b.start):
        content = text[block.start : block.end]
        answers = [name for name, pattern in GIVEAWAYS.items() if re.search(pattern, content) and name in numbers]
        if not answers or any(start <= block.start < end for start, end in page.solution_regions):
            continue
        which = " and ".join(f"{numbers[name]} (<code>{name}</code>)" for name in answers)
        plural = "s" if len(answers) > 1 else ""
        summary = (f"The package's <code>{block.name.rsplit('.', 1)[-1]}</code>: it holds the answer{plural} of "
                   f"exercise{plural} {which}; open it once your check{plural} pass{'' if plural else 'es'}")
        folded_block = f"<details><summary>{summary}</summary>\n\n{content}\n</details>\n"
        text = text[: block.start] + folded_block + text[block.end :]
    return text


def _exercise_statement(text: str, name: str) -> str:
    """The prose of exercise `name` on the page, without its cells."""
    page = parse(text)
    start, end = next((start, end) for exercise, start, end in page.exercises if exercise == name)
    return "".join(segment for segment in _segments(text[start:end]) if isinstance(segment, str))


def build_notebook(text: str, solutions: bool = False, pyproject: str | Path = PYPROJECT):
    """The notebook of the page `text` (with `solutions`: the solutions notebook), not executed; the repository's
    address and what the install cell installs are read from `pyproject`."""
    nbformat, _ = require_jupyter()
    url, path = repository_url(pyproject), SOLUTIONS if solutions else NOTEBOOK
    cells = [nbformat.v4.new_markdown_cell(opening_cell(url, path)),
             _code_cell(nbformat, install_source(url, notebook_requirements(pyproject)))]
    if solutions:
        page = parse(text)
        walk = f"[the walk]({colab_url(NOTEBOOK, url) if url else NOTEBOOK.name})"
        cells[0].source += (f"\n\n# Solutions to the exercises of *The Transformer, annotated*\n\nEach exercise of "
                            f"{walk} with a solution in place of its stub, and its check, which now says `correct`; "
                            "before them, the walk's definitions they build on.")
        taken = 0  # the page's cells up to here are in
        for name in dict.fromkeys(cell.exercise for cell in page.cells if cell.exercise):
            stub, check = (cell for cell in page.cells if cell.exercise == name)
            for cell in page.cells[taken : page.cells.index(stub)]:
                if cell is page.cells[0] or (not cell.exercise and not cell.slow and only_definitions(cell.source)):
                    cells.append(_code_cell(nbformat, cell.source, cell))
            taken = page.cells.index(check) + 1
            cells += _markdown_cells(nbformat, _exercise_statement(text, name), url)
            cells.append(_code_cell(nbformat, _solution(name), stub, role="solution"))
            cells.append(_code_cell(nbformat, check.source, check))
    else:
        for segment in _segments(folded(text)):
            cells += (_markdown_cells(nbformat, segment, url) if isinstance(segment, str)
                      else [_code_cell(nbformat, segment.source, segment)])
    for index, cell in enumerate(cells):
        cell.id = f"cell-{index:03d}"  # stable ids: a regenerated notebook differs only where the page does
    return nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": KERNEL},
        "language_info": {"name": "python"},
        "colab": {"provenance": [], "toc_visible": True},
    })


def execute_notebook(notebook, skip_slow: bool = False, timeout: int = 600):
    """A copy of `notebook` run top to bottom in a fresh kernel, in an empty folder of the clone's outputs/ (the
    walk finds the clone, and the model it ships, from where it runs, as from notebooks/), without the cells tagged
    slow with `skip_slow`; ValueError with nbclient's account (the cell, its traceback) when a cell raises."""
    _, nbclient = require_jupyter()
    notebook = copy.deepcopy(notebook)
    if skip_slow:
        notebook.cells = [cell for cell in notebook.cells if "slow" not in cell.metadata.get("tags", [])]
    (REPOSITORY / "outputs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPOSITORY / "outputs", prefix="notebook-") as folder:
        try:
            nbclient.NotebookClient(notebook, timeout=timeout, kernel_name=KERNEL, record_timing=False,
                                    resources={"metadata": {"path": folder}}).execute()
        except nbclient.exceptions.CellExecutionError as error:  # its text: the cell, the traceback, the error
            raise ValueError(str(error)) from error
    notebook.metadata["language_info"] = {"name": "python"}  # not the version of the Python that ran it
    return notebook


def printed(cell) -> str:
    """What a code cell printed (its standard output)."""
    return "".join(output.get("text", "") for output in cell.get("outputs", [])
                   if output.get("output_type") == "stream" and output.get("name") == "stdout")


def output_problems(notebook, text: str, solutions: bool = False) -> list[str]:
    """Each code cell of an executed `notebook` that raised, printed other than the page's output block says, drew
    no picture where the page shows one, or whose exercise check says other than it should (`not yet` for a stub,
    `correct` for a solution); [] when every output is what the page says."""
    page = parse(text)
    expected = {block.name: text[block.start : block.end] for block in page.blocks if block.kind == "output"}
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        walk, label = cell.metadata.get(KEY, {}), f"cell {index}"
        errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
        if errors:
            problems.append(f"{label} raised {errors[0].get('ename')}: {errors[0].get('evalue')}")
            continue
        trains = "slow" in cell.metadata.get("tags", [])
        if "output" in walk and not same_printout(expected[walk["output"]], render_block("output", walk["output"],
                                                                                          printed(cell) or "\n"),
                                                  rel_tol=PRINTOUT_TOLERANCE[trains]):
            problems.append(f"{label} prints other than the page's output {walk['output']}:\n{printed(cell)}")
        if "figure" in walk and not any("image/png" in output.get("data", {}) for output in cell.get("outputs", [])):
            problems.append(f"{label} draws no picture, where the page shows figures/{walk['figure']}.png")
        if walk.get("role") == "check":
            verdict = f"{walk['exercise']}: {'correct' if solutions else 'not yet'}"
            if not printed(cell).startswith(verdict):
                problems.append(f"{label} should say {verdict!r}, and says {printed(cell).strip()!r}")
    return problems


def _comparable(notebook) -> list[tuple]:
    return [(cell.cell_type, cell.source, cell.metadata.get(KEY), cell.metadata.get("tags")) for cell in notebook.cells]


def source_problems(path: str | Path, text: str, solutions: bool = False) -> list[str]:
    """How the committed notebook at `path` differs from the one the page `text` gives now: [] when it is current."""
    nbformat, _ = require_jupyter()
    path = Path(path)
    if not path.is_file():
        return [f"{path} is missing: run `python scripts/make_figures.py --page`"]
    committed, current = _comparable(nbformat.read(path, as_version=4)), _comparable(build_notebook(text, solutions))
    if committed == current:
        return []
    index = next((i for i, (a, b) in enumerate(zip(committed, current)) if a != b), min(len(committed), len(current)))
    return [(f"{path} is stale from cell {index} on ({len(committed)} cells, the page gives {len(current)}): run "
             "`python scripts/make_figures.py --page`")]


def _kept_outputs(outputs: list) -> list:
    """A cell's outputs as a committed notebook keeps them: without what it wrote to stderr (warnings, which name the
    paths and versions of the machine that ran it), and with consecutive prints as one (the kernel flushes them as
    time passes, a different split on every run)."""
    kept = []
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            continue
        if kept and output.get("output_type") == "stream" and kept[-1].get("output_type") == "stream":
            kept[-1]["text"] += output["text"]
        else:
            kept.append(output)
    return kept


def write_notebooks(text: str, folder: str | Path = NOTEBOOKS_DIR) -> list[Path]:
    """Build both notebooks from the page `text`, run each top to bottom, check its outputs against the page
    (ValueError naming the first that differs) and write it, outputs included, into `folder`."""
    nbformat, _ = require_jupyter()
    paths = []
    for solutions, path in ((False, NOTEBOOK), (True, SOLUTIONS)):
        executed = execute_notebook(build_notebook(text, solutions))
        if problems := output_problems(executed, text, solutions):
            raise ValueError(f"{path.name}: {problems[0]}")
        for cell in executed.cells:
            if cell.cell_type == "code":
                cell.outputs = _kept_outputs(cell.outputs)
        paths.append(Path(folder) / path.name)
        paths[-1].parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(executed, paths[-1])
    return paths


__all__ = [
    "NOTEBOOK",
    "PYPROJECT",
    "SOLUTIONS",
    "build_notebook",
    "colab_url",
    "execute_notebook",
    "folded",
    "install_source",
    "notebook_markdown",
    "notebook_requirements",
    "opening_cell",
    "output_problems",
    "printed",
    "repository_url",
    "require_jupyter",
    "source_problems",
    "write_notebooks",
]
