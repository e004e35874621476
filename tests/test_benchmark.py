"""The benchmark's twin models are the same model, and a minimal run's JSON holds every figure and ratio.

No timing is asserted: only that the figures exist, are positive where they must be, and that ratios are
ours / Marian."""

import copy
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch_helpers import load_script
from model_helpers import assert_varied, trained_to_copy
from torch.utils.flop_counter import FlopCounterMode
from transformers.initialization import no_init_weights

from tools.benchmarking import generation_speed, measure, profiling, run, training_speed
from tools.benchmarking.ctranslate2_speed import SyntheticVocabulary
from tools.benchmarking.generation_speed import generated_tokens
from tools.benchmarking.lengths import batch_lengths, packed_batch_lengths, synthetic_lengths, training_batch
from tools.benchmarking.models import (
    SIZES,
    benchmark_config,
    build_model,
    build_models,
    copy_weights_to_marian,
    marian_config,
    marian_parameter_name,
)
from tools.benchmarking.report import format_table, write_results
from tools.benchmarking.run import run_benchmark
from tools.benchmarking.settings import SDPA_BACKENDS, build_parser, settings_from_arguments
from tools.benchmarking.training_speed import TrainingFlops, forward_backward, loss_function, training_model
from modeling.compatibility import CACHE_NAME
from modeling.tokenization import SPECIAL_TOKENS

REPO_ROOT = Path(__file__).resolve().parents[1]
VOCAB = 300


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and far faster than on two on a busy machine (OpenMP's threads wait
    for each other at every operation)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_twins():
    models = build_models(benchmark_config("tiny", VOCAB), seed=0)
    return models["ours"].eval(), models["marian"].eval()


def padded_pairs():
    return training_batch([9, 5, 7], [6, 3, 4], VOCAB, seed=0)


@pytest.mark.parametrize("size", list(SIZES))
def test_twins_have_the_same_parameters_tensor_by_tensor(size):
    config = benchmark_config(size, vocab_size=8000)
    with torch.device("meta"):
        ours = build_model("ours", config)
        with no_init_weights():  # Marian's init computes its sinusoid tables in Python: seconds for `big`
            marian = build_model("marian", config)
        marian.tie_weights()  # which `no_init_weights` also skips
    assert marian.lm_head.weight is marian.model.shared.weight is marian.model.encoder.embed_tokens.weight
    ours_shapes = {marian_parameter_name(name): p.shape for name, p in ours.named_parameters()}
    marian_shapes = {name: p.shape for name, p in marian.named_parameters() if p.requires_grad}
    assert ours_shapes == marian_shapes
    assert ours.num_parameters() == marian.num_parameters(only_trainable=True)
    # What Marian has beyond: its two frozen positional tables (ours are buffers).
    frozen = {name for name, p in marian.named_parameters() if not p.requires_grad}
    assert frozen == {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}


@pytest.mark.parametrize("size", ["small", "big"])
def test_twins_match_in_configuration(size):
    config = benchmark_config(size)
    marian = marian_config(config)
    for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                 "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "dropout", "attention_dropout",
                 "activation_dropout", "activation_function", "max_position_embeddings", "scale_embedding",
                 "tie_word_embeddings", "pad_token_id", "eos_token_id", "decoder_start_token_id"):
        assert getattr(marian, name) == getattr(config, name), name
    assert (config.norm_first, config.scale_embedding, config.activation_function) == (False, True, "relu")
    assert marian.forced_eos_token_id is None and marian.share_encoder_decoder_embeddings
    expected = {"small": (256, 3, 4, 1024, 0.1), "big": (1024, 6, 16, 4096, 0.3)}[size]
    assert (config.d_model, config.encoder_layers, config.encoder_attention_heads, config.encoder_ffn_dim,
            config.dropout) == expected
    config.norm_first = True
    with pytest.raises(ValueError, match="post-norm"):
        marian_config(config)


def test_same_weights_give_the_same_logits_loss_gradients_and_generations():
    ours, marian = tiny_twins()
    batch = padded_pairs()
    out_ours, out_marian = ours(**batch), marian(**batch)
    torch.testing.assert_close(out_ours.logits, out_marian.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_ours.loss, out_marian.loss)
    out_ours.loss.backward()
    out_marian.loss.backward()
    marian_parameters = dict(marian.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, marian_parameters[marian_parameter_name(name)].grad,
                                   atol=1e-5, rtol=1e-4, msg=name)
    # Generations: untrained tied models only repeat the start token, so both are first taught to copy for a moment
    # (the same weights again in Marian), after which what they generate follows the source.
    copy_weights_to_marian(trained_to_copy(ours, steps=300), marian)
    sources = {key: batch[key] for key in ("input_ids", "attention_mask")}
    for num_beams in (1, 3):
        generated = [model.generate(**sources, num_beams=num_beams, max_new_tokens=6) for model in (ours, marian)]
        assert_varied(generated[0])
        assert torch.equal(*generated)


def test_the_cpu_recipe_size_is_the_cpu_recipes_model():
    import yaml

    config = benchmark_config("cpu_recipe")
    for name in ("multi30k_de_en_cpu", "multi30k_en_de_cpu"):
        recipe = yaml.safe_load((REPO_ROOT / "configs" / f"{name}.yaml").read_text(encoding="utf-8"))
        assert recipe["preset"] == "base", name
        assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_attention_heads,
                config.decoder_attention_heads, config.encoder_ffn_dim, config.decoder_ffn_dim, config.dropout) == (
            recipe["d_model"], recipe["encoder_layers"], recipe["decoder_layers"], recipe["attention_heads"],
            recipe["attention_heads"], recipe["ffn_dim"], recipe["ffn_dim"], recipe["dropout"]), name


def test_positional_tables_hold_the_same_sinusoids_in_another_layout():
    """Marian puts sin in the first half of the columns and cos in the second; ours interleaves them (§3.5)."""
    config = benchmark_config("tiny", VOCAB)
    ours_table = build_model("ours", config).model.encoder.embeddings.embed_positions.encoding
    marian_table = build_model("marian", config).model.encoder.embed_positions.weight
    halves = torch.cat([torch.arange(0, config.d_model, 2), torch.arange(1, config.d_model, 2)])
    torch.testing.assert_close(marian_table, ours_table[:, halves], atol=1e-5, rtol=0)
    assert not torch.allclose(marian_table, ours_table)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_training_flops_are_counted_exactly_for_any_batch_shape(label_smoothing):
    ours, marian = tiny_twins()
    ours.config.label_smoothing = label_smoothing
    cpu = torch.device("cpu")
    batch = padded_pairs()
    for name, model in (("ours", ours), ("marian", marian)):
        loss_of = loss_function(name, model.train(), label_smoothing)
        flops = TrainingFlops.fit(loss_of, model, cpu, "fp32", VOCAB)
        assert flops(batch) == measure.count_flops(lambda: forward_backward(loss_of, batch, cpu, "fp32"))
    # torch's counter alone misses the CPU attention kernel: the custom mapping adds it.
    loss_of = loss_function("ours", ours, label_smoothing)
    with FlopCounterMode(display=False) as plain:
        forward_backward(loss_of, batch, cpu, "fp32")
    assert plain.get_total_flops() < measure.count_flops(lambda: forward_backward(loss_of, batch, cpu, "fp32"))


