"""docs/annotated.md, the guided walk through the model: every claim it makes, its code excerpts (the live source),
its printed results (what the code prints now) and its pictures (what scripts/make_figures.py writes)."""

import ast
import math
import re

import numpy as np
import pytest
import torch
from launch_helpers import load_script
from model_helpers import assert_varied, generating_model, padded_batch, tiny_model, trained_to_copy

from modeling.learning import demonstrations as demo
from modeling.learning.figures import FIGURES, TRAINED
from modeling.learning.greedy import greedy_decode
from tools.annotated_page.excerpts import REPOSITORY, excerpt, resolve
from tools.annotated_page.page import (
    FIGURES_DIR,
    PAGE,
    check_text,
    figure_names,
    find_blocks,
    render_block,
    same_printout,
    update_text,
)
from tools.annotated_page.printouts import OUTPUTS

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small models: one thread is fastest (conftest)



@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def make_figures():
    """scripts/make_figures.py as a module (its main() takes argv and returns the exit status)."""
    return load_script("make_figures")


# ---- the page: excerpts, printouts, pictures, references -------------------------------------------------------------


def test_every_excerpt_on_the_page_is_the_live_source(page):
    blocks, problems = find_blocks(page)
    assert problems == []
    excerpts = [block for block in blocks if block.kind == "excerpt"]
    assert len(excerpts) >= 15
    for block in excerpts:
        assert page[block.start : block.end] == render_block("excerpt", block.name), (
            f"{block.label()} no longer matches the code: run `python scripts/make_figures.py --page`")


def test_every_printout_on_the_page_is_what_the_code_prints(page):
    blocks, _ = find_blocks(page)
    printouts = [block for block in blocks if block.kind == "output"]
    assert sorted(block.name for block in printouts) == sorted(OUTPUTS)  # each printout shown once
    for block in printouts:
        assert same_printout(page[block.start : block.end], render_block("output", block.name)), (
            f"{block.label()} is not what the code prints now: run `python scripts/make_figures.py --page`")


def test_a_changed_excerpt_or_printout_is_named_stale_and_rendering_restores_it(page):
    name = "modeling.modeling_annotated_transformer.SublayerConnection"
    edited = page.replace("return self.layer_norm(hidden_states + self.dropout(sublayer(hidden_states)))",
                          "return self.layer_norm(hidden_states + sublayer(hidden_states))", 1)
    edited = edited.replace("0.9000", "0.8000", 1)  # a smoothed target no longer at 1 - epsilon
    assert edited != page
    problems = check_text(edited)
    assert len(problems) == 2 and f"excerpt: {name}" in problems[0] and "output: label_smoothing" in problems[1]
    assert all("stale" in problem for problem in problems)
    restored, problems = update_text(edited)
    assert problems == [] and check_text(restored) == []


def test_printouts_compare_their_numbers_within_floating_point_noise():
    assert same_printout("k = 1: 6.7e-08\nstd 1.0011", "k = 1: 7.1e-08\nstd 1.0013")
    assert not same_printout("std 1.0011", "std 1.2011")  # a different number
    assert not same_printout("LayerNorm 0.00", "BatchNorm 0.00")  # different words


def test_broken_markers_and_unknown_names_are_named():
    text = ("<!-- excerpt: modeling.loss.nothing_here -->\n```python\n```\n<!-- /excerpt -->\n"
            "<!-- output: no_such_printout -->\n<!-- /output -->\n"
            "<!-- output: masks -->\n<!--excerpt modeling.loss -->\n")
    problems = check_text(text)
    assert any("has no 'nothing_here'" in problem for problem in problems)
    assert any("unknown output 'no_such_printout'" in problem for problem in problems)
    assert any("malformed marker" in problem for problem in problems)
    assert any("output: masks --> is not closed" in problem for problem in problems)


def test_excerpts_are_taken_by_object_with_the_file_they_come_from():
    text = excerpt("modeling.learning.greedy.greedy_decode")
    assert text.startswith("# modeling/learning/greedy.py\n@torch.no_grad()\ndef greedy_decode(")
    method = excerpt("modeling.modeling_annotated_transformer.AnnotatedTransformerEncoder.forward")
    assert method.splitlines()[1] == "@capture_outputs" and "    def" not in method.splitlines()[2]  # dedented
    with pytest.raises(ValueError, match="has no 'Missing'"):
        resolve("modeling.modeling_annotated_transformer.Missing")


