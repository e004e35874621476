"""The walk's notebooks (notebooks/), generated from docs/annotated.md: they are the page's cells, they run top to
bottom in a Jupyter kernel with only the `notebook` extra's packages and print what the page says (the cells that
train behind `slow`; the last section on Multi30k's validation split, so the runs need it), they say how to open them
and install what they need from the one address pyproject.toml gives (or none), every exercise's check fails on its
stub and passes on its solution, and after each exercise the walk goes on with the learner's answer where it passes
and the reference solution where it does not."""

import ast
import importlib.metadata
import inspect
import math
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest
import torch

from modeling.learning import solutions
from modeling.learning.exercises import EXERCISES, check, problem, reference
from tools.annotated_page.excerpts import REPOSITORY
from tools.annotated_page.notebook import (
    NOTEBOOK,
    PYPROJECT,
    SOLUTIONS,
    build_notebook,
    colab_url,
    execute_notebook,
    install_source,
    notebook_markdown,
    notebook_requirements,
    output_problems,
    printed,
    repository_url,
    source_problems,
)
from tools.annotated_page.page import PAGE, only_choices, only_definitions, parse, walk_namespace

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture
def quiet_kernel(monkeypatch):
    """A kernel on one thread (the small models run fastest so, and leave the other core alone), offline."""
    for name, value in {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def multi30k_kernel(quiet_kernel, multi30k_dir, monkeypatch):
    """`quiet_kernel` reading Multi30k from the tests' copy (skipped without it): the page's printouts of its last
    section are Multi30k's."""
    monkeypatch.setenv("MULTI30K_DIR", str(multi30k_dir))


# ---- generated from the page, committed with their outputs -----------------------------------------------------------


@pytest.mark.parametrize("path, solutions_notebook", [(NOTEBOOK, False), (SOLUTIONS, True)], ids=["walk", "solutions"])
def test_the_committed_notebooks_are_what_the_page_gives(page, path, solutions_notebook):
    assert source_problems(path, page, solutions_notebook) == []


def test_a_changed_page_makes_the_committed_notebook_stale(page):
    edited = page.replace("print(f\"k = {k:>2}:", "print(f\"offset {k:>2}:", 1)
    assert edited != page
    problems = source_problems(NOTEBOOK, edited)
    assert len(problems) == 1 and "is stale from cell" in problems[0] and "make_figures.py --page" in problems[0]


@pytest.mark.parametrize("path, solutions_notebook", [(NOTEBOOK, False), (SOLUTIONS, True)], ids=["walk", "solutions"])
def test_the_committed_notebooks_hold_every_cell_s_output(page, path, solutions_notebook):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code), "run `python scripts/make_figures.py --page`"
    assert output_problems(notebook, page, solutions_notebook) == []
    assert not any(output.get("name") == "stderr" for cell in code for output in cell.outputs)  # no machine's paths


def test_the_notebook_is_the_page_s_cells_in_order(page):
    notebook = build_notebook(page)
    cells = parse(page).cells
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert code[0] == install_source(repository_url(), notebook_requirements())
    assert code[1:] == [cell.source.rstrip("\n") for cell in cells]
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "def sinusoidal_positional_encoding(" in markdown  # the excerpts, to read
    assert "<!--" not in markdown and "](figures/" not in markdown and "python scripts/make_figures.py" not in markdown
    assert "](results.md)" not in markdown and "<details>" in markdown
    assert "**Solution below** (exercise" not in markdown  # the page's solution regions are left out
    slow = [cell for cell in notebook.cells if "slow" in cell.metadata.get("tags", [])]
    assert len(slow) == sum(cell.slow for cell in cells) and all("model" in cell.source for cell in slow)


def pyproject_with(tmp_path, url: str | None):
    """A copy of pyproject.toml with `[project.urls] Repository` set to `url`, or without any address."""
    text = re.sub(r"(?ms)^\[project\.urls\]\n.*?(?=^\[)", "", PYPROJECT.read_text(encoding="utf-8"))
    if url is not None:
        text = text.replace("\n[project.optional-dependencies]", f"\n[project.urls]\nRepository = \"{url}\"\n\n"
                            "[project.optional-dependencies]", 1)
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    assert repository_url(path) == url
    return path


