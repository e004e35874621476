"""docs/annotated.md, the guided walk through the model: every claim it makes, its code excerpts (the live source),
its cells and their printed results (tests/test_notebook.py runs them as the notebook) and its pictures (what
scripts/make_figures.py writes, with the data each plots)."""

import ast
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu
import torch
from docs_helpers import prose
from launch_helpers import load_script
from model_helpers import assert_varied, generating_model, padded_batch, tiny_model, trained_to_copy

from modeling import AnnotatedTransformerConfig
from modeling.modeling_annotated_transformer import shift_tokens_right
from modeling.learning import demonstrations as demo
from modeling.learning import multi30k, solutions
from modeling.learning.figures import FIGURES, TRAINED
from modeling.learning.greedy import greedy_decode
from tools.annotated_page.excerpts import REPOSITORY, abridge, excerpt, resolve
from tools.annotated_page.figure_data import (
    check_figures,
    data_path,
    differences,
    figure_data,
    to_json,
    write_figures,
)
from tools.annotated_page.page import (
    FIGURES_DIR,
    PAGE,
    PRINTOUT_TOLERANCE,
    CellError,
    check_text,
    figure_names,
    find_blocks,
    parse,
    render_block,
    run_cells,
    same_printout,
    update_text,
    walk_namespace,
)
from tools.annotated_page.checks import check_page, given_away
from tools.annotated_page.giveaways import GIVEAWAYS

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest (conftest)


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def make_figures():
    """scripts/make_figures.py as a module (its main() takes argv and returns the exit status)."""
    return load_script("make_figures")


# A page of one excerpt and one cell with its printed result, as the walk writes them.
SMALL_PAGE = """Text.

<!-- excerpt: modeling.training.schedule.noam_learning_rate -->
```python
```
<!-- /excerpt -->

```python
from modeling.training.schedule import noam_learning_rate

print(f"peak {noam_learning_rate(4000, 512, 4000):.3e}")
```

<!-- output: peak -->
```text
```
<!-- /output -->
"""


# ---- the page: excerpts, cells and their printouts, pictures, references ---------------------------------------------


def test_every_excerpt_on_the_page_is_the_live_source(page):
    blocks, problems = find_blocks(page)
    assert problems == []
    excerpts = [block for block in blocks if block.kind == "excerpt"]
    assert len(excerpts) >= 15
    for block in excerpts:
        assert page[block.start : block.end] == render_block("excerpt", block.name, keep=block.keep), (
            f"{block.label()} no longer matches the code: run `python scripts/make_figures.py --page`")
    assert sum(bool(block.keep) for block in excerpts) >= 8  # the model's plumbing left out


def test_every_printed_result_follows_the_cell_that_prints_it(page):
    """Each output block belongs to the cell above it (tests/test_notebook.py compares what the cells print), each
    picture to the cell that draws it, and each exercise holds a stub and a check."""
    parsed = parse(page)
    assert parsed.problems == []
    outputs = [block for block in parsed.blocks if block.kind == "output"]
    assert len(outputs) >= 25 and all(any(cell.output is block for cell in parsed.cells) for block in outputs)
    assert sorted(cell.figure for cell in parsed.cells if cell.figure) == sorted(FIGURES)
    assert all("figures." in cell.source for cell in parsed.cells if cell.figure)
    assert [cell.role for cell in parsed.cells if cell.exercise] == ["stub", "check"] * 10
    assert 1 <= sum(cell.slow for cell in parsed.cells) <= 8  # the cells that train, and those that use the model


def test_a_changed_excerpt_or_printout_is_named_stale_and_rendering_restores_it():
    text, problems = update_text(SMALL_PAGE)
    assert problems == [] and "def noam_learning_rate(" in text and "peak 6.988e-04" in text
    assert check_text(text) == []
    edited = text.replace("step = max(step, 1)", "step = max(step, 2)").replace("6.988e-04", "7.988e-04")
    problems = check_text(edited)
    assert len(problems) == 2 and "excerpt: modeling.training.schedule" in problems[0]
    assert "output: peak" in problems[1] and all("stale" in problem for problem in problems)
    restored, problems = update_text(edited)
    assert problems == [] and restored == text


def test_printouts_compare_their_numbers_within_floating_point_noise():
    assert same_printout("k = 1: 6.7e-08\nstd 1.0011", "k = 1: 7.1e-08\nstd 1.0013")
    assert not same_printout("std 1.0011", "std 1.2011")  # a different number
    assert not same_printout("LayerNorm 0.00", "BatchNorm 0.00")  # different words


def test_a_training_s_printout_is_checked_for_the_size_of_its_losses():
    """A cell that trains drifts from one CPU or thread count to another: its losses may differ by more than
    rounding, not by a factor of ten, which a model that did not learn would show."""
    trained = PRINTOUT_TOLERANCE[True]
    assert not same_printout("step 350  loss 0.0021", "step 350  loss 0.0023")  # beyond a computation's noise
    assert same_printout("step 150  loss 0.1265\nstep 350  loss 0.0021", "step 150  loss 0.2996\nstep 350  loss 0.0023",
                         rel_tol=trained)  # two thread counts' runs of the walk's loop
    assert not same_printout("step 350  loss 0.0021", "step 350  loss 0.0300", rel_tol=trained)
    assert not same_printout("step 350  loss 0.0021", "step 350  loss 1.5205", rel_tol=trained)  # no learning
    page = parse(PAGE.read_text(encoding="utf-8"))
    assert any(cell.slow and cell.output is not None and "loss" in cell.source for cell in page.cells)


def test_a_cell_that_raises_is_named_with_its_line():
    text = SMALL_PAGE.replace("noam_learning_rate(4000, 512, 4000)", "noam_learning_rate(4000, 0, 4000)")
    with pytest.raises(CellError, match=r"the cell at line 8 raised ValueError \(its line 3\): The Noam schedule"):
        run_cells(parse(text).cells)
    assert any("the cell at line 8 raised ValueError" in problem for problem in check_text(text))


def test_broken_markers_and_unknown_names_are_named():
    text = ("<!-- excerpt: modeling.loss.nothing_here -->\n```python\n```\n<!-- /excerpt -->\n"
            "<!-- output: orphan -->\n```text\n```\n<!-- /output -->\n"
            "<!-- slow -->\n```text\n```\n"
            "![a picture](figures/masks.png)\n"
            "<!-- exercise: lonely -->\n```python\nx = 1\n```\n<!-- /exercise -->\n"
            "<!-- output: masks -->\n<!--excerpt modeling.loss -->\n")
    problems = check_text(text)
    for expected in ("has no 'nothing_here'", "output: orphan --> does not follow a cell", "slow --> is not followed",
                     "figures/masks.png does not follow the cell", "exercise lonely holds 1 cells",
                     "malformed marker", "output: masks --> is not closed"):
        assert any(expected in problem for problem in problems), (expected, problems)


ABRIDGED_SOURCE = '''def f(x, y):
    """Docstring."""
    a = 1  # plumbing
    # why b
    b = (x +
         y)
    if x:
        c = 2
    else:
        d = 3
    for i in range(3):
        e = i
    return b
'''