def test_the_page_shows_every_figure_in_order_and_each_is_committed(page):
    assert figure_names(page) == list(FIGURES)
    for name in FIGURES:
        assert (FIGURES_DIR / f"{name}.png").is_file(), f"docs/figures/{name}.png: run scripts/make_figures.py"
    total = sum((FIGURES_DIR / f"{name}.png").stat().st_size for name in FIGURES)
    assert total < 1.5 * 2**20, f"docs/figures/ holds {total / 2**20:.1f} MiB"
    assert "](cross_attention_multi30k.png)" in page and (PAGE.parent / "cross_attention_multi30k.png").is_file()


def test_the_page_names_only_tests_that_exist(page):
    references = re.findall(r"tests/(test_\w+\.py)(?:::(test_\w+))?", page)
    assert len({test for _, test in references if test}) >= 20
    for file, test in references:
        path = REPOSITORY / "tests" / file
        assert path.is_file(), f"the page names tests/{file}, which does not exist"
        if test:
            defined = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
            assert test in defined, f"the page names tests/{file}::{test}, which does not exist"


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (not the comments of its code blocks): lower case, punctuation
    dropped, spaces as hyphens."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.*)$", prose, flags=re.MULTILINE)}


def test_the_page_tells_no_story_of_the_project_and_its_links_point_at_files(page):
    """The rules tests/test_docs.py applies to every user page, and every anchor names a heading."""
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", page), "a commit hash"
    assert not re.findall(r"\b(?:the )?issues?\b|this session|this machine|next lease", page, flags=re.I)
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", page):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = PAGE.parent / target if target else PAGE
        assert path.exists(), f"annotated.md links {target}, which does not exist"
        if anchor:
            assert anchor in heading_anchors(path.read_text(encoding="utf-8")), f"no heading #{anchor} in {path.name}"


def test_the_figures_that_train_nothing_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from modeling.learning.figures import write_figures

    names = [name for name in FIGURES if name not in TRAINED]
    paths = write_figures(tmp_path, names)
    assert [path.name for path in paths] == [f"{name}.png" for name in names]
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in paths)


@pytest.mark.slow
def test_make_figures_writes_every_figure_the_page_shows(page, make_figures, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert make_figures.main(["--output_dir", str(tmp_path)]) == 0
    assert sorted(path.stem for path in tmp_path.glob("*.png")) == sorted(figure_names(page))


def test_make_figures_check_names_each_missing_figure(make_figures, tmp_path, capsys):
    assert make_figures.main(["--check", "--output_dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors == [f"the page shows figures/{name}.png, which is not in {tmp_path}" for name in FIGURES]


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


def test_layer_norm_ignores_the_batch_and_batch_norm_does_not():
    result = demo.layer_norm_against_batch_norm()
    for name in ("beside B", "more padding"):
        assert (result.layer_norm[name] - result.layer_norm["alone"]).abs().max() < 1e-6
        assert (result.batch_norm[name] - result.batch_norm["alone"]).abs().max() > 0.5
    assert (result.batch_norm["more padding"] - result.batch_norm["beside B"]).abs().max() > 0.1  # padding counts


# ---- §3.3, §3.4 ------------------------------------------------------------------------------------------------------


def test_the_feed_forward_network_is_two_convolutions_with_kernel_size_1():
    outputs = demo.feed_forward_three_ways()
    for name in ("by position", "convolutions"):
        assert (outputs[name] - outputs["sequence"]).abs().max() < 1e-6, name


def test_one_matrix_is_shared_three_ways():
    assert demo.shared_matrices(demo.small_model()) == {"target embedding": True, "pre-softmax projection": True}
    counts = demo.tied_and_untied_parameters()
    assert counts["untied"] - counts["tied"] == 2 * 37000 * 512


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
    """Trained as make_figures.py trains it: it copies, and output position i reads source position i."""
    result = demo.copy_task_attention()
    assert result.accuracy > 0.95
    assert result.decoder_input[1:] == result.source[:-1]  # the greedy output copies the source (</s> aside)
    diagonal = result.cross_attention.mean(0).argmax(-1) == torch.arange(len(result.decoder_input))
    assert diagonal.float().mean() >= 0.8