def run_install_cell(source: str, monkeypatch, cwd, installed: bool) -> list:
    """Run a notebook's install cell in `cwd` with pip replaced by a recorder; the pip commands it ran."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, check: calls.append(command))
    if not installed:
        def not_installed(name):
            raise importlib.metadata.PackageNotFoundError(name)
        monkeypatch.setattr(importlib.metadata, "version", not_installed)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(source.replace("%matplotlib inline", ""), {})  # IPython's line, not Python's
    return calls


def test_without_an_address_the_notebooks_say_how_to_open_them_and_use_a_checkout(page, tmp_path, monkeypatch):
    pyproject = pyproject_with(tmp_path, None)
    for path, solutions_notebook in ((NOTEBOOK, False), (SOLUTIONS, True)):
        notebook = build_notebook(page, solutions_notebook, pyproject)
        assert "colab-badge" not in notebook.cells[0].source and "clone" in notebook.cells[0].source
        assert "git+" not in notebook.cells[1].source
    markdown = "\n".join(cell.source for cell in build_notebook(page, pyproject=pyproject).cells
                         if cell.cell_type == "markdown")
    assert "](../docs/results.md)" in markdown and "](../models/multi30k-de-en-cpu)" in markdown
    assert notebook_markdown("![a picture](cross_attention_multi30k.png)") == (
        "![a picture](../docs/cross_attention_multi30k.png)")  # a picture no cell draws
    assert "](annotated_transformer_solutions.ipynb)" in markdown and "https://github.com" not in markdown
    for link in re.findall(r"\]\((\.\./[^)#\s]+)", markdown):  # they work from notebooks/ in a clone
        assert (NOTEBOOK.parent / link).exists(), link
    source = install_source(None, notebook_requirements(pyproject))
    assert run_install_cell(source, monkeypatch, REPOSITORY, installed=True) == []  # installed: nothing to do
    calls = run_install_cell(source, monkeypatch, NOTEBOOK.parent, installed=False)  # a clone, not installed
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", *notebook_requirements(pyproject)]]
    assert sys.path[0] == str(REPOSITORY)  # the checkout's source, importable
    with pytest.raises(RuntimeError, match="no `modeling` folder here or above: open this notebook in a clone"):
        run_install_cell(source, monkeypatch, tmp_path, installed=False)


def test_with_an_address_the_notebooks_open_on_colab_and_install_from_it(page, tmp_path, monkeypatch):
    url = "https://github.com/someone/annotated-transformer-hf"
    pyproject = pyproject_with(tmp_path, url)
    for path, solutions_notebook in ((NOTEBOOK, False), (SOLUTIONS, True)):
        notebook = build_notebook(page, solutions_notebook, pyproject)
        badge = f"(https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(path, url)})"
        assert badge in notebook.cells[0].source
        assert colab_url(path, url) == ("https://colab.research.google.com/github/someone/annotated-transformer-hf/"
                                        f"blob/main/notebooks/{path.name}")
    markdown = "\n".join(cell.source for cell in build_notebook(page, pyproject=pyproject).cells
                         if cell.cell_type == "markdown")
    assert f"]({url}/blob/main/docs/results.md)" in markdown
    assert notebook_markdown("![a picture](cross_attention_multi30k.png)", url) == (
        f"![a picture]({url}/raw/main/docs/cross_attention_multi30k.png)")  # a picture no cell draws
    source = install_source(url, notebook_requirements(pyproject))
    (tmp_path / "elsewhere").mkdir()
    calls = run_install_cell(source, monkeypatch, tmp_path / "elsewhere", installed=False)  # as on Colab
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", *notebook_requirements(pyproject)],
                     [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                      f"annotated-transformer-hf @ git+{url}"]]


def test_the_address_comes_from_pyproject_and_a_malformed_one_is_refused(tmp_path):
    """(No placeholder address is left anywhere: tests/test_docs.py::test_nothing_users_get_holds_a_placeholder.)"""
    assert repository_url() is None or repository_url().startswith("https://")
    bad = pyproject_with(tmp_path, None)
    bad.write_text(bad.read_text().replace("\n[project.optional-dependencies]",
                                           '\n[project.urls]\nRepository = "github.com/x"\n\n'
                                           "[project.optional-dependencies]", 1))
    with pytest.raises(ValueError, match="Repository is 'github.com/x': give an https:// address"):
        repository_url(bad)


# ---- the lean install: what the walk needs, not the package's training dependencies ---------------------------------


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[@]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def installed_closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` install, with what each of them requires (as installed here), by name."""
    todo, found = [requirement_name(requirement) for requirement in requirements], set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            needs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [requirement_name(need) for need in needs if "extra ==" not in need]
    return found


