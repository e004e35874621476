"""The walk's notebooks (notebooks/), generated from docs/annotated.md: they are the page's cells, they run top to
bottom in a Jupyter kernel and print what the page says (the cells that train behind `slow`), they open on Colab and
install the package there, and every exercise's check fails on its stub and passes on its solution."""

import importlib.util
import inspect
import subprocess

import pytest
import torch

from modeling.learning.exercises import EXERCISES, check, problem
from tools.annotated_page import solutions
from tools.annotated_page.notebook import (
    NOTEBOOK,
    REPOSITORY_URL,
    SOLUTIONS,
    build_notebook,
    colab_url,
    execute_notebook,
    install_source,
    output_problems,
    printed,
    source_problems,
)
from tools.annotated_page.page import PAGE, parse

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
    assert code[0] == install_source() and code[1:] == [cell.source.rstrip("\n") for cell in cells]
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "def sinusoidal_positional_encoding(" in markdown  # the excerpts, to read
    assert "<!--" not in markdown and "](figures/" not in markdown and "python scripts/make_figures.py" not in markdown
    assert "](results.md)" not in markdown and f"]({REPOSITORY_URL}/blob/main/docs/results.md)" in markdown
    assert f"]({REPOSITORY_URL}/raw/main/docs/cross_attention_multi30k.png)" in markdown  # a picture no cell draws
    slow = [cell for cell in notebook.cells if "slow" in cell.metadata.get("tags", [])]
    assert len(slow) == sum(cell.slow for cell in cells) and all("model" in cell.source for cell in slow)


def test_the_notebooks_open_on_colab_and_install_the_package_where_it_is_missing(page, monkeypatch):
    for path, notebook in ((NOTEBOOK, build_notebook(page)), (SOLUTIONS, build_notebook(page, solutions=True))):
        badge = f"(https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(path)})"
        assert badge in notebook.cells[0].source
        assert colab_url(path).endswith(f"/blob/main/notebooks/{path.name}")
    source = install_source().replace("%matplotlib inline", "")  # IPython's, not Python's
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, check: calls.append(command))
    exec(source, {})
    assert calls == []  # installed here: nothing to do
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as on Colab
    exec(source, {})
    assert len(calls) == 1 and calls[0][1:5] == ["-m", "pip", "install", "--quiet"]
    assert calls[0][5] == f"annotated-transformer-hf[plot] @ git+{REPOSITORY_URL}"


# ---- they run --------------------------------------------------------------------------------------------------------


def test_the_notebook_runs_and_prints_what_the_page_says(page, quiet_kernel):
    """Every cell but the slow ones, in a fresh kernel: no error, each printout as on the page, each picture drawn,
    and each exercise's check says its stub is not done yet."""
    executed = execute_notebook(build_notebook(page), skip_slow=True)
    assert output_problems(executed, page) == []
    checks = [printed(cell) for cell in executed.cells if cell.metadata.get("walk", {}).get("role") == "check"]
    assert len(checks) == len(EXERCISES) and all(": not yet: replace the stub's" in text for text in checks)
    outputs = [cell for cell in executed.cells if "output" in cell.metadata.get("walk", {})]
    assert len(outputs) >= 20


def test_the_solutions_notebook_runs_and_every_check_passes(page, quiet_kernel):
    executed = execute_notebook(build_notebook(page, solutions=True))
    assert output_problems(executed, page, solutions=True) == []
    checks = [printed(cell) for cell in executed.cells if cell.metadata.get("walk", {}).get("role") == "check"]
    assert checks == [f"{name}: correct\n" for name in dict.fromkeys(
        cell.exercise for cell in parse(page).cells if cell.exercise)]


@pytest.mark.slow
def test_the_whole_notebook_runs_and_prints_what_the_page_says(page, quiet_kernel):
    """The cells that train too: the copy task, decoding with and without the cache, the attention of every layer."""
    executed = execute_notebook(build_notebook(page))
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
    """Each exercise's (stub, solution), the stub defined by running the page's setup cell and the stub's cell."""
    cells = parse(page).cells
    namespace: dict = {}
    exec(cells[0].source, namespace)  # the page's imports
    found = {}
    for cell in cells:
        if cell.role == "stub":
            exec(cell.source, namespace)
            found[cell.exercise] = (namespace[cell.exercise], getattr(solutions, cell.exercise))
    return found