def test_marian_is_smoothed_as_the_trainer_smooths_it(tmp_path):
    """With label smoothing the benchmark's Marian step computes the loss the Trainer computes with
    `label_smoothing_factor` (transformers' LabelSmoother on logits from a forward without labels), and ours its own
    label-smoothed loss; without, both their own cross-entropy."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    ours, marian = tiny_twins()
    batch = padded_pairs()
    args = Seq2SeqTrainingArguments(tmp_path, label_smoothing_factor=0.1, report_to="none", use_cpu=True)
    trainer_loss = Seq2SeqTrainer(model=marian, args=args).compute_loss(marian, dict(batch))
    torch.testing.assert_close(loss_function("marian", marian, 0.1)(batch), trainer_loss)
    assert marian.config.use_cache is False  # what the Trainer set, and `training_model` sets
    without_labels = {key: value for key, value in batch.items() if key != "labels"}
    for model in map(training_model, tiny_twins()):
        assert getattr(model(**without_labels), CACHE_NAME) is None
    assert abs(loss_function("marian", marian, 0.1)(batch).item() - marian(**batch).loss.item()) > 1e-3  # smoothed
    torch.testing.assert_close(loss_function("marian", marian, 0.0)(batch), marian(**batch).loss)
    ours.config.label_smoothing = 0.1
    torch.testing.assert_close(loss_function("ours", ours, 0.1)(batch), ours(**batch).loss)


PEAK_RSS_PROBE = """
import json, torch
from tools.benchmarking import measure
if not measure.reset_peak_rss():
    print(json.dumps(None)); raise SystemExit
watch = measure.MemoryWatch(torch.device("cpu"))
watch.start()
file_backed = measure._status_bytes("RssFile")
block = torch.ones(100 * 2**20 // 4)  # 100 MiB, touched
del block
peak, delta = watch.read()
dropped = max(0, file_backed - measure._status_bytes("RssFile")) if file_backed is not None else 0
watch.start()
print(json.dumps({"peak": peak, "delta": delta, "dropped": dropped, "after_reset": watch.read()[1]}))
"""


def test_peak_rss_resets_and_sees_an_allocation():
    # In a fresh process, as the benchmark uses the watch: no earlier test's garbage or threads free memory inside
    # the window. RSS also counts file-backed pages (the shared libraries'), which the kernel drops as memory runs
    # short, as it may on a busy machine: the pages it dropped inside the window lower the peak by as much.
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_PROBE], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    read = json.loads(result.stdout.strip().splitlines()[-1])
    if read is None:
        pytest.skip("no /proc/self/clear_refs: the peak RSS cannot be reset here")
    assert 95 * 2**20 < read["delta"] + read["dropped"] and read["delta"] < 150 * 2**20
    assert read["peak"] > read["delta"]
    assert read["after_reset"] < 95 * 2**20  # the earlier peak is gone


def test_generated_tokens_count_through_the_first_eos():
    eos, pad = 2, 0
    sequences = torch.tensor([
        [1, 5, 6, eos, pad, pad],  # 3 tokens, </s> included
        [1, 7, 8, 9, 10, 11],  # no </s>: all 5
        [1, eos, 5, eos, pad, pad],  # only through the first </s>
    ])
    assert generated_tokens(sequences, eos) == 3 + 5 + 1


def test_batches_are_padded_like_the_collator():
    batch = training_batch([4, 2], [3, 5], VOCAB, seed=0, pad_to_multiple_of=8)
    assert batch["input_ids"].shape == (2, 8) and batch["labels"].shape == (2, 8)
    assert batch["input_ids"][0, :4].tolist()[-1] == 2 and batch["input_ids"][0, 4:].eq(0).all()
    assert batch["attention_mask"].sum(1).tolist() == [4, 2]
    assert batch["labels"][1, 4] == 2 and batch["labels"][1, 5:].eq(-100).all()
    assert batch["labels"][0, 3:].eq(-100).all()
    assert batch["input_ids"][batch["attention_mask"].bool()].ge(2).all()
    # decoder inputs as the collator adds them: the start token, then the labels shifted right, padding for -100
    assert batch["decoder_input_ids"][1].tolist() == [1, *batch["labels"][1, :5].tolist(), 0, 0]
    lengths = synthetic_lengths(seed=0)
    assert 14 < lengths.source.mean() < 18 and 4 < lengths.source.std() < 8


def test_settings_defaults_quick_and_errors():
    def parse(*argv):
        return settings_from_arguments(build_parser().parse_args(["--device", "cpu", *argv]))

    full, quick = parse(), parse("--quick")
    assert (full.sizes, full.max_tokens, full.data_pairs, full.dtype) == (["small", "base"], 2048, 4_500_000, "fp32")
    assert quick.sizes == ["small"] and quick.steps < full.steps and quick.data_pairs < full.data_pairs
    # a new file each run, in a git-ignored folder: never an earlier run's or a committed result
    assert re.fullmatch(r"outputs/benchmarks/results-cpu-quick-\d{8}-\d{6}-\d{6}\.json", quick.output)
    assert re.fullmatch(r"outputs/benchmarks/results-cpu-\d{8}-\d{6}-\d{6}\.json", full.output)
    assert parse("--quick").output != quick.output
    assert parse("--quick", "--steps", "7").steps == 7  # explicit flags win
    with pytest.raises(ValueError, match="--sizes huge: choose"):
        parse("--sizes", "huge")
    with pytest.raises(ValueError, match="--steps must be at least 1, got 0"):
        parse("--steps", "0")
    assert full.caches == ["dynamic"] and parse("--caches", "dynamic", "static").caches == ["dynamic", "static"]
    with pytest.raises(ValueError, match=r"--caches paged: choose"):
        parse("--caches", "paged")
    # errors name the flag that was typed, not the setting behind it
    with pytest.raises(ValueError, match=r"--only generation: choose one or more of \['train', 'generate'"):
        parse("--only", "generation")
    with pytest.raises(ValueError, match="--batch_sizes needs one or more positive numbers, got 32 0"):
        parse("--batch_sizes", "32", "0")
    assert full.label_smoothing == [0.0, 0.1] and parse("--label_smoothing", "0.1").label_smoothing == [0.1]
    with pytest.raises(ValueError, match=r"--label_smoothing needs one or more values in \[0, 1\), got 0.1 1.0"):
        parse("--label_smoothing", "0.1", "1")
    assert full.compile is False and parse("--compile").compile is True
    assert full.sdpa_backends is None and parse("--sdpa_backends", "efficient", "math").sdpa_backends == [
        "efficient", "math"]
    with pytest.raises(ValueError, match=r"--sdpa_backends flex: choose one or more of \['math', 'flash'"):
        parse("--sdpa_backends", "flex")


def test_sdpa_kernels_counts_each_calls_kernel_and_a_choice_torch_cannot_give_costs_nothing(monkeypatch):
    """`measure.sdpa_kernels` counts SDPA's choice for each call and leaves the calls' results as they are; where
    torch's private `_fused_sdp_choice` fails, the call is counted as "unknown" and still runs."""
    model = tiny_twins()[0].train()
    batch = padded_pairs()
    original = torch.nn.functional.scaled_dot_product_attention
    torch.manual_seed(0)
    plain = model(**batch).loss
    layers = model.config.encoder_layers + 2 * model.config.decoder_layers
    losses = []

    def failing(*args, **kwargs):
        raise RuntimeError("no choice")

    for choice, expected in ((torch._fused_sdp_choice, {"flash_attention": layers}), (failing, {"unknown": layers})):
        monkeypatch.setattr(torch, "_fused_sdp_choice", choice)
        torch.manual_seed(0)  # the same dropout masks as the plain call's
        assert measure.sdpa_kernels(lambda: losses.append(model(**batch).loss)) == expected
        assert torch.nn.functional.scaled_dot_product_attention is original  # put back
        torch.testing.assert_close(losses[-1], plain, rtol=0, atol=0)


@pytest.mark.slow  # about 30 s: a benchmark run per backend
def test_sdpa_backends_limit_the_kernels_and_the_training_section_records_those_sdpa_chose(tmp_path):
    """--sdpa_backends: both models' SDPA in every measuring process (the fresh ones included) may choose only the
    named kernels, which the environment records, and each model's first epoch records the kernel SDPA chose for
    each attention call of a training forward; a run without it leaves torch's own settings alone."""
    before = {switch: getattr(torch.backends.cuda, f"{switch}_sdp_enabled")() for switch in SDPA_BACKENDS.values()}
    config = benchmark_config("tiny")
    assert config.encoder_layers == config.decoder_layers
    layers = config.encoder_layers  # per forward: each layer's encoder self, decoder self and cross attention
    try:
        arguments = tiny_arguments(tmp_path, "--only", "train", "--label_smoothing", "0")
        results = run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), train_script=None,
                                log=lambda message: None)
        assert results["environment"]["sdpa_backends"] == [name for name, switch in SDPA_BACKENDS.items()
                                                           if before[switch]]
        default = results["train"]["tiny"]["cross_entropy"]["first_epoch"]
        for name in ("ours", "marian"):  # on a CPU torch's own choice is its fused (flash) kernel
            assert default[name]["sdpa_kernels"] == {"flash_attention": 3 * layers}, name
        settings = settings_from_arguments(build_parser().parse_args([*arguments, "--sdpa_backends", "math"]))
        results = run_benchmark(settings, train_script=None, log=lambda message: None)
        assert results["environment"]["sdpa_backends"] == ["math"] and results["settings"]["sdpa_backends"] == ["math"]
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        first_epoch = results["train"]["tiny"]["cross_entropy"]["first_epoch"]
        for name in ("ours", "marian"):  # measured in a fresh process: --sdpa_backends reached it
            assert first_epoch[name]["sdpa_kernels"] == {"math": 3 * layers}, name
        table = format_table(results)
        assert "SDPA kernels math only" in table
        calls = 3 * layers
        assert re.search(rf"SDPA's kernel: attention calls per forward\s+math {calls}\s+math {calls}", table)
    finally:
        for switch, enabled in before.items():
            getattr(torch.backends.cuda, f"enable_{switch}_sdp")(enabled)


