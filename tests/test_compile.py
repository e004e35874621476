"""torch.compile takes the model whole: the training forward and backward, the evaluation forward and generate()'s
static-cache decoding step compile with no graph break, give eager's loss, gradients and tokens, and batches padded
to a bucket of lengths compile a bounded number of times."""

import json

import pytest
import torch
from launch_helpers import QUICK, accelerate_launch
from model_helpers import VOCAB, assert_varied, generating_model, padded_batch, tiny_model, trained_to_copy
from model_helpers import training_batch as batch
from safetensors import safe_open
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters
from transformers import CompileConfig, DataCollatorForSeq2Seq

from modeling import input_checks
from modeling.tokenization import train_tokenizer
from modeling.training.trainer import TokenIdsChecked


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
def test_the_forward_compiles_as_one_graph(training):
    model = tiny_model(seed=1).train(training)
    explanation = torch._dynamo.explain(lambda inputs: model(**inputs).loss)(batch([5, 8, 3]))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_compiled_training_gives_eagers_loss_and_gradients():
    eager = tiny_model(seed=1, dropout=0.0).train()
    compiled_model = tiny_model(seed=1, dropout=0.0).train()
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)
    inputs = batch([5, 8, 3])
    eager_loss = eager(**inputs).loss
    compiled_loss = compiled(**inputs).loss
    eager_loss.backward()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for (name, expected), (_, parameter) in zip(eager.named_parameters(), compiled_model.named_parameters()):
        torch.testing.assert_close(parameter.grad, expected.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_batches_of_mixed_lengths_compile_a_bounded_number_of_times():
    """Lengths padded to multiples of 8 (--pad_to_multiple_of 8, which --torch_compile sets): the first length
    compiles, the second compiles once more with dynamic lengths, and no later one compiles again."""
    model = tiny_model(seed=1).train()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    lengths = [5, 7, 9, 12, 16, 17, 23, 24, 31, 8, 6]
    for length in lengths:
        compiled(**batch([length, max(1, length - 3)])).loss.backward()
    buckets = len({-(-length // 8) for length in lengths})
    assert counter.frame_count <= 2 < buckets


def test_a_compiled_forward_checks_no_token_id_on_the_host(monkeypatch):
    """Inside a compiled graph the ids are not read back (no device sync, no graph break): compiled training checks
    them on the host, where the batches are made (`TransformerSeq2SeqTrainer`)."""
    syncs = []
    ranges = input_checks._token_id_ranges
    monkeypatch.setattr(input_checks, "_token_id_ranges", lambda tensors: syncs.append(len(tensors)) or ranges(tensors))
    model = tiny_model(seed=1).train()
    torch.compile(model, backend="aot_eager", fullgraph=True)(**batch([5, 8, 3])).loss.backward()
    assert syncs == []
    model(**batch([5, 8, 3]))
    assert syncs == [3]  # eager: labels, source and decoder inputs, in one sync


def test_generate_compiles_the_static_cache_decoding_step_whole_and_gives_eagers_tokens():
    """fullgraph=True: a graph break in the decoding step would be an error, not a silent fallback."""
    model = trained_to_copy(generating_model(), steps=30)
    input_ids, attention_mask = padded_batch()
    settings = dict(max_new_tokens=6, cache_implementation="static", num_beams=1, do_sample=False)
    eager = model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
    assert_varied(eager)
    model.generation_config.compile_config = CompileConfig(fullgraph=True)
    model.generation_config.compile_config._compile_all_devices = True  # transformers compiles on GPUs only, else
    counters.clear()
    for _ in range(2):
        assert torch.equal(model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings), eager)
    assert counters["stats"]["unique_graphs"] == 1


# ---- compiled training through the Trainer --------------------------------------------------------------------------


@pytest.mark.slow  # a launch that compiles (CI runs it with -m slow, and on the AMD path in its own step)
def test_compiled_training_pads_to_buckets_reports_its_compile_time_and_checks_ids_on_the_host(tmp_path):
    """Under `accelerate launch`, as the recipes run: the launcher writes ACCELERATE_DYNAMO_USE_DYNAMIC=False, with
    which the Trainer compiled a static graph per batch shape (5 graphs in these 24 steps); the run undoes it."""
    output_dir = tmp_path / "run"
    accelerate_launch(
        ["--num_processes", "1"],
        [*QUICK, "--torch_compile_backend", "aot_eager", "--max_steps", "24", "--eval_steps", "12", "--save_steps", "12",
         "--max_eval_samples", "8", "--max_test_samples", "8", "--output_dir", str(output_dir)],
    )
    metrics = json.loads((output_dir / "train_results.json").read_text())
    assert 0 < metrics["train_compile_seconds"] < metrics["train_runtime"]
    assert 1 <= metrics["train_compiled_graphs"] <= 2  # a static graph, then one with dynamic shapes
    args = torch.load(output_dir / "training_args.bin", weights_only=False)
    assert args.torch_compile and args.pad_to_multiple_of == 8
    losses = [entry["loss"] for entry in json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
              if "loss" in entry]
    assert len(losses) == 24 and losses[-1] < losses[0] / 2  # it trained


@pytest.mark.slow  # the default run has test_benchmark.py's regional compilation in this process
def test_regional_compilation_through_accelerate_launch_trains_and_saves_plain_weights(tmp_path):
    """`accelerate launch --dynamo_use_regional_compilation ... --torch_compile` (docs/training.md): each layer kind
    compiles on its own, and the saved weights carry the model's own names."""
    output_dir = tmp_path / "run"
    accelerate_launch(
        ["--num_processes", "1", "--dynamo_use_regional_compilation"],
        [*QUICK, "--torch_compile_backend", "aot_eager", "--max_steps", "12", "--eval_strategy", "no",
         "--save_strategy", "no", "--max_test_samples", "8", "--output_dir", str(output_dir)],
    )
    metrics = json.loads((output_dir / "train_results.json").read_text())
    assert metrics["train_compiled_graphs"] > 2  # a graph per kind of layer, not one for the whole model
    with safe_open(output_dir / "model.safetensors", "pt") as weights:
        names = list(weights.keys())
    assert "model.encoder.layers.0.self_attn.q_proj.weight" in names and not any("_orig_mod" in n for n in names)


def test_the_compiled_runs_collator_refuses_an_id_the_model_cannot_look_up():
    tokenizer = train_tokenizer(["1 2 3", "4 5 6"], vocab_size=270)
    model = tiny_model(seed=1)
    collator = TokenIdsChecked(DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100), model.config)
    fine = collator([{"input_ids": [5, 6, 2], "labels": [7, 2]}, {"input_ids": [5, 2], "labels": [8, 9, 2]}])
    assert fine["labels"][0, -1] == -100
    with pytest.raises(ValueError, match=rf"^`labels` holds the token id {VOCAB}, outside the vocabulary"):
        collator([{"input_ids": [5, 6, 2], "labels": [VOCAB, 2]}])
