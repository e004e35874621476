"""Every figure in README.md, docs/*.md and model_card.md is what the JSON in benchmarks/ renders, and the check that
says so fails on a stale table, an unknown table, a broken marker and a missing benchmarks JSON named in a document."""

import contextlib
import dataclasses
import io
import re
import shutil
from pathlib import Path

import pytest
from launch_helpers import load_script

from tools.figures import (
    REPOSITORY,
    TABLES,
    check_documents,
    check_text,
    documents,
    find_blocks,
    render_table,
    update_documents,
)
from tools.figures.sources import check_sources



@pytest.fixture(scope="module")
def render_figures():
    """scripts/render_figures.py as a module (its main() takes argv and returns the exit status)."""
    return load_script("render_figures")


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of docs/results.md, model_card.md and the benchmark JSON, to break."""
    shutil.copytree(REPOSITORY / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("device"))
    (tmp_path / "docs").mkdir()
    for name in ("docs/results.md", "model_card.md"):
        shutil.copy(REPOSITORY / name, tmp_path / name)
    return tmp_path


def test_every_block_is_what_its_json_renders():
    with_blocks = [path.relative_to(REPOSITORY).as_posix() for path in documents(REPOSITORY)
                   if find_blocks(path.read_text(encoding="utf-8"))[0]]
    assert {"docs/results.md", "docs/performance.md", "model_card.md"} <= set(with_blocks)
    assert check_documents(REPOSITORY) == []  # model_card.md as a whole too: template, config and JSON


def test_every_table_renders_and_states_its_hardware():
    for name in TABLES:
        rendered = render_table(name)
        assert "| --- |" in rendered, name
        assert "Hardware: " in rendered or "| hardware |" in rendered, f"{name} names no hardware"
        assert re.search(r"(torch|transformers) \d", rendered), f"{name} names no versions"


def test_an_edited_table_fails_the_check_naming_its_block(copy, render_figures, capsys):
    results = copy / "docs" / "results.md"
    text = results.read_text(encoding="utf-8")
    block = next(block for block in find_blocks(text)[0] if block.name == "recipes")
    content = block.content(text)
    edited = content.replace("41.52", "41.53", 1)
    assert edited != content
    results.write_text(text[:block.start] + edited + text[block.end:], encoding="utf-8")

    assert check_documents(copy, model_card=False) == [
        f"docs/results.md: line {block.line}: block 'recipes' is stale: it differs from what its JSON renders "
        "(python scripts/render_figures.py rewrites it)"
    ]
    assert render_figures.main(["--check", "--no_model_card", "--root", str(copy)]) == 1
    assert "block 'recipes' is stale" in capsys.readouterr().err

    assert render_figures.main(["--no_model_card", "--root", str(copy)]) == 0  # rewrites the block
    assert results.read_text(encoding="utf-8") == text
    assert check_documents(copy, model_card=False) == []


def test_a_changed_json_makes_its_blocks_stale(copy):
    recipes = copy / "benchmarks" / "results-recipes-cpu.json"
    recipes.write_text(recipes.read_text(encoding="utf-8").replace('"bleu": 41.88', '"bleu": 41.62'), encoding="utf-8")
    stale = {re.search(r"block '([^']+)'", problem)[1] for problem in check_documents(copy, model_card=False)}
    assert {"recipes", "model-card"} <= stale
    changed, problems = update_documents(copy, model_card=False)
    assert problems == [] and copy / "docs" / "results.md" in changed
    assert "41.62" in (copy / "docs" / "results.md").read_text(encoding="utf-8")


def test_a_document_naming_a_missing_benchmark_json_fails(copy):
    (copy / "docs" / "notes.md").write_text(
        "The runs: [JSON](../benchmarks/results-recipes-cpu.json), and `benchmarks/results-gone.json`.\n",
        encoding="utf-8",
    )
    assert check_documents(copy, model_card=False) == [
        "docs/notes.md: names benchmarks/results-gone.json, which does not exist"
    ]
    assert update_documents(copy, model_card=False)[1] == [
        "docs/notes.md: names benchmarks/results-gone.json, which does not exist"
    ]


def test_an_unknown_block_name_fails(copy, render_figures, capsys):
    notes = copy / "docs" / "notes.md"
    text = "# Notes\n\n<!-- figures: no-such-table -->\nkept\n<!-- /figures -->\n"
    notes.write_text(text, encoding="utf-8")
    (problem,) = check_documents(copy, model_card=False)
    assert problem.startswith("docs/notes.md: line 3: block 'no-such-table': unknown figures table 'no-such-table'")
    assert render_figures.main(["--no_model_card", "--root", str(copy)]) == 1
    assert "unknown figures table 'no-such-table'" in capsys.readouterr().err
    assert notes.read_text(encoding="utf-8") == text  # left as it was


@pytest.mark.parametrize("text, problem", [
    ("<!-- figures: recipes -->\n| a |\n", "line 1: block 'recipes' is not closed"),
    ("<!-- figures: recipes -->\n<!-- figures: ablations -->\n<!-- /figures -->\n",
     "line 1: block 'recipes' is not closed before line 2 opens another"),
    ("text\n<!-- /figures -->\n", "line 2: <!-- /figures --> closes no block"),
    ("<!--figures: recipes-->\n<!-- /figures -->\n", "line 1: '<!--figures: recipes-->' is not a figures marker"),
])
def test_a_broken_marker_fails(text, problem):
    found = check_text(text)
    assert any(line.startswith(problem) for line in found), found


def test_configs_state_no_scores():
    """Scores live in benchmarks/ and the docs render them; a config's comments would go stale."""
    score = re.compile(r"BLEU\W{0,3}(of\s+)?\d|\d(\.\d+)?\s+(\w+\s+){0,2}BLEU", re.IGNORECASE)
    for path in sorted((REPOSITORY / "configs").glob("*.yaml")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            comment = line.partition("#")[2]
            assert not score.search(comment), f"{path.name}:{number} states a score: {comment.strip()}"


# ---- every measured figure a user reads has a source ----------------------------------------------------------------


def without_options(help_text: str, names: set[str]) -> str:
    """`help_text` without the entries of the options `names` (an entry: its `  --name` line and the more indented
    lines under it)."""
    kept, skipping = [], False
    for line in help_text.splitlines():
        if re.match(r"  -", line):
            skipping = re.match(r"  --(\w+)", line) is not None and re.match(r"  --(\w+)", line)[1] in names
        elif not line.startswith("   "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def script_help_texts() -> dict[str, str]:
    """scripts/NAME.py -> what `NAME.py --help` prints, each script's main() called in this process; train.py's
    without the entries it inherits unchanged from transformers' Seq2SeqTrainingArguments (transformers' words)."""
    from transformers import Seq2SeqTrainingArguments

    from modeling.training.arguments import TransformerTrainingArguments

    ours = set(TransformerTrainingArguments.__annotations__)
    inherited = {field.name for field in dataclasses.fields(Seq2SeqTrainingArguments)} - ours
    texts = {}
    for path in sorted((REPOSITORY / "scripts").glob("*.py")):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
            load_script(path.stem).main(["--help"])
        text = printed.getvalue()
        texts[f"scripts/{path.name}"] = without_options(text, inherited) if path.stem == "train" else text
    return texts


def test_every_measured_figure_a_user_reads_has_a_source():
    """README.md, docs/ (the experiments' log aside), the recipes' comments and every script's --help (model_card.md
    is rendered whole, above):
    a time, a percentage, a ratio or a size is rendered from JSON or followed by a source note that matches it."""
    texts = script_help_texts()
    assert len(texts) >= 13 and all("usage:" in text for text in texts.values())
    assert check_sources(REPOSITORY, texts) == []


def test_the_source_check_names_times_in_words_approximate_bounds_and_scores_not_the_papers(copy):
    """A time in words that approximates a measurement, a bound's "about", and a score near BLEU, chrF or perplexity
    with no source are named; the paper's own figures (and a row's difference from its base), settings and counts
    are not."""
    json_pointer = "results-recipes-cpu.json#/runs/multi30k_de_en_cpu/test/bleu"
    (copy / "docs" / "notes.md").write_text(
        "The copy task trains in a minute or two, the tests in about 8 minutes.\n"  # line 1: two times in words
        "gpu.sh measures it within about 10 minutes; training stops after at most 15 minutes.\n"  # line 2: one
        "A pilot reached 34.26 validation BLEU and perplexity 8.21 in 1,000 steps.\n"  # line 3: two scores
        f"The recipe scores 41.52<!-- source: {json_pointer} --> BLEU (41.50<!-- source: {json_pointer} --> BLEU).\n"
        "The paper: single-head attention is 0.9 BLEU worse than the best (24.9 against 25.8), base perplexity 4.92.\n"
        "Dropout 0.1 and label smoothing 0.1, `--learning_rate 2.5e-3`, transformers 5.24, two minutes before the limit.\n",
        encoding="utf-8",
    )
    problems = [problem.split(": ", 1)[1] for problem in check_sources(copy) if problem.startswith("docs/notes.md")]
    assert problems == [
        "line 1: 'a minute or two' is a measured time in words: write the measured figure with its source note, or "
        "leave it out",
        "line 1: '8 minutes' has no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' right after it)",
        "line 2: '10 minutes' has no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' right after it)",
        "line 3: '34.26' is a score with no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' right "
        "after it) and not one of the paper's figures",
        "line 3: '8.21' is a score with no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' right "
        "after it) and not one of the paper's figures",
        "line 4: '41.50' is not what its source holds (41.52)",
    ]


def test_the_source_check_names_a_figure_without_source_and_one_that_differs(copy):
    json_pointer = "results-recipes-cpu.json#/runs/multi30k_de_en_cpu-0.2.0/training_seconds"
    (copy / "docs" / "notes.md").write_text(
        f"Training took 1,561 s<!-- source: {json_pointer} --> on 2 cores.\n"  # right
        f"Training took 26.0 min<!-- source: {json_pointer} / 60 -->.\n"  # right, converted
        f"It took 25 min<!-- source: {json_pointer} / 60 -->, the copy task about 30 s.\n"  # wrong, then none
        "A step costs at most 2 s and packing should reach at least 2x; the recipe trains 2,400 steps.\n"  # bounds
        "| seconds | 5 s |\n| --- | --- |\n| 3 | 4 |\n"  # a table's header row; its rows are figures (no unit)
        "`--stop_time_hours 0.25` (15 minutes)\n",
        encoding="utf-8",
    )
    assert [problem for problem in check_sources(copy) if problem.startswith("docs/notes.md")] == [
        "docs/notes.md: line 3: '25 min' is not what its source holds (26.0167)",
        "docs/notes.md: line 3: '30 s' has no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' "
        "right after it)",
        "docs/notes.md: line 8: '15 minutes' has no source (a rendered block, or '<!-- source: FILE.json#/pointer -->' "
        "right after it)",
    ]
    assert check_sources(copy, {"scripts/x.py": "usage: x.py\n  --time T   seconds (default 30 s)\n"}) [-1] == (
        "scripts/x.py --help: line 2: '30 s' has no source (a rendered block, or "
        "'<!-- source: FILE.json#/pointer -->' right after it)")