@pytest.mark.slow
def test_compiled_training_records_it_and_computes_the_eager_steps_losses(tmp_path, monkeypatch):
    """--compile: both models train through torch.compile (minutes of compiling on a CPU), the table says so, and a
    compiled step's loss is the eager step's."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = [*tiny_arguments(tmp_path, "--compile", "--label_smoothing", "0.1"), "--only", "train"]
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    results = run_benchmark(settings, train_script=None, log=lambda message: None)
    assert results["environment"]["compiled_training"] is True and "errors" not in results
    assert "training through torch.compile" in format_table(results)
    steady = results["train"]["tiny"]["label_smoothing_0.1"]["steady"]
    assert steady["ours"]["target_tokens_per_s"] > 0 and steady["marian"]["target_tokens_per_s"] > 0
    model = build_model("ours", benchmark_config("tiny", VOCAB, 0.1), seed=0).eval()  # eval: no dropout to draw
    batch = training_batch([5, 7], [6, 4], VOCAB, seed=0)
    compiled = training_speed.stepped(model, settings)
    assert compiled is not model and set(compiled.parameters()) == set(model.parameters())
    assert compiled(**batch).loss.item() == pytest.approx(model(**batch).loss.item(), rel=1e-5)


def tiny_arguments(tmp_path, *extra):
    return ["--device", "cpu", "--sizes", "tiny", "--vocab_size", str(VOCAB), "--steps", "2", "--repetitions", "2",
            "--fresh_runs", "1", "--batch_sizes", "3", "--num_beams", "1", "2", "--max_new_tokens", "3",
            "--max_tokens", "256", "--data_pairs", "300", "--peak_matmul_size", "64", "--threads", "1",
            "--data_dir", str(tmp_path / "no-corpus"), "--output", str(tmp_path / "results.json"), *extra]


def comparisons(node, path=()):
    """Every {"ours", "marian", "ratio"} dict in the results, with its path."""
    if isinstance(node, dict):
        if {"ours", "marian", "ratio"} <= node.keys():
            yield path, node
        for key, value in node.items():
            yield from comparisons(value, (*path, key))


def check_results(results, fresh_processes=True):
    losses, generate = results["train"]["tiny"], results["generate"]["tiny"]
    assert set(losses) == {"cross_entropy", "label_smoothing_0.1"}
    for train in losses.values():
        for phase in ("first_epoch", "steady"):
            for name in ("ours", "marian"):
                assert {"target_tokens_per_s", "flops_per_s", "peak_fraction", "seconds"} <= train[phase][name].keys()
        for name in ("ours", "marian"):
            assert {"peak_memory_bytes", "training_memory_bytes"} <= train["first_epoch"][name].keys()
            assert train["model"][name]["flops_per_step"] > 0
        assert train["model"]["ratio"] == {"trainable_parameters": 1.0, "flops_per_step": 1.0}
    assert losses["label_smoothing_0.1"]["label_smoothing"] == 0.1
    assert set(generate) == {"greedy_batch3", "beam2_batch3"}
    found = list(comparisons(results))
    assert len(found) == 2 * 3 + 2
    for path, compared in found:
        numbers = {k for k, v in compared["ours"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert numbers and set(compared["ratio"]) == numbers, path
        for key in numbers:
            if fresh_processes or "memory" not in key:  # a peak RSS in this test's process says little
                assert compared["ours"][key] > 0 and compared["marian"][key] > 0, (path, key)
            if compared["marian"][key]:
                expected = compared["ours"][key] / compared["marian"][key]
                assert compared["ratio"][key] == pytest.approx(expected), (path, key)
            else:  # a peak RSS that did not grow in this process: no ratio
                assert compared["ratio"][key] is None, (path, key)
    pipeline = results["data"]["pipeline"]
    assert set(pipeline["stage_seconds"]) == {"load", "prepare", "index"}
    assert pipeline["peak_rss_bytes"] > 0 and pipeline["batches"] > 0
    # private (anonymous) memory, not the memory-mapped files' pages: its peak, and the batches' index per pair
    assert 0 < pipeline["private_bytes_at_start"] <= pipeline["peak_private_bytes"]
    assert set(pipeline["stage_peak_private_bytes"]) == set(pipeline["seconds_per_million_pairs"]) == {
        "load", "prepare", "index"}
    assert pipeline["index_bytes"] > 0 and pipeline["index_bytes_per_pair"] >= 8  # lengths and indices: 12 at scale
    assert results["data"]["pipeline_cached"]["batches"] == pipeline["batches"]
    environment = results["environment"]
    for key in ("device", "device_name", "torch", "transformers", "threads", "date", "cpu"):
        assert environment[key], key
    assert results["matmul_peak"]["flops_per_s"] > 0 and results["lengths"]["origin"].startswith("synthetic")


def test_minimal_run_has_every_figure_and_ratio(tmp_path, monkeypatch):
    """Everything but the processes: fresh-process runs go in this one, and no training run is launched."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    settings = settings_from_arguments(build_parser().parse_args(tiny_arguments(tmp_path)))
    results = run_benchmark(settings, train_script=None, log=lambda message: None)
    written = json.loads(write_results(results, settings.output).read_text())
    assert "errors" not in written
    check_results(written, fresh_processes=False)
    assert written["data"]["first_step_cached"] is None
    assert not any("profile" in train for train in written["train"]["tiny"].values())  # only with --profile
    assert not any("profile" in setting for setting in written["generate"]["tiny"].values())
    table = format_table(written)
    assert "first epoch: target tokens/s" in table
    assert "cross-entropy; parameters" in table and "smoothing 0.1 (Marian: LabelSmoother); parameters" in table
    steady = written["train"]["tiny"]["cross_entropy"]["steady"]["ours"]
    assert steady["target_tokens_per_s_best"] >= steady["target_tokens_per_s"]