def excluded_modules() -> list[str]:
    """The import names of the package's dependencies that the `notebook` extra does not bring."""
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    lean = installed_closure(notebook_requirements()) | {"torch"}  # torch: installed first, as the README says
    excluded = {requirement_name(requirement) for requirement in dependencies} - lean
    modules = {module for module, names in importlib.metadata.packages_distributions().items()
               if any(name.lower().replace("_", "-") in excluded for name in names)}
    assert {"datasets", "evaluate", "tensorboard"} <= modules, modules  # what the walk must do without
    return sorted(modules)


def blocker_source() -> str:
    """Python that makes importing any of `excluded_modules` fail, as where they are not installed."""
    return f"import sys\n\nfor name in {excluded_modules()!r}:\n    sys.modules[name] = None  # import fails"


def lean(notebook):
    """`notebook` with a first cell that blocks the packages the `notebook` extra does not install."""
    notebook = nbformat.from_dict(notebook)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(blocker_source()))
    return notebook


def test_the_notebook_extra_is_lean():
    requirements = notebook_requirements()
    assert {"transformers", "tokenizers", "matplotlib"} <= {requirement_name(r) for r in requirements}
    assert not {"datasets", "evaluate", "tensorboard"} & installed_closure(requirements)


def test_the_walk_s_imports_work_with_only_the_notebook_extra(page):
    """Every import of the page's cells, in a Python where the package's other dependencies cannot be imported."""
    imports = [ast.unparse(node) for cell in parse(page).cells for node in ast.walk(ast.parse(cell.source))
               if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert any("modeling.learning.copy_task" in line for line in imports)
    script = blocker_source() + "\n" + "\n".join(dict.fromkeys(imports)) + textwrap.dedent("""
        from modeling.inference.translation import load_translation_model
        try:
            import datasets
        except ImportError:
            print("walk imports: ok")
        """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPOSITORY,
                            timeout=300)
    assert result.stdout.strip() == "walk imports: ok", result.stderr[-2000:]


# ---- they run --------------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a minute: the page's own cells are run in the default run (test_annotated.py); CI runs -m slow
def test_the_notebook_runs_and_prints_what_the_page_says(page, multi30k_kernel):
    """Every cell but the slow ones, in a fresh kernel: no error, each printout as on the page, each picture drawn,
    each exercise's check says its stub is not done yet, and the walk goes on with the reference solutions."""
    executed = execute_notebook(lean(build_notebook(page)), skip_slow=True)
    executed.cells.pop(0)  # the blocker
    assert output_problems(executed, page) == []
    checks = [printed(cell) for cell in executed.cells if cell.metadata.get("walk", {}).get("role") == "check"]
    assert len(checks) == len(EXERCISES) and all(": not yet: replace the stub's" in text for text in checks)
    chosen = "".join(printed(cell) for cell in executed.cells if "yours_or_reference(" in cell.source)
    assert [line.split(":")[0] for line in chosen.splitlines()] == list(EXERCISES)
    assert all(": the reference solution (modeling/learning/solutions.py), as yours is not right yet: replace the "
               "stub's" in line for line in chosen.splitlines())
    outputs = [cell for cell in executed.cells if "output" in cell.metadata.get("walk", {})]
    assert len(outputs) >= 20


def test_the_solutions_notebook_runs_and_every_check_passes(page, quiet_kernel):
    executed = execute_notebook(build_notebook(page, solutions=True))
    assert output_problems(executed, page, solutions=True) == []
    checks = [printed(cell) for cell in executed.cells if cell.metadata.get("walk", {}).get("role") == "check"]
    assert checks == [f"{name}: correct\n" for name in dict.fromkeys(
        cell.exercise for cell in parse(page).cells if cell.exercise)]


@pytest.mark.slow
def test_the_whole_notebook_runs_and_prints_what_the_page_says(page, multi30k_kernel):
    """The cells that train too: the copy task, decoding with and without the cache, the attention of every layer;
    with only the `notebook` extra's packages, as the fast run."""
    executed = execute_notebook(lean(build_notebook(page)))
    executed.cells.pop(0)  # the blocker
    assert output_problems(executed, page) == []
    assert sum("slow" in cell.metadata.get("tags", []) for cell in executed.cells) >= 3


def test_a_cell_that_prints_other_than_the_page_is_named(page):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(cell for cell in notebook.cells if cell.metadata.get("walk", {}).get("output") == "noam")
    stream = next(output for output in cell.outputs if output.get("name") == "stdout")
    stream.text = stream.text.replace("warmup 4000", "warmup 9000", 1)
    problems = output_problems(notebook, page)
    assert len(problems) == 1 and "prints other than the page's output noam" in problems[0]


# ---- the exercises ---------------------------------------------------------------------------------------------------


def exercise_functions(page: str) -> dict[str, tuple]:
    """Each exercise's (stub, solution): the page's setup cell, then its cells that only define (what the exercises
    build on) and its stubs, each followed by its reference solution, in order, as the solutions notebook runs
    them."""
    cells = parse(page).cells
    namespace: dict = {"__name__": "__main__"}
    exec(cells[0].source, namespace)  # the page's imports
    found = {}
    for cell in cells[1:]:
        if cell.role == "stub":
            exec(cell.source, namespace)
            stub = namespace[cell.exercise]
            exec(inspect.getsource(getattr(solutions, cell.exercise)), namespace)  # on the walk's classes before it
            found[cell.exercise] = (stub, namespace[cell.exercise])
        elif not cell.exercise and only_definitions(cell.source):
            exec(cell.source, namespace)
    return found


def test_the_walk_takes_your_answer_where_its_check_passes_and_the_reference_where_not(page, capsys):
    """The page's cells with some exercises answered right (the reference's code, written in the notebook) and the
    others left as stubs: after each, the walk's name is the learner's answer where its check passes, else the
    reference (for a class, the learner's class with the reference's forward), one printed line saying which; and
    the model the walk builds is made of the learner's classes where they are right."""
    right = {"causal_mask", "attention", "SublayerConnection", "greedy_step"}
    cells, namespace, answers = parse(page).cells, {"__name__": "__main__"}, {}
    for cell in cells:
        if cell is cells[0] or (not cell.exercise and (only_definitions(cell.source) or only_choices(cell.source))):
            exec(cell.source, namespace)
        elif cell.role == "stub":
            exec(cell.source, namespace)
            if cell.exercise in right:
                exec(inspect.getsource(getattr(solutions, cell.exercise)), namespace)
            answers[cell.exercise] = namespace[cell.exercise]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(EXERCISES)
    for name, answer in answers.items():
        line = next(line for line in lines if line.startswith(f"{name}:"))
        if name in right:
            assert namespace[name] is answer and line == f"{name}: yours (its check passes)"
        else:
            assert namespace[name] is not answer and problem(name, namespace[name]) is None
            assert line.startswith(f"{name}: the reference solution (modeling/learning/solutions.py), as yours is "
                                   "not right yet: replace the stub's `raise NotImplementedError`")
    assert issubclass(namespace["DecoderLayer"], answers["DecoderLayer"])  # the stub's __init__ ...
    assert namespace["DecoderLayer"].forward is solutions.DecoderLayer.forward  # ... with the reference's forward
    model = namespace["make_model"](vocab=11, n=1, d_model=32, d_ff=64, h=4)
    assert type(model.encoder.layers[0].sublayer[0]) is answers["SublayerConnection"]
    assert type(model.decoder.layers[0]) is namespace["DecoderLayer"]


def test_the_reference_of_a_class_needs_the_class_itself():
    with pytest.raises(TypeError, match="give your class DecoderLayer itself, not function"):
        reference("DecoderLayer", lambda: None)
    assert reference("causal_mask") is solutions.causal_mask


def test_every_exercise_has_a_check_a_stub_and_a_solution_of_the_same_signature(page):
    functions = exercise_functions(page)
    assert set(functions) == set(EXERCISES) and len(functions) >= 9
    for name, (stub, solution) in functions.items():
        assert inspect.signature(stub) == inspect.signature(solution), name


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_check_fails_on_its_stub_and_passes_on_its_solution(page, name, capsys):
    stub, solution = exercise_functions(page)[name]
    assert problem(name, stub) == "replace the stub's `raise NotImplementedError` with your code"
    assert problem(name, solution) is None
    check(name, stub)
    check(name, solution)
    assert capsys.readouterr().out.splitlines() == [
        f"{name}: not yet: replace the stub's `raise NotImplementedError` with your code", f"{name}: correct"]


def only_on(token: int, gold: list[int], vocab_size: int, epsilon: float) -> torch.Tensor:
    """A target with the gold tokens right (1 - epsilon) and all of epsilon on one other token."""
    target = torch.zeros(len(gold), vocab_size)
    target[range(len(gold)), gold] = 1 - epsilon
    target[:, token] += epsilon
    return target


def uniform_but_padding(gold: list[int], vocab_size: int, epsilon: float) -> torch.Tensor:
    return torch.full((len(gold), vocab_size), 1 / (vocab_size - 1)).index_fill(1, torch.tensor([0]), 0.0)


def logits_of(model, memory, src_mask, tokens, tgt_mask="causal"):
    """The walk's decoder and generator (`model` stands in for its EncoderDecoder), as an answer might call them."""
    tgt_mask = solutions.causal_mask(tokens.size(1)) if tgt_mask == "causal" else tgt_mask
    return model.generator(model.decode(memory, src_mask, tokens, tgt_mask))


def attention_with(scale=True, fill=float("-inf"), invert=False, dim=-1, transpose=True):
    """An attention with one of the usual mistakes."""
    def answer(query, key, value, mask=None):
        scores = query @ (key.transpose(-2, -1) if transpose else key)
        scores = scores / math.sqrt(query.size(-1)) if scale else scores
        if mask is not None:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        weights = scores.softmax(dim=dim)
        return weights @ value, weights
    return answer


WRONG_ANSWERS = [  # (exercise, a wrong answer, what the check says)
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).triu(), "it is transposed"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).triu(1), "True and False are swapped"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).tril(-1),
     "keeps position 0 from attending to itself"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).tril(1),
     "lets position 0 attend to position 1, which comes after it"),
    ("causal_mask", lambda size: torch.ones(size, size).tril(), "has dtype torch.float32, expected torch.bool"),
    ("attention", attention_with(scale=False), "the scores are not scaled: divide q·k by √d_k"),
    ("attention", attention_with(invert=True), "the mask's sense is inverted"),
    ("attention", attention_with(invert=True, fill=torch.finfo(torch.float32).min), "the mask's sense is inverted"),
    ("attention", attention_with(fill=0.0), "masked scores set to 0 still get weight exp(0)"),
    ("attention", attention_with(dim=-2), "take the softmax over the last axis, the keys"),
    ("attention", attention_with(transpose=False), "scores are queries (..., T, d_k) times keys transposed"),
    ("attention", lambda query, key, value, mask=None: solutions.attention(query, key, value),
     "the mask is not applied"),
    ("attention", lambda query, key, value, mask=None: solutions.attention(query, key, value, mask)[0],
     "return (output, weights)"),
    ("split_heads", lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), "reshapes straight to (B, h, T, d_k)"),
    ("split_heads", lambda x, h: x.view(*x.shape[:2], h, -1), "has shape (B, T, h, d_k)"),
    ("split_heads", lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), "gives each head every h-th feature"),
    ("merge_heads", lambda x: x.reshape(x.shape[0], x.shape[2], -1), "reshapes without moving the heads back"),
    ("merge_heads", lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1),
     "view() cannot read a transposed tensor: use .reshape"),
    ("merge_heads", lambda x: x.reshape(x.shape[0], x.shape[1], -1), "has shape (B, h, T·d_k)"),
    ("relative_position_rotation", lambda d_model, k: solutions.relative_position_rotation(d_model, k).T,
     "is transposed"),
    ("relative_position_rotation", lambda d_model, k: solutions.relative_position_rotation(d_model, k + 1),
     "misses PE(pos + 3)"),
    ("relative_position_rotation", lambda d_model, k: torch.eye(d_model + 1), "has shape (17, 17), expected (16, 16)"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: solutions.smoothed_target(gold, vocab_size, epsilon) * 1.1,
     "the gold token gets 0.9900"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: torch.full((len(gold), vocab_size), epsilon / (vocab_size - 2))
     .index_put((torch.arange(len(gold)), torch.tensor(gold)), torch.tensor(1 - epsilon)),
     "<pad> (id 0) gets 0.0167; zero its column"),  # the usual slip: said before the row's sum
    ("smoothed_target", lambda gold, vocab_size, epsilon: only_on(0, gold, vocab_size, epsilon), "<pad> (id 0) gets"),
    ("smoothed_target", uniform_but_padding, "the gold token gets 0.1429, expected 1 - epsilon = 0.9000"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: only_on(3, gold, vocab_size, epsilon),
     "the other tokens should each get epsilon / (V - 2) = 0.0167"),
    ("noam_rate", lambda step, d_model, warmup: d_model**-0.5 * step**-0.5,
     "during the warm-up the smaller term, which the min keeps, is step · warmup_steps^-1.5"),
    ("noam_rate", lambda step, d_model, warmup: min(step**-0.5, step * warmup**-1.5),
     "the factor d_model^-0.5 is missing"),
    ("noam_rate", lambda step, d_model, warmup: "soon", "returned 'soon', not a number"),
    ("greedy_step", lambda model, memory, mask, tokens: logits_of(model, memory, mask, tokens)[:, 0].argmax(-1),
     "took the first position's prediction"),
    ("greedy_step", lambda model, memory, mask, tokens: logits_of(model, memory, None, tokens)[:, -1].argmax(-1),
     "attends to the source's padding: pass src_mask"),
    ("greedy_step", lambda model, memory, mask, tokens: logits_of(model, memory, mask, tokens, None)[:, -1].argmax(-1),
     "the decoder's self-attention sees every token: give model.decode the causal mask"),
    ("greedy_step", lambda model, memory, mask, tokens: logits_of(model, memory, mask, tokens)[:, -1:].argmax(-1),
     "has shape (2, 1)"),
    ("greedy_step", lambda model, memory, mask, tokens: logits_of(model, memory, mask, tokens)[:, -1].argmin(-1),
     "took the least probable token"),
    ("greedy_step", lambda model, memory, mask, tokens: tokens[:, -1], "gave [12, 30], expected [9, 26]"),
    ("greedy_step", lambda model, memory, mask, tokens: tokens[5], "it raised IndexError"),
]