def test_every_exercise_has_a_check_a_stub_and_a_solution_of_the_same_signature(page):
    functions = exercise_functions(page)
    assert set(functions) == set(EXERCISES) and len(functions) >= 5
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


def logits_of(model, encoder_outputs, mask, tokens):
    return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens).logits


WRONG_ANSWERS = [  # (exercise, a wrong answer, what the check says)
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).triu(), "it is transposed"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).triu(1), "True and False are swapped"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).tril(-1),
     "keeps position 0 from attending to itself"),
    ("causal_mask", lambda size: torch.ones(size, size, dtype=torch.bool).tril(1),
     "lets position 0 attend to position 1, which comes after it"),
    ("causal_mask", lambda size: torch.ones(size, size).tril(), "has dtype torch.float32, expected torch.bool"),
    ("relative_position_rotation", lambda d_model, k: solutions.relative_position_rotation(d_model, k).T,
     "is transposed"),
    ("relative_position_rotation", lambda d_model, k: solutions.relative_position_rotation(d_model, k + 1),
     "misses PE(pos + 3)"),
    ("relative_position_rotation", lambda d_model, k: torch.eye(d_model + 1), "has shape (17, 17), expected (16, 16)"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: solutions.smoothed_target(gold, vocab_size, epsilon) * 1.1,
     "a row sums to 1.1000"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: only_on(0, gold, vocab_size, epsilon), "<pad> (id 0) gets"),
    ("smoothed_target", uniform_but_padding, "the gold token gets 0.1429, expected 1 - epsilon = 0.9000"),
    ("smoothed_target", lambda gold, vocab_size, epsilon: only_on(3, gold, vocab_size, epsilon),
     "the other tokens should each get epsilon / (V - 2) = 0.0167"),
    ("noam_rate", lambda step, d_model, warmup: d_model**-0.5 * step**-0.5,
     "during the warm-up the smaller term, which the min keeps, is step · warmup_steps^-1.5"),
    ("noam_rate", lambda step, d_model, warmup: min(step**-0.5, step * warmup**-1.5),
     "the factor d_model^-0.5 is missing"),
    ("noam_rate", lambda step, d_model, warmup: "soon", "returned 'soon', not a number"),
    ("greedy_step", lambda model, outputs, mask, tokens: logits_of(model, outputs, mask, tokens)[:, 0].argmax(-1),
     "took the first position's prediction"),
    ("greedy_step", lambda model, outputs, mask, tokens: logits_of(model, outputs, None, tokens)[:, -1].argmax(-1),
     "attends to the source's padding: pass attention_mask"),
    ("greedy_step", lambda model, outputs, mask, tokens: logits_of(model, outputs, mask, tokens)[:, -1:].argmax(-1),
     "has shape (2, 1)"),
    ("greedy_step", lambda model, outputs, mask, tokens: tokens[:, -1], "gave [7, 19], expected [9, 26]"),
    ("greedy_step", lambda model, outputs, mask, tokens: tokens[5], "it raised IndexError"),
]


@pytest.mark.parametrize("name, answer, says", WRONG_ANSWERS, ids=[f"{name}-{i}" for i, (name, _, _) in
                                                                    enumerate(WRONG_ANSWERS)])
def test_each_check_says_what_is_wrong(name, answer, says):
    found = problem(name, answer)
    assert found is not None and says in found, found
    assert "\n" not in found


def test_a_check_given_no_function_or_an_unknown_exercise_says_so():
    assert problem("causal_mask", torch.ones(3, 3)) == (
        "give the function itself, not Tensor: check('causal_mask', causal_mask)")
    with pytest.raises(ValueError, match="unknown exercise 'attention': choose from causal_mask, "):
        problem("attention", lambda: None)