def test_the_first_epoch_separates_the_steps_that_bring_a_new_shape(tmp_path, monkeypatch):
    """Each first-epoch step is a new padded shape (pairs, source, target) or one seen before in the pass; the
    workload lists them, and each model's median step of either kind is the median of its steps' times."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = tiny_arguments(tmp_path, "--only", "train", "--label_smoothing", "0", "--steps", "8",
                               "--max_tokens", "128", "--pad_to_multiple_of", "8")
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    results = json.loads(write_results(run_benchmark(settings, train_script=None, log=print), settings.output)
                         .read_text())
    train = results["train"]["tiny"]["cross_entropy"]
    work = train["workload"]
    steps = batch_lengths(synthetic_lengths(), settings.max_tokens, settings.steps, settings.seed,
                          settings.pad_to_multiple_of)
    batches = [training_batch(source, target, VOCAB, 0, settings.pad_to_multiple_of) for source, target in steps]
    assert work["padded_shapes"] == [[*batch["input_ids"].shape, batch["labels"].shape[1]] for batch in batches] == [
        [5, 24, 24], [8, 16, 16], [8, 16, 16], [5, 24, 24], [16, 8, 8], [5, 24, 24], [4, 32, 32], [5, 24, 24]]
    first = [0, 1, 4, 6]  # the steps whose shape is new
    assert work["unseen_shape_steps"] == first
    assert work["padded_target_tokens"] == sum(batch["labels"].numel() for batch in batches)
    for name in ("ours", "marian"):
        figures = train["first_epoch"][name]
        (seconds,) = figures["step_seconds"]
        assert figures["median_step_seconds_unseen_shape"] == pytest.approx(
            statistics.median(seconds[step] for step in first))
        assert figures["median_step_seconds_seen_shape"] == pytest.approx(
            statistics.median(time for step, time in enumerate(seconds) if step not in first))
    assert re.search(r"first epoch: median step ms, 4 new shapes / seen \(ratio: new\) +[\d,]+ / [\d,]+",
                     format_table(results))
    assert training_speed.steps_by_shape([[1.0, 2.0]], [True, True]) == {
        "median_step_seconds_unseen_shape": 1.5, "median_step_seconds_seen_shape": None}
    assert training_speed.steps_by_shape([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0]], [True, False, False, True]) == {
        "median_step_seconds_unseen_shape": 4.5, "median_step_seconds_seen_shape": 4.5}  # every run's steps


def test_a_profiled_run_gives_each_models_time_by_kind_of_work(tmp_path, monkeypatch):
    """--profile: one more pass per model under torch.profiler; its kinds' times (the optimizer's and the loss's
    elementwise work counted there, by the operator enclosing it), the heaviest operators, and table rows."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = tiny_arguments(tmp_path, "--only", "train", "--label_smoothing", "0.1", "--profile")
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    results = json.loads(write_results(run_benchmark(settings, train_script=None, log=print), settings.output)
                         .read_text())
    train = results["train"]["tiny"]["label_smoothing_0.1"]
    profiled = train["profile"]
    for name in ("ours", "marian"):
        figures = profiled[name]
        for kind in ("matrix products", "optimizer", profiling.LOSS, "attention"):
            assert figures["kinds"][kind] > 0, (name, kind)
        assert sum(figures["kinds"].values()) == pytest.approx(figures["profiled_seconds"])
        assert 0 < figures["profiled_seconds"] <= 1.5 * figures["seconds"]  # self times on one thread, no overlap
        tops = [operator["self_seconds"] for operator in figures["top"]]
        assert tops == sorted(tops, reverse=True) and len(tops) == profiling.TOP_OPERATORS
        assert "busy_fraction" not in figures  # a GPU figure
        assert len(train["first_epoch"][name]["step_seconds"][0]) == train["workload"]["steps"]
    assert profiled["ratio"]["seconds"] == pytest.approx(profiled["ours"]["seconds"] / profiled["marian"]["seconds"])
    table = format_table(results)
    assert re.search(r"profile +tiny +smoothing 0\.1 .*: one profiled pass ms", table)
    assert re.search(r"profile +tiny +  matrix products: ms \(share\) +[\d,.]+ \(\d+%\)", table)