@pytest.mark.parametrize("name, answer, says", WRONG_ANSWERS, ids=[f"{name}-{i}" for i, (name, _, _) in
                                                                    enumerate(WRONG_ANSWERS)])
def test_each_check_says_what_is_wrong(name, answer, says):
    found = problem(name, answer)
    assert found is not None and says in found, found
    assert "\n" not in found


CLASS_WRONG_ANSWERS = [  # (exercise, the body of a wrong forward, what the check says)
    ("SublayerConnection", "return self.norm(x + self.dropout(sublayer(x)))", "normalises the sum (post-norm)"),
    ("SublayerConnection", "return x + self.dropout(sublayer(self.norm(x)))",
     "normalises the sub-layer's input (pre-norm); post-norm, the paper's, normalises the sum"),
    ("SublayerConnection", "return x + self.dropout(sublayer(x))", "there is no LayerNorm"),
    ("SublayerConnection", "return self.norm(self.dropout(sublayer(x))) if not self.norm_first else x",
     "the residual is missing"),
    ("SublayerConnection", "return self.norm(x + sublayer(x)) if not self.norm_first else x + sublayer(self.norm(x))",
     "nothing is dropped"),
    ("SublayerConnection", """
        if self.norm_first:
            return self.dropout(x + sublayer(self.norm(x)))
        return self.norm(self.dropout(x + sublayer(x)))""", "dropout must apply to the sub-layer's output"),
    ("DecoderLayer", """
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, source_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, target_mask))
        return self.sublayer[2](x, self.feed_forward)""", "are the masks swapped?"),
    ("DecoderLayer", """
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, source_mask))
        return self.sublayer[2](x, self.feed_forward)""", "self-attention sees later positions: give it target_mask"),
    ("DecoderLayer", """
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, target_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory))
        return self.sublayer[2](x, self.feed_forward)""", "attends to the source's padding: give it source_mask"),
    ("DecoderLayer", """
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, target_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, x, x, target_mask))
        return self.sublayer[2](x, self.feed_forward)""", "must take its keys and values from memory"),
    ("DecoderLayer", """
        x = self.sublayer[0](x, lambda x: self.src_attn(x, memory, memory, source_mask))
        x = self.sublayer[1](x, lambda x: self.self_attn(x, x, x, target_mask))
        return self.sublayer[2](x, self.feed_forward)""", "the sub-layers are in the wrong order"),
    ("DecoderLayer", """
        x = self.self_attn(x, x, x, target_mask)
        return self.feed_forward(self.src_attn(x, memory, memory, source_mask))""", "the sub-layers are not wrapped"),
]