def test_an_abridged_excerpt_keeps_whole_statements_their_blocks_headers_and_marks_what_it_leaves_out():
    assert abridge(ABRIDGED_SOURCE, ("b = (", "d = 3", "for i in")) == '''def f(x, y):
    # …
    # why b
    b = (x +
         y)
    if x:
        # …
    else:
        d = 3
    for i in range(3):
        e = i
    # …'''
    with pytest.raises(ValueError, match="no statement holds 'z = 4'"):  # the code changed: the excerpt says so
        abridge(ABRIDGED_SOURCE, ("b = (", "z = 4"))


def test_an_abridged_excerpt_of_the_model_quotes_its_lines_in_order_and_links_the_whole():
    name = "modeling.modeling_annotated_transformer.AnnotatedTransformerDecoder.forward"
    keep = ("encoder_hidden_states=None", "hidden_states = self.embeddings(", "for layer in self.layers")
    abridged = excerpt(name, keep).splitlines()
    assert abridged[0] == "# modeling/modeling_annotated_transformer.py, abridged" and "# …" in [line.strip()
                                                                                          for line in abridged]
    assert len(abridged) < len(excerpt(name).splitlines()) / 2
    full = excerpt(name).splitlines()[1:]
    position = 0
    for line in abridged[1:]:  # every line but the elisions is the source's, in order
        if line.strip() != "# …":
            position = full.index(line, position) + 1
    assert any("for layer in self.layers:" in line for line in abridged)
    rendered = render_block("excerpt", name, keep=keep)
    assert rendered.endswith("The whole of `AnnotatedTransformerDecoder.forward`: [modeling/modeling_annotated_transformer.py]"
                             "(../modeling/modeling_annotated_transformer.py).\n")
    text = f"<!-- keep: {' | '.join(keep)} -->\n<!-- excerpt: {name} -->\n```python\n```\n<!-- /excerpt -->\n"
    assert parse(text).blocks[0].keep == keep and update_text(text)[0].count("# …") >= 2
    assert any("is not followed by an excerpt" in problem
               for problem in parse("<!-- keep: return -->\n\nText.\n").problems)


def test_excerpts_are_taken_by_object_with_the_file_they_come_from():
    text = excerpt("modeling.learning.greedy.greedy_decode")
    assert text.startswith("# modeling/learning/greedy.py\n@torch.no_grad()\ndef greedy_decode(")
    method = excerpt("modeling.modeling_annotated_transformer.AnnotatedTransformerEncoder.forward")
    assert method.splitlines()[1] == "@capture_outputs" and "    def" not in method.splitlines()[2]  # dedented
    with pytest.raises(ValueError, match="has no 'Missing'"):
        resolve("modeling.modeling_annotated_transformer.Missing")


def test_the_page_shows_every_figure_in_order_and_each_is_committed_with_its_data(page):
    assert figure_names(page) == list(FIGURES)
    for name in FIGURES:
        assert (FIGURES_DIR / f"{name}.png").is_file(), f"docs/figures/{name}.png: run scripts/make_figures.py"
        assert json.loads(data_path(FIGURES_DIR, name).read_text())["axes"], name
    total = sum((FIGURES_DIR / f"{name}.{kind}").stat().st_size for name in FIGURES for kind in ("png", "json"))
    assert total < 1.5 * 2**20, f"docs/figures/ holds {total / 2**20:.1f} MiB"


def test_the_page_names_only_tests_that_exist(page):
    references = re.findall(r"tests/(test_\w+\.py)(?:::(test_\w+))?", page)
    assert len({test for _, test in references if test}) >= 25
    for file, test in references:
        path = REPOSITORY / "tests" / file
        assert path.is_file(), f"the page names tests/{file}, which does not exist"
        if test:
            defined = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
            assert test in defined, f"the page names tests/{file}::{test}, which does not exist"


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (not the comments of its code blocks): lower case, punctuation
    dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.*)$", prose(text), flags=re.MULTILINE)}


def test_the_page_tells_no_story_of_the_project_and_its_links_point_at_files(page):
    """The rules tests/test_docs.py applies to every user page, and every anchor names a heading."""
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", page), "a commit hash"
    assert not re.findall(r"\b(?:the )?issues?\b|this session|this machine|next lease", page, flags=re.I)
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", prose(page)):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = PAGE.parent / target if target else PAGE
        assert path.exists(), f"annotated.md links {target}, which does not exist"
        if anchor:
            assert anchor in heading_anchors(path.read_text(encoding="utf-8")), f"no heading #{anchor} in {path.name}"


def extras(name: str, optional: dict) -> set[str]:
    """The requirements an extra installs, the extras it names included."""
    found = set()
    for requirement in optional[name]:
        if match := re.match(r"annotated-transformer-hf\[(.*)\]", requirement):
            found |= {item for extra in match[1].split(",") for item in extras(extra.strip(), optional)}
        else:
            found.add(re.split(r"[<>=\[ ;]", requirement)[0])
    return found


def test_the_setup_block_installs_what_its_commands_need(page):
    """The page's setup block runs as written: the extras it installs hold what each later command imports."""
    block = re.search(r"```bash\n(.*?)```", page, flags=re.DOTALL)[1]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    optional = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = re.fullmatch(r'pip install -e "\.\[(\w+)\]"', commands[0])
    assert install, commands[0]
    installed = extras(install[1], optional)
    needs = {"make_figures.py": {"matplotlib"}, "--page": {"nbclient", "nbformat", "ipykernel"}, "pytest": {"pytest"}}
    for command in commands[1:]:
        for word, required in needs.items():
            assert word not in command or required <= installed, f"{command!r} needs {required - installed}"
        for path in re.findall(r"(?:scripts|tests)/\S+\.py", command):
            assert (REPOSITORY / path).is_file(), path
    assert {"matplotlib", "nbclient", "ipykernel", "pytest"} <= installed
    assert not {"pytest", "nbclient"} <= extras("plot", optional)  # what the block installed before: too little


def test_make_figures_writes_each_picture_with_the_data_it_plots(tmp_path):
    names = ["masks", "noam_schedule"]
    paths = write_figures(tmp_path, names)
    assert [path.name for path in paths] == [f"{name}.png" for name in names]
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in paths)
    noam = json.loads(data_path(tmp_path, "noam_schedule").read_text())
    line = noam["axes"][0]["lines"][0]
    assert line["label"] == "d_model 512, warmup 4000" and line["y"]["shape"] == [20000]
    assert line["y"]["summary"][3] == pytest.approx((512 * 4000) ** -0.5, rel=1e-3)  # its largest value: the peak
    assert check_figures(tmp_path, names) == []


def test_the_committed_figures_plot_what_the_code_draws_now():
    assert check_figures(FIGURES_DIR, [name for name in FIGURES if name not in TRAINED]) == []