def test_a_profiled_generation_setting_gives_each_models_time_by_kind_of_work(tmp_path):
    """--profile with generation: one more generate() call per model and setting under torch.profiler, after the
    timed ones, and table rows under the setting's name."""
    settings = settings_from_arguments(build_parser().parse_args(
        tiny_arguments(tmp_path, "--only", "generate", "--profile")))
    results = json.loads(write_results(run_benchmark(settings, train_script=None, log=print), settings.output)
                         .read_text())
    assert set(results["generate"]["tiny"]) == {"greedy_batch3", "beam2_batch3"}
    for setting in results["generate"]["tiny"].values():
        profiled = setting["profile"]
        for name in ("ours", "marian"):
            figures = profiled[name]
            for kind in ("matrix products", "attention"):
                assert figures["kinds"][kind] > 0, (name, kind)
            assert sum(figures["kinds"].values()) == pytest.approx(figures["profiled_seconds"])
            assert 0 < figures["profiled_seconds"] <= 1.5 * figures["seconds"]
            assert "busy_fraction" not in figures
        assert profiled["ratio"]["seconds"] == pytest.approx(
            profiled["ours"]["seconds"] / profiled["marian"]["seconds"])
    table = format_table(results)
    assert re.search(r"profile +tiny +greedy, batch 3, 3 new: one profiled call ms", table)
    assert re.search(r"profile +tiny +beam 2, batch 3, 3 new: one profiled call ms", table)