@pytest.fixture(scope="module")
def walk(page) -> dict:
    """The page's namespace (`walk_namespace`): the walk's definitions, each exercise's name its reference."""
    return walk_namespace(page)


@pytest.mark.parametrize("name, body, says", CLASS_WRONG_ANSWERS,
                         ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(CLASS_WRONG_ANSWERS)])
def test_each_check_of_a_class_says_what_is_wrong(walk, name, body, says):
    arguments = "x, sublayer" if name == "SublayerConnection" else "x, memory, source_mask, target_mask"
    source = (f"class Wrong({name}):\n    def forward(self, {arguments}):\n"
              + textwrap.indent(textwrap.dedent(body).strip(), " " * 8))
    namespace = dict(walk)
    exec(source, namespace)
    assert problem(name, walk[name]) is None  # the walk's own, which the wrong one changes
    found = problem(name, namespace["Wrong"])
    assert found is not None and says in found, found
    assert "\n" not in found


def test_a_class_check_names_parameters_that_are_not_the_stub_s(walk):
    namespace = dict(walk)
    exec("class Renamed(SublayerConnection):\n    def __init__(self, d_model, dropout, norm_first):\n"
         "        super().__init__(d_model, dropout, norm_first)\n        self.layer_norm = self.norm\n"
         "        del self.norm\n", namespace)
    found = problem("SublayerConnection", namespace["Renamed"])
    assert found.startswith("its parameters are not those of the stub's __init__ (it lacks norm.bias)")


def test_a_check_given_no_function_or_an_unknown_exercise_says_so():
    assert problem("causal_mask", torch.ones(3, 3)) == (
        "give the function itself, not Tensor: check('causal_mask', causal_mask)")
    with pytest.raises(ValueError, match="unknown exercise 'attend': choose from relative_position_rotation, "):
        problem("attend", lambda: None)