def test_make_figures_check_fails_on_a_changed_figure(make_figures, tmp_path, capsys):
    for name in ("masks", "noam_schedule"):
        for suffix in ("png", "json"):
            shutil.copy(FIGURES_DIR / f"{name}.{suffix}", tmp_path)
    assert make_figures.main(["--check", "--only", "masks", "noam_schedule", "--output_dir", str(tmp_path)]) == 0
    data = json.loads(data_path(tmp_path, "noam_schedule").read_text())
    data["axes"][0]["lines"][1]["y"]["samples"][100] *= 1.1  # warmup 8000's curve, once drawn otherwise
    data_path(tmp_path, "noam_schedule").write_text(to_json(data))
    masks = data_path(tmp_path, "masks")
    masks.write_text(masks.read_text().replace("decoder self-attention, sentence 2", "decoder, sentence 2"))
    capsys.readouterr()
    assert make_figures.main(["--check", "--only", "masks", "noam_schedule", "--output_dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err.splitlines()[:-1]  # the last line says how long it took
    assert len(errors) == 2 and all("is stale" in error for error in errors)
    assert "masks.png" in errors[0] and "'decoder, sentence 2' became 'decoder self-attention, sentence 2'" in errors[0]
    assert "noam_schedule.png" in errors[1] and "lines[1].y.samples[100]" in errors[1]


def test_make_figures_check_fails_on_a_picture_that_is_not_the_one_drawn_from_its_data(make_figures, tmp_path,
                                                                                      capsys):
    """Each picture's data records its PNG's digest: a PNG swapped for another, or drawn again without its data,
    fails the check though the data still matches what the code draws."""
    for name in ("attention_scaling", "masks"):
        for suffix in ("png", "json"):
            shutil.copy(FIGURES_DIR / f"{name}.{suffix}", tmp_path)
    shutil.copy(FIGURES_DIR / "copy_task_attention.png", tmp_path / "attention_scaling.png")  # another picture
    data = json.loads(data_path(tmp_path, "masks").read_text())
    del data["png_sha256"]  # data written without its picture's digest
    data_path(tmp_path, "masks").write_text(to_json(data))
    capsys.readouterr()
    assert make_figures.main(["--check", "--only", "attention_scaling", "masks", "--output_dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err.splitlines()[:-1]
    assert errors == [
        f"{tmp_path}/attention_scaling.png is not the picture drawn with attention_scaling.json (its digest is not "
        "the one its data records): run `python scripts/make_figures.py --only attention_scaling`",
        f"{tmp_path}/masks.png is not the picture drawn with masks.json (its data records no digest of it): run "
        "`python scripts/make_figures.py --only masks`",
    ]


def test_a_figure_s_data_compares_within_floating_point_noise():
    figure = FIGURES["attention_scaling"]()
    data = figure_data(figure)
    noisy = json.loads(json.dumps(data))
    noisy["axes"][0]["lines"][0]["y"]["values"][3] *= 1 + 1e-5  # a last-digit difference between two CPUs
    assert differences(data, noisy) == []
    noisy["axes"][0]["lines"][0]["y"]["values"][3] *= 1.01
    assert differences(data, noisy) != []


def test_a_trained_figure_s_data_compares_on_average_within_what_another_cpu_trains():
    """The copy task's attention, trained on another CPU, moves every weight by about 0.02 (measured between kernel
    sets: 0.013 to 0.020 on average, up to 0.05 over one map); untrained, its maps are about uniform."""
    data = json.loads(data_path(FIGURES_DIR, "copy_task_attention").read_text())
    maps = [image for axes in data["axes"] for image in axes["images"]]
    assert len(maps) == 24 and differences(data, data, trained=True) == []
    drifted, uniform = json.loads(json.dumps(data)), json.loads(json.dumps(data))
    signs = np.random.default_rng(0).choice([-1.0, 1.0], size=len(maps[0]["values"]))
    for image in (image for axes in drifted["axes"] for image in axes["images"]):
        image["values"] = [min(max(value + 0.025 * sign, 0.0), 1.0) for value, sign in zip(image["values"], signs)]
    assert differences(data, drifted, trained=True) == []
    assert differences(data, drifted) != []  # an untrained picture's numbers are each held to their last digits
    for image in (image for axes in uniform["axes"] for image in axes["images"]):
        image["values"] = [1 / image["shape"][1]] * len(image["values"])
    (found,) = differences(data, uniform, "copy_task_attention", trained=True)
    mean = re.fullmatch(r"copy_task_attention: its plotted numbers differ by ([\d.]+) of their largest magnitude on "
                        r"average \(a trained model's, at most 0\.04\)", found)
    assert mean and float(mean[1]) > 0.04
    drifted["axes"][0]["title"] += " (another layer)"  # text is held exactly, trained or not
    assert len(differences(data, drifted, trained=True)) == 1


@pytest.mark.slow
def test_the_copy_task_s_figure_checks_as_current_with_another_cpu_s_kernels(tmp_path):
    """The trained picture, drawn again with the scalar kernels (no AVX: another CPU's summation order), still reads
    as the committed one."""
    script = REPOSITORY / "scripts" / "make_figures.py"
    environment = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    run = subprocess.run([sys.executable, str(script), "--check", "--only", "copy_task_attention"], env=environment,
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr


@pytest.mark.slow
def test_make_figures_writes_every_figure_the_page_shows(page, make_figures, tmp_path, capsys):
    assert make_figures.main(["--output_dir", str(tmp_path)]) == 0
    assert sorted(path.stem for path in tmp_path.glob("*.png")) == sorted(figure_names(page))
    assert check_figures(tmp_path) == []


@pytest.mark.slow
def test_make_figures_check_passes_on_the_committed_page_notebooks_and_figures(make_figures, capsys, multi30k_dir,
                                                                               monkeypatch):
    # the page's last section prints Multi30k's pairs, which a clone finds where the tests' data is (a fresh clone's
    # data/multi30k is empty: the page would fall back to its written pairs and read as stale)
    monkeypatch.setenv("MULTI30K_DIR", str(multi30k_dir))
    assert make_figures.main(["--check"]) == 0, capsys.readouterr().err


def test_make_figures_check_names_each_missing_figure(make_figures, tmp_path, capsys):
    assert make_figures.main(["--check", "--only", "masks", "noam_schedule", "--output_dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err.splitlines()[:-1]
    assert errors == [f"{tmp_path}/{name}.png and {name}.json missing: run `python scripts/make_figures.py --only "
                      f"{name}`" for name in ("masks", "noam_schedule")]


def test_make_figures_refuses_an_unknown_figure_in_one_line(make_figures, capsys):
    with pytest.raises(SystemExit) as exit_info:
        make_figures.main(["--only", "no_such_figure"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'no_such_figure'" in capsys.readouterr().err


# ---- §3.5, §3.4 positional encoding and embeddings -------------------------------------------------------------------


@pytest.mark.parametrize("offset", [1, 5, 20, 50])
def test_pe_of_pos_plus_k_is_a_rotation_of_pe_of_pos(offset):
    rotation = demo.relative_position_rotation(512, offset)
    torch.testing.assert_close(rotation @ rotation.T, torch.eye(512, dtype=torch.float64))  # a rotation
    assert rotation.count_nonzero() <= 2 * 512  # 2x2 blocks on the diagonal
    assert demo.rotation_error(1000, 512, offset) < 1e-6


def test_scaled_embeddings_have_unit_variance():
    scale = demo.embedding_scale()
    assert scale.embedding_std == pytest.approx(512**-0.5, rel=0.02)
    assert scale.scaled_std == pytest.approx(1.0, rel=0.02)
    assert scale.positional_rms == pytest.approx(math.sqrt(0.5), rel=1e-4)


# ---- §3.1, §3.2.3 masks ----------------------------------------------------------------------------------------------


def test_the_masks_are_what_the_attention_receives():
    boolean, additive = demo.masks_as_received("sdpa"), demo.masks_as_received("eager")
    sources_real = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    targets_real = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    expected = {
        "encoder": sources_real[:, None, None, :].expand(2, 1, 5, 5),  # padding keys masked, every query
        "decoder": causal[None, None] & targets_real[:, None, None, :],  # no later position, no padding
        "cross": sources_real[:, None, None, :].expand(2, 1, 4, 5),  # the source's padding mask, in the decoder
    }
    minimum = torch.finfo(torch.float32).min
    for kind, allowed in expected.items():
        assert boolean[kind].dtype == torch.bool and torch.equal(boolean[kind], allowed), kind
        assert additive[kind].dtype == torch.float32
        assert torch.equal(additive[kind], torch.where(allowed, 0.0, minimum)), kind


# ---- §3.2 attention --------------------------------------------------------------------------------------------------


def test_scaling_keeps_the_scores_at_unit_variance():
    for d_k in (4, 64, 512):
        spread = demo.dot_product_spread(d_k)
        assert spread.score_std == pytest.approx(math.sqrt(d_k), rel=0.1)
        assert spread.scaled_score_std == pytest.approx(1.0, rel=0.1)
    assert demo.dot_product_spread(512).top_weight > 0.9  # unscaled: nearly one-hot
    assert demo.dot_product_spread(512).scaled_top_weight < 0.3  # scaled: as spread as at d_k = 4


def test_one_projection_is_h_heads_of_d_k():
    combined, separate = demo.heads_as_separate_projections()
    assert (combined - separate).abs().max() < 1e-6


# ---- §4 why self-attention ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [8, 64])
def test_self_attention_costs_four_n_squared_d_between_positions(length):
    cost = demo.self_attention_cost(length, d_model=64, heads=4)
    assert cost.attention == 4 * length**2 * 64  # Q K^T and weights times V: 2 n^2 d multiply-adds
    assert cost.projections == 8 * length * 64**2  # four d x d projections of n positions


def test_one_self_attention_layer_connects_every_position():
    read = demo.positions_read(length=32)
    assert read == {"self-attention": 32, "a convolution of width 3": 2}  # path length 1 against n / k


# ---- §3.1, §5.4 the sublayer connection ------------------------------------------------------------------------------


def test_deepnet_initialisation_starts_post_norm_sublayers_near_the_identity():
    xavier, deepnet, pre_norm = demo.sublayer_starts()
    assert len(deepnet.update_ratios) == 6 * 2 + 6 * 3  # every sublayer of a 6+6 model, measured once
    assert max(deepnet.update_ratios) < 0.2
    assert np.mean(xavier.update_ratios) > 0.5
    decoder_first, decoder_last = 6, 11
    assert xavier.gradient_norms[decoder_first] < 0.5 * xavier.gradient_norms[decoder_last]  # vanishing downwards
    assert deepnet.gradient_norms[decoder_first] > 0.8 * deepnet.gradient_norms[decoder_last]  # even
    assert pre_norm.label.startswith("pre-norm")


@pytest.mark.parametrize("scheme", ["xavier_uniform", "fairseq", "deepnet"])
def test_each_init_scheme_draws_the_standard_deviation_of_its_formula(scheme):
    stds = demo.initial_stds(scheme, preset="base", vocab_size=2000)
    xavier = {name: math.sqrt(6 / sum(fans)) / math.sqrt(3) for name, fans in {
        "embeddings": (2000, 512), "encoder q_proj": (512, 512), "encoder v_proj": (512, 512),
        "encoder fc1": (512, 2048), "decoder v_proj": (512, 512), "decoder fc2": (2048, 512)}.items()}
    gains = {"encoder v_proj": 0.87 * (6**4 * 6) ** (-1 / 16), "encoder fc1": 0.87 * (6**4 * 6) ** (-1 / 16),
             "decoder v_proj": (12 * 6) ** (-1 / 4), "decoder fc2": (12 * 6) ** (-1 / 4)}
    for name, std in xavier.items():
        if name == "embeddings" and scheme != "xavier_uniform":
            std = 512**-0.5  # fairseq's N(0, d_model^-0.5)
        elif scheme == "deepnet":
            std *= gains.get(name, 1.0)
        assert stds[name] == pytest.approx(std, rel=0.02), name


def test_layer_norm_ignores_the_batch_and_batch_norm_does_not():
    result = demo.layer_norm_against_batch_norm()
    for name in ("beside B", "more padding"):
        assert (result.layer_norm[name] - result.layer_norm["alone"]).abs().max() < 1e-6
        assert (result.batch_norm[name] - result.batch_norm["alone"]).abs().max() > 0.5
    assert (result.batch_norm["more padding"] - result.batch_norm["beside B"]).abs().max() > 0.1  # padding counts


# ---- §3.3, §3.4 ------------------------------------------------------------------------------------------------------


def run_cell(namespace: dict, source: str) -> str:
    """What `source` prints, run in `namespace`."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "<a cell of the page>", "exec"), namespace)
    return printed.getvalue()


def page_cell(page: str, output: str):
    """The page's cell whose printout is the output block `output`."""
    return next(cell for cell in parse(page).cells if cell.output is not None and cell.output.name == output)


def test_the_feed_forward_cell_s_three_views_agree_on_the_same_weights(page):
    """The page's cell, run: with the package's weights loaded first, the whole sequence, each position alone, two
    convolutions of kernel size 1 and the package's module agree to float32 rounding (1e-6, on outputs of order 1).
    Computed before the load, as the cell once did, two of them are another network's and differ by about 1."""
    source = page_cell(page, "feed_forward").source
    printed = run_cell(walk_namespace(page), source)
    differences = {line.split(" largest")[0].strip(): float(line.rsplit(" ", 1)[1]) for line in printed.splitlines()}
    assert set(differences) == {"by position", "convolutions", "the package's"}
    assert all(difference < 1e-6 for difference in differences.values()), differences
    load = next(line for line in source.splitlines() if line.startswith("ffn.load_state_dict("))
    loop = "    for name, other in"
    loaded_late = source.replace(load + "\n", "").replace(loop, f"    {load}\n{loop}")
    assert loaded_late != source
    late = run_cell(walk_namespace(page), loaded_late)
    assert max(float(line.rsplit(" ", 1)[1]) for line in late.splitlines()) > 0.1


def test_the_feed_forward_network_is_two_convolutions_with_kernel_size_1():
    outputs = demo.feed_forward_three_ways()
    for name in ("by position", "convolutions"):
        assert (outputs[name] - outputs["sequence"]).abs().max() < 1e-6, name


def test_one_matrix_is_shared_three_ways():
    assert demo.shared_matrices(demo.small_model()) == {"target embedding": True, "pre-softmax projection": True}
    counts = demo.tied_and_untied_parameters()
    assert counts["untied"] - counts["tied"] == 2 * 37000 * 512


def test_a_joint_vocabulary_serves_both_languages():
    tokenizer = demo.joint_tokenizer()
    german, english = ([pair[side] for pair in demo.EXAMPLE_PAIRS] for side in (0, 1))
    for sentence in german + english:
        ids = tokenizer(sentence)["input_ids"]
        assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids, skip_special_tokens=True) == sentence
    used = [{token for sentence in sentences for token in tokenizer.tokenize(sentence)} for sentences in
            (german, english)]
    assert len(used[0] & used[1]) >= 10  # subwords both languages use, one id (and embedding) each
    assert len(tokenizer) <= 400 and "ĠHund" in used[0] and "Ġdog" in used[1]


# ---- §5 training -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model, warmup_steps", demo.NOAM_SETTINGS)
def test_noam_peaks_at_warmup_steps(d_model, warmup_steps):
    curve = demo.noam_curve(d_model, warmup_steps, steps=4 * warmup_steps)
    peak = (d_model * warmup_steps) ** -0.5
    assert int(curve.argmax()) + 1 == warmup_steps and curve.max() == pytest.approx(peak, rel=1e-12)
    assert curve[warmup_steps // 2 - 1] == pytest.approx(peak / 2, rel=1e-12)  # linear rise
    assert curve[4 * warmup_steps - 1] == pytest.approx(peak / 2, rel=1e-12)  # inverse square root decay


@pytest.mark.parametrize("max_tokens", [1024, 4096, 8192])
def test_token_budget_batches_waste_far_less_padding(max_tokens):
    comparison = demo.padding_comparison(max_tokens, *demo.example_lengths())
    assert comparison.budget_padding < 0.1 and comparison.random_padding > 0.45
    assert comparison.budget_padding < comparison.random_padding / 5
    assert all(size * length <= max_tokens for size, length in zip(comparison.batch_sizes,
                                                                   comparison.longest_sources))


@pytest.mark.parametrize("epsilon", [0.1, 0.4])
def test_the_smoothed_target_sums_to_one_with_the_gold_token_at_one_minus_epsilon(epsilon):
    gold = [4, 6, 2, 1]
    targets = demo.smoothed_targets(gold, 8, epsilon)
    torch.testing.assert_close(targets.sum(-1), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(targets[range(4), gold], torch.full((4,), 1 - epsilon, dtype=torch.float64))
    assert targets[:, 0].abs().max() < 1e-12  # padding gets nothing
    others = torch.ones_like(targets, dtype=torch.bool)
    others[range(4), gold], others[:, 0] = False, False
    torch.testing.assert_close(targets[others], torch.full((4 * 6,), epsilon / 6, dtype=torch.float64))


@pytest.mark.parametrize("epsilon", [0.1, 0.4])
def test_the_loss_is_least_at_confidence_one_minus_epsilon(epsilon):
    confidences = np.linspace(0.02, 0.999, 400)
    losses = demo.loss_against_confidence(confidences, epsilon)
    assert confidences[losses.argmin()] == pytest.approx(1 - epsilon, abs=confidences[1] - confidences[0])
    assert losses.min() < 1e-4 and losses[-1] > losses.min() + 0.1  # over-confidence costs
    assert np.all(np.diff(demo.loss_against_confidence(confidences, 0.0)) < 0)  # without smoothing: no minimum


# ---- decoding --------------------------------------------------------------------------------------------------------


def test_greedy_decode_gives_the_tokens_of_generate():
    model = trained_to_copy(tiny_model(0), steps=200)
    input_ids, attention_mask = padded_batch()
    for max_new_tokens in (3, 12):
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, do_sample=False,
                                  max_new_tokens=max_new_tokens)
        assert torch.equal(greedy_decode(model, input_ids, attention_mask, max_new_tokens), expected)
    assert_varied(expected)


def test_the_cache_projects_each_position_once():
    """Greedy decoding without the cache (every step reads the whole prefix) and with it: the same tokens; the
    decoder's projections compute T(T + 1)/2 positions per layer and sentence without, T with, and the source's keys
    and values T times without, once with."""
    model = generating_model()
    input_ids, attention_mask = padded_batch()
    steps, batch, source_length, layers = 6, input_ids.shape[0], input_ids.shape[1], model.config.decoder_layers

    @torch.no_grad()
    def without_cache():
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        tokens = torch.full((batch, 1), model.config.decoder_start_token_id)
        for _ in range(steps):
            logits = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=tokens,
                           use_cache=False).logits
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens

    model.config.eos_token_id = model.generation_config.eos_token_id = -1  # no early stop: exactly `steps` steps
    with demo.projection_counter(model) as uncached:
        recomputed = without_cache()
    with demo.projection_counter(model) as cached:
        decoded = greedy_decode(model, input_ids, attention_mask, steps)
    assert torch.equal(recomputed, decoded)
    assert_varied(decoded)
    prefix_sum = steps * (steps + 1) // 2 * batch * layers
    assert all(uncached[f"self-attention {letter}"] == prefix_sum for letter in "qkv")
    assert uncached["encoder-decoder q"] == prefix_sum
    assert uncached["encoder-decoder k"] == uncached["encoder-decoder v"] == steps * source_length * batch * layers
    assert all(cached[f"self-attention {letter}"] == steps * batch * layers for letter in "qkv")
    assert cached["encoder-decoder k"] == cached["encoder-decoder v"] == source_length * batch * layers


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_greedy_decode_pads_the_rows_that_have_finished(norm_first):
    """A row that emits </s> early is padded while the other goes on, as generate() pads it (</s> is made a token
    the first row emits and the second does not)."""
    model = generating_model(norm_first=norm_first)
    input_ids, attention_mask = padded_batch()
    free = greedy_decode(model, input_ids, attention_mask, 12)
    eos = next(token for token in free[0, 2:].tolist() if token not in free[1].tolist())
    model.config.eos_token_id = model.generation_config.eos_token_id = eos
    expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, do_sample=False,
                              max_new_tokens=12)
    decoded = greedy_decode(model, input_ids, attention_mask, 12)
    assert torch.equal(decoded, expected)
    assert decoded[0, -1] == model.config.pad_token_id and eos not in decoded[1].tolist()
    assert_varied(decoded)


@pytest.mark.slow
def test_the_copy_task_attends_along_the_diagonal():
    """Trained as make_figures.py and the walk train it: it copies, output position i reads source position i in the
    last layer's encoder-decoder attention, and every layer and head of each kind is there."""
    result = demo.copy_task_attention()
    assert result.accuracy > 0.95
    assert result.decoder_input[1:] == result.source[:-1]  # the greedy output copies the source (</s> aside)
    diagonal = result.cross_attention.mean(0).argmax(-1) == torch.arange(len(result.decoder_input))
    assert diagonal.float().mean() >= 0.8
    queries, keys = len(result.decoder_input), len(result.source)
    shapes = {"encoder": (4, keys, keys), "decoder": (4, queries, queries), "cross": (4, queries, keys)}
    for kind, layers in result.attentions.items():
        assert len(layers) == 2 and all(tuple(layer.shape) == shapes[kind] for layer in layers), kind
        assert all(torch.allclose(layer.sum(-1), torch.ones(layer.shape[:-1])) for layer in layers)


def test_only_eager_attention_returns_the_weights():
    model = demo.small_model()
    source, decoder_input = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        assert model(input_ids=source, decoder_input_ids=decoder_input, output_attentions=True).cross_attentions == ()
    with pytest.raises(ValueError, match="returns no attention weights: call model.set_attn_implementation"):
        demo.attention_weights(model, source, decoder_input)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = demo.attention_weights(model, source, decoder_input)
    assert {kind: [tuple(layer.shape) for layer in layers] for kind, layers in attentions.items()} == {
        "encoder": [(4, 4, 4)] * 2, "decoder": [(4, 3, 3)] * 2, "cross": [(4, 3, 4)] * 2}


# ---- where the package differs ---------------------------------------------------------------------------------------


def test_the_table_of_differences_states_the_defaults(page):
    section = page[re.search(r"^## \d+\. Where this package differs", page, re.MULTILINE).start():]
    rows = {row.split("|")[1].strip(): row.split("|")[2].strip() for row in re.findall(r"^\|.*\|$", section,
                                                                                       flags=re.MULTILINE)}
    for topic in ("norm placement", "initialisation", "attention dropout", "activation dropout", "LayerNorm",
                  "mask fill"):
        assert topic in rows, topic
    config = AnnotatedTransformerConfig.from_preset("base")
    assert rows["norm placement"].startswith("post-norm") and config.norm_first is False
    assert rows["initialisation"].startswith("`deepnet`") and config.init_scheme == "deepnet"
    assert rows["attention dropout"] == "`attention_dropout`, 0" and config.attention_dropout == 0
    assert rows["activation dropout"] == "`activation_dropout`, 0" and config.activation_dropout == 0
    assert "ε = 1e-6" in rows["LayerNorm"] and config.layer_norm_eps == 1e-6
    layer = demo.small_model().model.encoder.layers[0].self_attn_sublayer.layer_norm
    assert type(layer) is torch.nn.LayerNorm
    additive = demo.masks_as_received("eager")["encoder"]
    assert additive.min() == torch.finfo(torch.float32).min  # "the dtype's minimum (eager)"


def test_minus_1e9_cannot_fill_float16_and_the_dtype_minimum_gives_a_uniform_row():
    """The Annotated Transformer's masked_fill(-1e9) raises on float16 scores; -1e9 cast to float16 is -inf, and a
    fully masked row of it is NaN; the dtype's minimum gives a uniform row (and -1e9 does in float32)."""
    scores, masked = torch.zeros(4, dtype=torch.float16), torch.ones(4, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="cannot be converted to type .*Half without overflow"):
        scores.masked_fill(masked, -1e9)
    minus_1e9 = torch.tensor(-1e9).half()  # beyond float16's range
    assert minus_1e9.item() == float("-inf") and (scores + minus_1e9).softmax(-1).isnan().all()
    uniform = scores.masked_fill(masked, torch.finfo(torch.float16).min).softmax(-1)
    torch.testing.assert_close(uniform, torch.full((4,), 0.25, dtype=torch.float16))
    torch.testing.assert_close(torch.zeros(4).masked_fill(masked, -1e9).softmax(-1), torch.full((4,), 0.25))


# ---- the model built from scratch, the exercises' answers ----------------------------------------------------------


def test_no_exercise_s_answer_shows_before_its_solution_break(page):
    assert given_away(page) == []
    assert len(parse(page).exercises) >= 9 and set(GIVEAWAYS) == {name for name, _, _ in parse(page).exercises}
    name, _, end = next(exercise for exercise in parse(page).exercises if exercise[0] == "causal_mask")
    leaked = page[:end] + "\n```python\nmask = torch.ones(4, 4).tril()\n```\n" + page[end:]
    found = given_away(leaked)
    assert len(found) == 2 and "'tril' gives away the answer of exercise causal_mask" in found[0]
    assert "the learner's notebook, cell" in found[1] and "its code shows 'tril'" in found[1]


def test_a_printout_that_shows_a_checked_value_before_its_break_is_named(page):
    """A value the check of noam_rate expects (the rate at step 4000, 6.988e-04 to the digits printed), printed
    between the exercise and its solution break, gives the answer away; printed after the break, it does not."""
    name, _, end = next(exercise for exercise in parse(page).exercises if exercise[0] == "noam_rate")
    cell = "\n```python\nprint(0.0007)\n```\n\n<!-- output: peak -->\n```text\npeak 6.988e-04\n```\n<!-- /output -->\n"
    found = given_away(page[:end] + cell + page[end:])
    assert len(found) == 1 and "output: peak --> prints 6.988e-04, a value the check of exercise noam_rate" in found[0]
    after = page.index("<!-- /solution -->", end) + len("<!-- /solution -->\n")
    assert given_away(page[:after] + cell + page[after:]) == []
    assert given_away(page[:end] + cell.replace("6.988e-04", "7.0e-04") + page[end:]) == []  # too few digits


def test_the_learner_s_notebook_holds_no_answer_and_takes_yours_or_the_reference(page):
    """The learner's notebook leaves out the page's solution regions, folds the package's code that holds an answer
    in <details>, and after each exercise takes the learner's answer or the reference; a cell that shows an answer
    after the break (the page may, the notebook may not) is named."""
    pytest.importorskip("nbformat")
    from tools.annotated_page.notebook import build_notebook

    notebook = build_notebook(page)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "# modeling/learning/solutions.py" not in markdown and "**Solution below** (exercise" not in markdown
    assert markdown.count("<details><summary>The package's <code>") >= 5
    for name in GIVEAWAYS:
        assert not re.search(GIVEAWAYS[name], code), name
        assert f'{name} = yours_or_reference("{name}", {name})' in code, name
    after = page.index("<!-- /solution -->", page.index("<!-- solution: causal_mask -->")) + len("<!-- /solution -->\n")
    leaked = page[:after] + "\n```python\nmask = torch.ones(4, 4).tril()\n```\n" + page[after:]
    found = given_away(leaked)
    assert len(found) == 1 and "the learner's notebook, cell" in found[0]
    assert "answer of exercise causal_mask" in found[0]


@pytest.mark.parametrize("name", sorted(GIVEAWAYS))
def test_each_giveaway_finds_its_exercise_s_answer(name):
    """A pattern that found nothing would let any page pass: each finds the solution it stands for."""
    import inspect

    assert re.search(GIVEAWAYS[name], inspect.getsource(getattr(solutions, name))), name


def test_the_page_check_names_an_answer_given_away(page, tmp_path):
    leaked = page.replace("<!-- solution: smoothed_target -->\n", "", 1)
    assert leaked != page
    (tmp_path / "annotated.md").write_text(leaked, encoding="utf-8")
    problems = check_page(tmp_path / "annotated.md", FIGURES_DIR, run=False)
    assert any("gives away the answer of exercise smoothed_target" in problem for problem in problems)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_the_walk_s_model_gives_the_package_s_logits(page, norm_first):
    """The model the page builds from scratch, carrying a package model's weights under its own names, gives its
    logits for a padded batch (to 1e-5), post-norm and pre-norm; with the other placement it would not."""
    walk = walk_namespace(page)
    package = tiny_model(0, norm_first=norm_first)
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
    ours = walk["from_package"](package)
    with torch.no_grad():
        expected = package(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                           decoder_attention_mask=(decoder_input_ids != 0).long()).logits
        logits = ours(input_ids, decoder_input_ids, *walk["make_masks"](input_ids, decoder_input_ids))
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
        other = walk["make_model"](package.config.vocab_size, 2, 32, 64, 4, 0.0, not norm_first).eval()
        other.load_state_dict(walk["package_to_ours"](package.state_dict()), strict=False)
        assert (other(input_ids, decoder_input_ids, *walk["make_masks"](input_ids, decoder_input_ids))
                - expected).abs().max() > 1e-2


def test_the_walk_s_greedy_decoding_gives_the_tokens_of_generate(page):
    walk = walk_namespace(page)
    package = trained_to_copy(tiny_model(0), steps=200)
    input_ids, attention_mask = padded_batch()
    expected = package.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, do_sample=False,
                                max_new_tokens=10)
    decoded = walk["greedy_decode"](walk["from_package"](package), input_ids, attention_mask.bool()[:, None, None, :],
                                    10)
    assert torch.equal(decoded, expected)
    assert_varied(expected)


# ---- section 18: the shipped model in the model built from scratch -----------------------------------------------


LOGIT_TOLERANCE = 1e-4  # the page's: float32 rounding carried through 12 layers, on logits as large as about 20


@pytest.fixture(scope="module")
def shipped():
    """(model, tokenizer, target tokenizer) of the model the repository ships (models/multi30k-de-en-cpu)."""
    from modeling.inference.translation import load_translation_model

    return load_translation_model(multi30k.shipped_model(), device="cpu")


def test_the_walk_s_model_carries_the_shipped_model(page, shipped):
    """The shipped German→English weights in the model built from scratch (through the page's `from_package`) give
    the package's logits (to 1e-4) and greedy tokens on the walk's written German sentences, and translate them; with
    two decoder layers' weights swapped the logits are off by whole units."""
    model, tokenizer, target_tokenizer = shipped
    walk = walk_namespace(page)
    ours = walk["from_package"](model)
    sources, targets = map(list, zip(*demo.EXAMPLE_PAIRS))
    batch = tokenizer(sources, text_target=targets, padding=True, return_tensors="pt")
    src, pad = batch["input_ids"], model.config.pad_token_id
    tgt = shift_tokens_right(batch["labels"], pad, model.config.decoder_start_token_id)
    with torch.no_grad():
        logits = ours(src, tgt, *walk["make_masks"](src, tgt, pad))
        expected = model(input_ids=src, attention_mask=batch["attention_mask"], decoder_input_ids=tgt,
                         decoder_attention_mask=(tgt != pad).long()).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=LOGIT_TOLERANCE)
    decoded = walk["greedy_decode"](ours, src, walk["make_masks"](src, src, pad)[0], multi30k.MAX_NEW_TOKENS,
                                    model.config.decoder_start_token_id, model.config.eos_token_id, pad)
    generated = model.generate(src, attention_mask=batch["attention_mask"], num_beams=1, do_sample=False,
                               max_new_tokens=multi30k.MAX_NEW_TOKENS)
    assert torch.equal(decoded, generated)
    translations = target_tokenizer.batch_decode(decoded, skip_special_tokens=True)
    assert sacrebleu.corpus_bleu(translations, [targets]).score > 15, translations  # it translates
    swap = {"decoder.layers.0.": "decoder.layers.1.", "decoder.layers.1.": "decoder.layers.0."}
    ours.load_state_dict({re.sub(r"decoder\.layers\.[01]\.", lambda match: swap[match.group(0)], name): tensor
                          for name, tensor in walk["package_to_ours"](model.state_dict()).items()})
    with torch.no_grad():
        assert (ours(src, tgt, *walk["make_masks"](src, tgt, pad)) - expected).abs().max() > 1.0


def run_section_18(page: str) -> tuple[dict, dict[str, str]]:
    """Section 18's cells, run after the walk's definitions: (the namespace, {output name: what its cell printed})."""
    start, end = page.index("## 18. "), page.index("## Appendix")
    namespace, printed = walk_namespace(page), {}
    for cell in parse(page).cells:
        if start < cell.start < end:
            output = run_cell(namespace, cell.source)
            if cell.output is not None:
                printed[cell.output.name] = output
    assert {"shipped_model", "shipped_logits", "shipped_translations", "shipped_bleu", "shipped_attention"} <= set(
        printed)
    return namespace, printed


def test_section_18_prints_what_the_page_says_on_multi30k(page, multi30k_dir, monkeypatch):
    """On Multi30k's validation pairs, section 18's cells print what the page records: the logits' agreement, five
    translations with the tokens of generate(), the BLEU of 100 (the same for both), the attention's shapes."""
    monkeypatch.setenv("MULTI30K_DIR", str(multi30k_dir))
    _, printed = run_section_18(page)
    blocks = {block.name: page[block.start:block.end] for block in parse(page).blocks if block.kind == "output"}
    for name, output in printed.items():
        assert same_printout(blocks[name], render_block("output", name, output)), (name, output)
    bleus = re.findall(r"BLEU ([\d.]+)", printed["shipped_bleu"])
    assert len(bleus) == 2 and bleus[0] == bleus[1] and float(bleus[0]) > 20


def test_the_translation_attention_figure_is_what_the_walk_s_model_draws(page, tmp_path, monkeypatch):
    """Without Multi30k, section 18 says so in one line and runs on the written pairs; its last cell draws, from the
    weights kept by the walk's own MultiHeadAttention, the picture committed as docs/figures/translation_attention
    (which make_figures.py draws from the package's weights): the same numbers, to the figures' tolerance."""
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))  # an empty folder: no Multi30k
    namespace, printed = run_section_18(page)
    assert printed["validation_pairs"].startswith(f"Multi30k is not in {tmp_path} (set MULTI30K_DIR, or download")
    assert "12 validation pairs" in printed["validation_pairs"]
    from modeling.learning.figures import translation_attention_figure

    tokenizer, target_tokenizer = namespace["tokenizer"], namespace["target_tokenizer"]
    drawn = figure_data(translation_attention_figure(
        namespace["attentions"], multi30k.token_labels(tokenizer, namespace["src"][0].tolist()),
        multi30k.token_labels(target_tokenizer, namespace["tgt"][0].tolist())))
    recorded = json.loads(data_path(FIGURES_DIR, "translation_attention").read_text())
    recorded.pop("png_sha256")
    assert differences(recorded, drawn, "translation_attention") == []
    maps = [image for axes in drawn["axes"] for image in axes["images"]]
    config = namespace["config"]
    assert len(maps) == 3 * config.encoder_layers * config.encoder_attention_heads


def test_the_shipped_model_and_multi30k_are_found_in_the_clone_or_named_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPOSITORY / "notebooks")  # where the notebook runs: the clone is found above it
    assert multi30k.shipped_model() == REPOSITORY / "models" / "multi30k-de-en-cpu"
    assert multi30k.checkout() == REPOSITORY and multi30k.checkout(tmp_path) == tmp_path
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    assert multi30k.multi30k_folder() == REPOSITORY / "data" / "multi30k"
    from modeling.data.corpus import MULTI30K_DOWNLOAD
    from modeling.learning.figures import translation_attention_figure

    assert multi30k.download_command() == MULTI30K_DOWNLOAD  # read without importing `datasets`
    assert multi30k.validation_pairs(tmp_path) == list(demo.EXAMPLE_PAIRS)
    assert capsys.readouterr().out == (f"Multi30k is not in {tmp_path} (set MULTI30K_DIR, or download it into "
                                       f"data/multi30k from the clone's folder: {MULTI30K_DOWNLOAD}); the walk's 12 "
                                       "written pairs instead\n")
    import gzip

    for side, lines in (("de", ["Ein Hund.", "Zwei Katzen."]), ("en", ["A dog.", "Two cats."])):
        with gzip.open(tmp_path / f"val.{side}.gz", "wt", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    assert multi30k.validation_pairs() == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    monkeypatch.chdir(tmp_path)  # outside a clone (an installed package): no model to find
    with pytest.raises(FileNotFoundError, match="holds no model .*run the walk in a clone of the repository"):
        translation_attention_figure()


def test_the_attention_example_is_a_validation_pair(multi30k_dir):
    assert multi30k.ATTENTION_EXAMPLE in multi30k.validation_pairs(multi30k_dir)


def test_the_table3_settings_count_the_parameters_of_the_measured_runs(page):
    """Section 17's printed parameter counts are those benchmarks/results-table3-cpu.json records of its runs."""
    namespace = {**walk_namespace(page), "AnnotatedTransformerConfig": AnnotatedTransformerConfig}
    printed = run_cell(namespace, page_cell(page, "table3_settings").source)
    counts = {re.split(r"\s{2,}", line)[0]: int(line.rsplit(" ", 1)[1].replace(",", ""))
              for line in printed.splitlines()[1:]}
    runs = json.loads((REPOSITORY / "benchmarks" / "results-table3-cpu.json").read_text())["runs"]
    measured = {"base": "base-seed0", "(A) h 1": "A-heads-1", "(A) h 16": "A-heads-16", "(B) d_k 8": "B-d_k-8",
                "(E) learned positions": "E-learned-positions"}
    assert counts == {row: runs[run]["parameters"] for row, run in measured.items()}


def _table3_files(folder, base_bleus, rows):
    """A results file of `base_bleus` (one per base seed) and `rows` ({row: validation BLEU}), summarised as
    scripts/table3.py does, and a copy of the paper's rows, in `folder/benchmarks`."""
    from tools.benchmarking.table3_runner import summarise

    benchmarks = folder / "benchmarks"
    benchmarks.mkdir()
    runs = {f"base-seed{seed}": {"row": "base", "description": "base", "validation": {"bleu": bleu, "perplexity": 9.0},
                                 "test": {"bleu": bleu}} for seed, bleu in enumerate(base_bleus)}
    runs.update({name: {"row": name, "description": f"ours {name}", "validation": {"bleu": bleu, "perplexity": 9.5},
                        "test": {"bleu": bleu}} for name, bleu in rows.items()})
    results = {"rows_file": "no-such-rows.yaml", "planned_runs": 21, "runs": runs, "summary": summarise(runs)}
    (benchmarks / "results-table3-cpu.json").write_text(json.dumps(results))
    shutil.copy(REPOSITORY / "benchmarks" / "paper-table3.json", benchmarks)
    return benchmarks


def test_table3_rows_read_the_committed_runs_beside_the_papers(tmp_path):
    from modeling.learning import table3_results
    from modeling.learning.figures import table3_figure

    committed = table3_results.load_table3()  # the repository's own runs
    results = json.loads((REPOSITORY / "benchmarks" / "results-table3-cpu.json").read_text())
    assert committed.measured_runs == len(results["runs"]) and committed.planned_runs == results["planned_runs"]
    for row in committed.rows:
        measured = [name for name, run in results["runs"].items() if run["row"] == row.name]
        assert (row.bleu_difference is None) == (not measured), row.name
    assert [row.name for row in committed.rows] == list(
        json.loads((REPOSITORY / "benchmarks" / "paper-table3.json").read_text())["rows"])

    measured = table3_results.load_table3(_table3_files(tmp_path, [30.0, 30.6, 30.3], {"A-heads-1": 29.0, "B-d_k-8": 30.1}))
    rows = {row.name: row for row in measured.rows}
    assert measured.base_bleu == pytest.approx(30.3) and measured.bleu_range == pytest.approx(0.6)
    assert rows["A-heads-1"].bleu_difference == pytest.approx(-1.3) and rows["A-heads-1"].bleu_tie is False
    assert rows["B-d_k-8"].bleu_difference == pytest.approx(-0.2) and rows["B-d_k-8"].bleu_tie is True
    assert rows["A-heads-1"].paper_bleu_difference == pytest.approx(24.9 - 25.8)  # the paper's h 1 row
    assert rows["A-heads-2"].bleu_difference is None and rows["A-heads-1"].setting == "ours A-heads-1"
    lines = "\n".join(table3_results.table3_lines(measured))
    assert "ours -1.30 " in lines and "not measured yet" in lines
    assert "(h 1, d_k = d_v 512): same direction" in lines and "(d_k 16): tie" in lines
    assert [table3_results.agreement(*case) for case in ((0.5, False, -0.4), (0.5, False, 0.0), (None, None, -0.4))] == [
        "opposite direction", "paper: no clear effect", ""]
    # the paper's one run per row: a difference within its noise gives no direction to agree with
    assert [table3_results.agreement(-0.9, False, paper, table3_results.PAPER_NOISE) for paper in (-0.1, -0.3, 0.2, -0.4, 0.5)] == [
        "paper: no clear effect", "paper: no clear effect", "paper: no clear effect", "same direction",
        "opposite direction"]
    assert table3_results.agreement(-0.9, True, -0.1, table3_results.PAPER_NOISE) == "paper: no clear effect"  # before a tie

    drawn = figure_data(table3_figure(measured))
    heads = drawn["axes"][0]["patches"]  # the seeds' band (x, y, width, height), then our bars, then the paper's
    assert heads[0]["rectangle"]["values"][1::2] == pytest.approx([-0.6, 1.2])
    assert heads[1]["rectangle"]["values"][3] == pytest.approx(-1.3)  # ours, h 1
    assert heads[5]["rectangle"]["values"][3] == pytest.approx(-0.9)  # the paper's, h 1
    assert "5 of 21 runs measured" in drawn["suptitle"]
    with pytest.raises(FileNotFoundError):
        table3_results.load_table3(tmp_path)  # no results file there


def test_the_table3_reading_groups_the_measured_rows_by_how_they_move_against_the_papers(tmp_path):
    """docs/results.md's reading of Table 3, rendered from a results file: same direction, opposite, tie; the
    paper's rows too small to stand out of the seeds' range; the rows not measured yet."""
    from tools.figures.formats import Benchmarks
    from tools.figures.table3_table import _reading

    _table3_files(tmp_path, [30.0, 30.6, 30.3], {"A-heads-1": 29.0, "C-layers-2": 31.5, "B-d_k-8": 30.1})
    reading = "\n".join(_reading(Benchmarks(tmp_path))).removeprefix("How the rows read against the paper's. ")
    assert ("Measured: 3 of the 18 varied rows, against a base row of 3 seed(s) whose validation BLEU spans "
            "0.60") in reading
    assert ("BLEU, each row against the paper's: same direction: `A-heads-1` (-1.30; paper -0.9); tie: `B-d_k-8` "
            "(-0.20; paper -0.7); opposite direction: `C-layers-2` (+1.20; paper -2.1).") in reading
    assert "so that a tie here is what their effect predicts: `A-heads-2` (-0.3), `A-heads-8` (+0.0)," in reading
    assert "`B-d_k-8`" not in reading.split("predicts:")[1].split("\n")[0]  # the paper's -0.7 is over the 0.6 range
    assert reading.rstrip().endswith("`E-learned-positions`.") and "Not measured yet: `A-heads-2`," in reading