def test_a_gpu_profile_counts_each_kernel_once_under_the_operator_that_launched_it():
    """Kernels as a GPU profile gives them (under CPU operators' `kernels`): their kind from an enclosing optimizer
    step or loss, else from their own name; CUDA-typed events (the device spans of annotated ranges, which contain
    kernels already counted) are left out; operators launch no time of their own."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(name, parent=None, kernels=(), device_type=DeviceType.CPU):
        return SimpleNamespace(name=name, cpu_parent=parent, device_type=device_type, is_async=False,
                               kernels=[SimpleNamespace(name=k, duration=d) for k, d in kernels],
                               self_cpu_time_total=1_000_000)

    step = event("Optimizer.step#AdamW.step")
    backward = event("autograd::engine::evaluate_function: LabelSmoothedCrossEntropyBackward")
    events = [
        step,
        event("aten::_foreach_mul_", step, [("void at::native::multi_tensor_apply_kernel<...>", 300)]),
        event("aten::_foreach_sqrt", step, [("void at::native::vectorized_elementwise_kernel<...>", 100)]),
        event("aten::mm", None, [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 2000), ("nvjet_tst_128x256", 1000)]),
        event("aten::sub", backward, [("void at::native::vectorized_elementwise_kernel<...>", 400)]),
        event("aten::add_", None, [("void at::native::vectorized_elementwise_kernel<...>", 50)]),
        event("aten::_flash_attention_forward", None, [("void pytorch_flash::flash_fwd_kernel<...>", 500)]),
        event("Optimizer.step#AdamW.step", None, [], DeviceType.CUDA),  # a range's device span: not a kernel
    ]
    kinds, top = profiling.timings_by_kind(events, on_gpu=True)
    assert kinds == pytest.approx({"matrix products": 3000e-6, "attention": 500e-6, "loss": 400e-6,
                                   "optimizer": 400e-6, profiling.OTHER: 50e-6})
    assert list(kinds) == ["matrix products", "attention", "loss", "optimizer", profiling.OTHER]
    assert top[0] == {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "kind": "matrix products", "calls": 1,
                      "self_seconds": pytest.approx(2000e-6)}
    elementwise = [entry for entry in top if entry["name"].startswith("void at::native::vectorized")]
    assert {(entry["kind"], entry["calls"]) for entry in elementwise} == {("loss", 1), ("optimizer", 1),
                                                                           (profiling.OTHER, 1)}
    for name, kind in (("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<...>", "layer norm"),
                       ("void at::native::masked_scale_kernel<...>", "dropout"),
                       ("Memcpy DtoD (Device -> Device)", "copies and fills"),
                       ("aten::masked_fill_", profiling.OTHER),
                       ("aten::native_layer_norm", "layer norm")):
        assert profiling.kind_of(name) == kind, name


def test_the_optimizers_and_the_losss_own_operators_count_as_theirs_on_a_cpu():
    """AdamW's per-tensor arithmetic (addcdiv_, ...) and the loss's (forward and backward) are counted by the operator
    enclosing them, from a real profile."""
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
    torch.nn.functional.cross_entropy(model(torch.randn(8, 64)), torch.arange(8)).backward()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        optimizer.step()
    events = profiler.events()
    arithmetic = [event for event in events if event.name == "aten::addcdiv_"]
    assert arithmetic and {profiling.context_of(event) for event in arithmetic} == {"optimizer"}
    assert profiling.kind_of("aten::addcdiv_") == profiling.OTHER  # by its name alone it would not be
    assert set(profiling.timings_by_kind(events, on_gpu=False)[0]) == {"optimizer"}
    logits, labels = torch.randn(256, 4096, requires_grad=True), torch.randint(0, 4096, (256,))
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        torch.nn.functional.cross_entropy(logits, labels).backward()
    events = profiler.events()
    for name in ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward"):
        found = [event for event in events if event.name == name]
        assert found and {profiling.context_of(event) for event in found} == {profiling.LOSS}, name
    kinds, _ = profiling.timings_by_kind(events, on_gpu=False)
    assert max(kinds, key=kinds.get) == profiling.LOSS


def test_a_profiler_that_fails_is_recorded_and_keeps_the_figures_measured_before(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))

    def broken(run, device):
        raise RuntimeError("no CUPTI")

    monkeypatch.setattr(profiling, "profile_pass", broken)
    arguments = tiny_arguments(tmp_path, "--only", "train", "generate", "--label_smoothing", "0", "--profile")
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    results = run_benchmark(settings, train_script=None, log=lambda message: None)
    train = results["train"]["tiny"]["cross_entropy"]
    assert train["profile"] == {"error": "RuntimeError: no CUPTI"} and "errors" not in results
    for phase in ("first_epoch", "steady"):
        assert train[phase]["ours"]["target_tokens_per_s"] > 0 and train[phase]["marian"]["target_tokens_per_s"] > 0
    greedy = results["generate"]["tiny"]["greedy_batch3"]
    assert greedy["profile"] == {"error": "RuntimeError: no CUPTI"} and greedy["ours"]["tokens_per_s"] > 0
    table = format_table(results)
    assert re.search(r"profile +tiny +cross-entropy: failed, RuntimeError: no CUPTI", table)
    assert re.search(r"profile +tiny +greedy, batch 3, 3 new: failed, RuntimeError: no CUPTI", table)


@pytest.mark.parametrize("extra, message", [
    (["--seed", "-1"], r"--seed must be in \[0, 2\*\*32\), got -1"),
    (["--vocab_size", "4"], r"--vocab_size must be above the 4 special tokens, got 4"),
    (["--output", "."], r"--output \. is a directory; give a file path"),
    (["--output", "README.md/results.json"], r"--output README.md/results.json: README.md is a file, not a folder"),
])
def test_bad_settings_are_refused_before_any_measuring(tmp_path, extra, message, monkeypatch):
    """The output is checked first: it was written last, after the whole run, and a bad path lost every figure."""
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ValueError, match=message):
        settings_from_arguments(build_parser().parse_args(tiny_arguments(tmp_path, *extra)))
    assert not (tmp_path / "results.json").exists()


def test_an_output_in_new_folders_is_written_there_and_a_link_writes_its_target(tmp_path):
    settings = settings_from_arguments(build_parser().parse_args(
        tiny_arguments(tmp_path, "--output", str(tmp_path / "new" / "folders" / "results.json"))))
    assert not (tmp_path / "new").exists()  # nothing made before the run
    assert json.loads(write_results({"figures": 1}, settings.output).read_text()) == {"figures": 1}
    (tmp_path / "target.json").write_text("{}")
    (tmp_path / "latest.json").symlink_to("target.json")  # the link stays a link, its target gets the results
    write_results({"figures": 2}, tmp_path / "latest.json")
    assert (tmp_path / "latest.json").is_symlink() and json.loads((tmp_path / "target.json").read_text()) == {
        "figures": 2}
    # where the temporary file goes cannot take it: written in place
    (tmp_path / f".target.json.{os.getpid()}.writing").mkdir()
    write_results({"figures": 3}, tmp_path / "latest.json")
    assert json.loads((tmp_path / "target.json").read_text()) == {"figures": 3}
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"dangling is a link to a missing path, not a folder"):
        settings_from_arguments(build_parser().parse_args(
            tiny_arguments(tmp_path, "--output", str(tmp_path / "dangling" / "sub" / "results.json"))))


def test_a_corpus_without_lengths_is_named_before_any_measuring(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "matmul_peak", lambda *args: pytest.fail("measured before the corpus was read"))
    (tmp_path / "corpus").mkdir()
    for language, text in (("de", "ein langer Satz mit vielen Wörtern\n"), ("en", "a long sentence of many words\n")):
        (tmp_path / "corpus" / f"train.{language}").write_text(text * 20)
    arguments = tiny_arguments(tmp_path, "--data_dir", str(tmp_path / "corpus"), "--vocab_size", "260",
                               "--max_length", "2")
    with pytest.raises(ValueError, match=r"corpus: no training pair is left after filtering with max_length 2"):
        run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)


def test_each_finished_section_is_saved_and_an_interrupted_run_keeps_them(tmp_path, monkeypatch, capsys):
    saved = []
    arguments = tiny_arguments(tmp_path, "--only", "train", "generate", "--num_beams", "1", "--label_smoothing", "0")
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None,
                      save=lambda results: saved.append(json.loads(json.dumps(results))))
    assert [("train" in snapshot, "generate" in snapshot) for snapshot in saved] == [
        (False, False), (True, False), (True, True), (True, True)]  # lengths and peak, train, generate, the end
    assert "tiny" in saved[1]["train"] and "benchmark_seconds" in saved[-1]["environment"]

    def interrupted(settings, train_script, log, save):  # Ctrl-C during the second section
        save({"train": {"tiny": "measured"}})
        raise KeyboardInterrupt

    script = load_script("benchmark")
    monkeypatch.setattr(script, "run_benchmark", interrupted)
    with pytest.raises(SystemExit, match=r"interrupted; the sections measured until then are in .*results.json"):
        script.main(arguments)
    assert json.loads((tmp_path / "results.json").read_text()) == {"train": {"tiny": "measured"}}

    def interrupted_at_once(settings, train_script, log, save):  # Ctrl-C while the corpus is read
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "run_benchmark", interrupted_at_once)
    with pytest.raises(SystemExit, match=r"^benchmark.py: interrupted before anything was measured; nothing written"):
        script.main(arguments)


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path, monkeypatch):
    def out_of_memory(*args):
        raise RuntimeError("the fresh process died")

    monkeypatch.setattr(run, "benchmark_data", out_of_memory)
    arguments = tiny_arguments(tmp_path, "--only", "generate", "data", "--num_beams", "1")
    results = run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    assert results["errors"] == {"data": "RuntimeError: the fresh process died"}
    assert "data" not in results and results["generate"]["tiny"]["greedy_batch3"]["ratio"]["tokens_per_s"] > 0
    assert "FAILED data: RuntimeError: the fresh process died" in format_table(results)


def test_a_failing_loss_keeps_the_other_losses_figures(tmp_path, monkeypatch):
    measured = run.benchmark_training_loss

    def smoothed_fails(size, settings, lengths, peak, smoothing):
        if smoothing:
            raise RuntimeError("out of memory")
        return measured(size, settings, lengths, peak, smoothing)

    monkeypatch.setattr(run, "benchmark_training_loss", smoothed_fails)
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = tiny_arguments(tmp_path, "--only", "train")
    results = run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    assert results["errors"] == {"train/tiny/label_smoothing_0.1": "RuntimeError: out of memory"}
    assert list(results["train"]["tiny"]) == ["cross_entropy"]
    assert results["train"]["tiny"]["cross_entropy"]["steady"]["ratio"]["target_tokens_per_s"] > 0
    assert "FAILED train/tiny/label_smoothing_0.1: RuntimeError: out of memory" in format_table(results)


def test_a_failing_generation_setting_keeps_the_others(tmp_path, monkeypatch):
    """A large batch out of memory, or a static cache that does not compile, on a GPU: the size's other generation
    settings were discarded with it."""
    measured, calls = generation_speed.timed_in_turn, []

    def second_setting_fails(*args):  # greedy, then beam 2
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory")
        return measured(*args)

    monkeypatch.setattr(generation_speed, "timed_in_turn", second_setting_fails)
    arguments = tiny_arguments(tmp_path, "--only", "generate")
    results = run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    assert results["errors"] == {"generate/tiny/beam2_batch3": "RuntimeError: CUDA out of memory"}
    assert list(results["generate"]["tiny"]) == ["greedy_batch3"]
    assert "FAILED generate/tiny/beam2_batch3: RuntimeError: CUDA out of memory" in format_table(results)


def test_static_cache_rows_generate_the_same_tokens_in_both_models(tmp_path):
    arguments = tiny_arguments(tmp_path, "--only", "generate", "--caches", "dynamic", "static")
    results = run.run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    generate = results["generate"]["tiny"]
    assert set(generate) == {"greedy_batch3", "beam2_batch3", "greedy_batch3_static", "beam2_batch3_static"}
    for name, setting in generate.items():
        assert setting["cache"] == ("static" if name.endswith("_static") else "dynamic")
        assert setting["same_output"] and setting["ratio"]["tokens_per_s"] > 0, name
    assert "greedy, batch 3, static cache, 3 new" in format_table(results)


@pytest.mark.slow
def test_command_line_run_with_fresh_processes_and_first_step(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "benchmark.py"), *tiny_arguments(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    check_results(results)
    first_step = results["data"]["first_step_cached"]
    assert 0 < first_step["setup_seconds"] < first_step["first_step_seconds"]
    assert first_step["peak_private_bytes"] > 100 * 2**20  # the training process's: torch, the model, the data
    assert first_step["found_in_cache"]  # the launch tokenized nothing anew: the pipeline's cache served it
    assert first_step["found_batches_in_cache"]  # nor packed the batches again
    assert "ours/marian" in result.stdout


def test_synthetic_vocabulary_round_trips_ids_and_keeps_the_special_tokens():
    vocabulary = SyntheticVocabulary(VOCAB)
    assert len(vocabulary) == VOCAB and vocabulary.convert_ids_to_tokens([0, 1, 2, 3]) == list(SPECIAL_TOKENS)
    ids = list(range(VOCAB))
    assert vocabulary.convert_tokens_to_ids(vocabulary.convert_ids_to_tokens(ids)) == ids
    assert vocabulary.convert_tokens_to_ids(vocabulary.unk_token) == 3 and vocabulary.bos_token == "<s>"


def test_ctranslate2_rows_compare_each_compute_type_with_pytorch(tmp_path):
    pytest.importorskip("ctranslate2")
    arguments = tiny_arguments(tmp_path, "--only", "ctranslate2", "--max_new_tokens", "6")
    results = run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    assert "errors" not in results and results["environment"]["ctranslate2"]
    tiny = results["ctranslate2"]["tiny"]
    assert tiny["compute_types"] == ["float32", "int8"]
    for setting in ("greedy_batch3", "beam2_batch3"):
        compared = tiny[setting]
        assert set(compared["ratio"]) == {"ctranslate2_float32", "ctranslate2_int8"}
        for engine, ratio in compared["ratio"].items():
            assert compared[engine]["tokens_per_s"] > 0
            assert ratio == pytest.approx(compared[engine]["tokens_per_s"] / compared["pytorch"]["tokens_per_s"])
        # float32 computes PyTorch's function: the same tokens, so the same count.
        assert compared["ctranslate2_float32"]["same_output"] is True, setting
        assert compared["ctranslate2_float32"]["generated_tokens"] == compared["pytorch"]["generated_tokens"]
    table = format_table(results)
    assert "ctranslate2/pytorch" in table and "int8, beam 2, batch 3, 6 new" in table


def test_the_ctranslate2_section_is_skipped_with_a_reason_where_it_is_not_installed(tmp_path, monkeypatch):
    find_spec = run.importlib.util.find_spec
    monkeypatch.setattr(run.importlib.util, "find_spec",
                        lambda name: None if name == "ctranslate2" else find_spec(name))
    arguments = tiny_arguments(tmp_path, "--only", "ctranslate2")
    results = run_benchmark(settings_from_arguments(build_parser().parse_args(arguments)), log=lambda m: None)
    assert results["ctranslate2"] == {"skipped": run.CTRANSLATE2_MISSING} and "errors" not in results
    assert "ctranslate2: skipped, ctranslate2 is not installed" in format_table(results)


def test_compile_regions_compiles_each_layer_and_trains_as_eager(tmp_path):
    """`--compile_regions`: each layer through torch.compile on its own (accelerate's regional compilation), the
    model around them eager; a training step's loss and gradients are eager's."""
    arguments = ["--device", "cpu", "--sizes", "tiny", "--compile", "--compile_regions", "--compile_backend",
                 "aot_eager", "--output", str(tmp_path / "results.json")]
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    config = benchmark_config("tiny", VOCAB, 0.0)
    config.dropout = config.attention_dropout = config.activation_dropout = 0.0
    eager = training_speed.training_model(build_model("ours", config, 0))
    copied = copy.deepcopy(eager)
    regional = training_speed.stepped(copied, settings)  # its layers hold the copy's parameters
    layers = [*regional.model.encoder.layers, *regional.model.decoder.layers]
    assert layers and all(isinstance(layer, torch._dynamo.eval_frame.OptimizedModule) for layer in layers)
    assert not isinstance(regional, torch._dynamo.eval_frame.OptimizedModule)  # the model around them stays eager
    batch = training_batch([5, 3, 7], [4, 6, 2], VOCAB, seed=0)
    losses = [model(**batch).loss for model in (eager, regional)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[1], losses[0])
    compiled_parameters = dict(copied.named_parameters())
    for name, parameter in eager.named_parameters():
        torch.testing.assert_close(compiled_parameters[name].grad, parameter.grad, msg=name)


@pytest.mark.slow  # compiles each model three times (about 40 s on 2 cores)
def test_the_compile_section_sets_each_model_eager_and_compiled_side_by_side(tmp_path, monkeypatch):
    """`--only compile`: one run trains each model eager and through torch.compile; the compiled first epoch gives
    its compile seconds and its speed with them left out, and every figure is set against Marian eager."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    compiled_models = []
    stepped = training_speed.stepped

    def counted(model, settings):
        if settings.compile:
            compiled_models.append(type(model).__name__)
        return stepped(model, settings)

    monkeypatch.setattr(training_speed, "stepped", counted)
    arguments = [*tiny_arguments(tmp_path, "--compile_backend", "aot_eager", "--label_smoothing", "0.1"),
                 "--only", "compile"]
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    assert settings.compile is False  # the section compiles its own half, not the whole run
    saved = []
    results = run_benchmark(settings, train_script=None, log=lambda message: None,
                            save=lambda results: saved.append(json.loads(json.dumps(results))))
    assert "errors" not in results and "train" not in results
    compared = results["compile"]["tiny"]["label_smoothing_0.1"]
    # the eager figures are saved before compiling starts: a run stopped while compiling keeps them
    kept = [save["compile"]["tiny"]["label_smoothing_0.1"] for save in saved if "compile" in save]
    assert any("eager" in part and "compiled" not in part for part in kept)
    assert "compile_seconds" not in compared["eager"]["first_epoch"]["ours"]
    compiled = compared["compiled"]["first_epoch"]["ours"]
    assert 0 < compiled["compile_seconds"] < compiled["seconds"][0]
    # the warm-up's graph, the run's first, counted apart
    assert all(compared["compiled"]["first_epoch"][name]["warm_up_compile_seconds"] > 0 for name in ("ours", "marian"))
    assert "warm_up_compile_seconds" not in compared["eager"]["first_epoch"]["ours"]
    assert compiled["after_compiling"]["target_tokens_per_s"] > compiled["target_tokens_per_s"]
    # each model compiles once, in its fresh process, which measures the compiled steady passes too
    assert sorted(compiled_models) == sorted(["AnnotatedTransformerForConditionalGeneration", "MarianMTModel"]
                                             * settings.fresh_runs)
    assert compared["compiled"]["steady_passes"].startswith("after the first epoch, in its fresh process")
    assert compared["eager"]["steady_passes"].startswith("both models in one process")
    for kind in ("eager", "compiled"):
        assert len(compared[kind]["steady"]["ours"]["seconds"]) == settings.repetitions * (
            settings.fresh_runs if kind == "compiled" else 1)
    rows = compared["side_by_side"]
    assert list(rows) == [label for label, _ in training_speed.SIDE_BY_SIDE]
    steady = rows["steady target tokens/s"]
    assert steady["ratio to marian eager"]["marian eager"] == 1
    assert steady["ours compiled"] == compared["compiled"]["steady"]["ours"]["target_tokens_per_s"]
    assert rows["compile seconds (first epoch)"]["ours eager"] is None
    table = format_table(results)
    assert "ours compiled / marian eager" in table and "label_smoothing_0.1: steady target tokens/s" in table


# ---- packed batches (--packing) -------------------------------------------------------------------------------------


def test_a_packed_run_trains_ours_on_grids_of_one_shape_beside_both_models_on_padded_batches(tmp_path, monkeypatch):
    """--packing: ours a third time, on packed batches of the same token budget, against Marian on its padded
    batches; every packed step has the grid's one shape, and its FLOPs count the grid while its pairs' own FLOPs
    count each pair alone."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = tiny_arguments(tmp_path, "--only", "train", "--label_smoothing", "0.1", "--packing", "--steps", "3")
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    results = json.loads(write_results(run_benchmark(settings, train_script=None, log=lambda message: None),
                                       settings.output).read_text())
    assert "errors" not in results
    train = results["train"]["tiny"]["label_smoothing_0.1"]
    packed, padded = train["packed"], train["workload"]
    work, grid = packed["workload"], packed["workload"]["packed_grid"]
    steps, expected_grid = packed_batch_lengths(synthetic_lengths(), 256, 3, 0, None)
    assert grid == expected_grid and grid["rows"] * grid["row_length"] <= 256
    assert work["padded_shapes"] == [[grid["rows"], grid["row_length"], grid["row_length"]]] * 3
    assert work["unseen_shape_steps"] == [0] and work["steps"] == 3
    assert work["target_tokens"] == sum(sum(target) for _, target in steps)
    assert work["target_padding_fraction"] == pytest.approx(1 - work["target_tokens"] / work["padded_target_tokens"])
    assert 0 <= padded["target_padding_fraction"] < 1 and packed["attention_implementation"] == "sdpa"
    for phase in ("first_epoch", "steady"):
        ours, marian = packed[phase]["ours"], packed[phase]["marian"]
        assert marian == train[phase]["marian"]  # Marian on its padded batches, the very same figures
        assert ours["target_tokens_per_s"] > 0 and packed[phase]["ratio"]["target_tokens_per_s"] == pytest.approx(
            ours["target_tokens_per_s"] / marian["target_tokens_per_s"])
        # the grid's FLOPs: the pairs' own plus the masked attention across each row and the padding
        assert 0 < ours["pair_flops_per_s"] < ours["flops_per_s"]
    assert packed["first_epoch"]["ours"]["run_target_tokens"] > 0
    table = format_table(results)
    shape = f"{grid['rows']} x {grid['row_length']}"
    assert re.search(rf"packed +tiny +{shape} grids \(sdpa\), 3 steps: padding share", table)
    assert "steady: the pairs' own FLOP/s (% of peak)" in table


def test_the_pairs_own_flops_are_each_pair_alone():
    ours, _ = tiny_twins()
    cpu = torch.device("cpu")
    loss_of = loss_function("ours", ours.train(), 0.0)
    flops = TrainingFlops.fit(loss_of, ours, cpu, "fp32", VOCAB)
    alone = [measure.count_flops(lambda: forward_backward(loss_of, training_batch([s], [t], VOCAB, seed=0), cpu,
                                                          "fp32")) for s, t in ((9, 6), (5, 3), (7, 4))]
    assert flops.of_pairs([9, 5, 7], [6, 3, 4]) == sum(alone) < flops(padded_pairs())


def test_a_projected_run_is_the_first_epoch_then_the_steady_rate():
    assert training_speed.run_target_tokens(1000, [10.0, 30.0, 20.0], 100.0) == 1000 + 100 * (900 - 20)
    assert training_speed.run_target_tokens(1000, [1800.0], 100.0) == 500  # a first epoch longer than the run


def test_the_compile_section_sets_ours_packed_beside_and_compiles_only_the_runs_named():
    def result(scale, packed=True):
        figures = {"target_tokens_per_s": scale, "run_target_tokens": 10 * scale, "pair_peak_fraction": 0.1}
        both = {"ours": figures, "marian": {**figures, "target_tokens_per_s": 2.0}, "ratio": {}}
        return {"steady": both, "first_epoch": both, "workload": {"target_padding_fraction": 0.2},
                **({"packed": {"steady": {"ours": {**figures, "target_tokens_per_s": 3 * scale}, "marian": None},
                               "first_epoch": both, "workload": {"target_padding_fraction": 0.05}}}
                   if packed else {})}

    rows = training_speed.side_by_side({"eager": result(1.0), "compiled": result(4.0)})
    steady = rows["steady target tokens/s"]
    assert steady["ours packed eager"] == 3.0 and steady["ours packed compiled"] == 12.0
    assert steady["ratio to marian eager"]["ours packed compiled"] == 6.0
    assert rows["padding share of the target tokens"]["ours packed compiled"] == 0.05
    assert rows["padding share of the target tokens"]["marian eager"] == 0.2
    assert "ours packed eager" not in training_speed.side_by_side(
        {"eager": result(1.0, packed=False), "compiled": result(4.0, packed=False)})["steady target tokens/s"]


def test_packing_settings_and_their_errors():
    def parse(*argv):
        return settings_from_arguments(build_parser().parse_args(["--device", "cpu", *argv]))

    default = parse()
    assert (default.packing, default.packed_attention, default.compiled_runs) == (False, "sdpa", None)
    assert parse("--packing", "--compiled_runs", "marian", "packed").compiled_runs == ["marian", "packed"]
    with pytest.raises(ValueError, match=r"--compiled_runs ours padded: choose one or more of \['ours', 'marian'"):
        parse("--compiled_runs", "ours", "padded")
    with pytest.raises(ValueError, match="--compiled_runs packed needs --packing"):
        parse("--compiled_runs", "packed")
    with pytest.raises(ValueError, match="--packed_attention flex_attention trains on CUDA only"):
        parse("--packing", "--packed_attention", "flex_attention")


@pytest.mark.slow  # compiles
def test_compiled_runs_leave_the_others_out_and_the_table_shows_them_as_not_measured(tmp_path, monkeypatch):
    """--compile --compiled_runs marian: Marian compiled alone (benchmarks/gpu.sh's third step), ours left out."""
    monkeypatch.setattr(measure, "run_in_fresh_process", lambda function, *args: function(*args))
    arguments = tiny_arguments(tmp_path, "--only", "train", "--label_smoothing", "0", "--compile", "--compile_backend",
                               "aot_eager", "--compiled_runs", "marian", "--steps", "1", "--repetitions", "1")
    settings = settings_from_arguments(build_parser().parse_args(arguments))
    assert training_speed.skipped_runs(settings) == ("ours",)
    assert training_speed.skipped_runs(dataclasses.replace(settings, compile=False)) == ()
    results = run_benchmark(settings, train_script=None, log=lambda message: None)
    train = results["train"]["tiny"]["cross_entropy"]
    assert train["steady"]["ours"] is None and train["first_epoch"]["ours"] is None and train["steady"]["ratio"] == {}
    assert train["steady"]["marian"]["target_tokens_per_s"] > 0
    assert re.search(r"steady: target tokens/s, median \(best\) +- +[\d,]+ \([\d,]+\)", format_table(results))
