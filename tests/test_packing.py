"""Packed training batches: whole pairs in a grid of one shape, every pair once per epoch across processes; attention
that never crosses a pair, so a packed batch gives each pair's loss and gradients as the pair alone; one compiled
graph for a whole run; unpacked training, evaluation and generate() never touch the packed path; `train.py
--packing` end to end."""

import json

import numpy as np
import pytest
import torch
from launch_helpers import QUICK, accelerate_launch
from model_helpers import VOCAB, generating_model, padded_batch, tiny_model
from torch._dynamo.testing import CompileCounterWithBackend

from modeling import packed_batches
from modeling.data.batching import PairsOverBudgetError, TokenBudgetBatchSampler, padding_stats
from modeling.data.packing import DataCollatorForPackedSeq2Seq, PackedBatchSampler, first_fit, packing_stats
from modeling.loss import label_smoothed_loss
from modeling.training.argument_parsing import parse_arguments
from modeling.training.arguments import ConfigurationError

PAD, START, EOS = 0, 1, 2


def random_lengths(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, 60, n)
    return source, np.clip((source * rng.uniform(0.6, 1.5, n)).astype(int), 1, 64)


def features_of(lengths, seed=0):
    """Pairs of the given (source, target) lengths, each side random ids ending in </s>."""
    generator = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(4, VOCAB, (source - 1,), generator=generator).tolist() + [EOS],
             "labels": torch.randint(4, VOCAB, (target - 1,), generator=generator).tolist() + [EOS]}
            for source, target in lengths]


# ---- the batches ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_replicas", [1, 2, 3])
def test_every_pair_once_per_epoch_across_ranks_each_batch_fits_its_grid(num_replicas):
    source, target = random_lengths()
    samplers = [PackedBatchSampler(source, target, 1024, seed=5, num_replicas=num_replicas, rank=rank)
                for rank in range(num_replicas)]
    rows, row_length = samplers[0].rows, samplers[0].row_length
    assert row_length == 64 and rows == 16  # the longest pair (64 tokens), rounded to a multiple of 8
    for epoch in (0, 1):
        shares = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
            assert len(shares[-1]) == len(sampler)
        assert len({len(share) for share in shares}) == 1, "every rank gets the same number of batches"
        batches = [batch for share in shares for batch in share]
        assert sorted(index for batch in batches for index in batch) == list(range(len(source)))
        for batch in batches:
            assert first_fit(source[batch], target[batch], rows, row_length) is not None
    stats = packing_stats(samplers[0])
    assert stats["pairs"] == len(source) and stats["source_tokens"] == source.sum()
    assert max(stats["source_padding_fraction"], stats["target_padding_fraction"]) < 0.2


def test_the_collator_gives_each_pair_the_row_the_sampler_chose():
    """The sampler yields a batch row by row; the collator's first-fit puts each pair back in its row."""
    source, target = random_lengths(600, seed=1)
    for num_replicas in (1, 7):  # 7: batches split to share them out, by whole rows
        sampler = PackedBatchSampler(source, target, 512, seed=2, num_replicas=num_replicas, rank=None)
        for rows, batch in zip(sampler.batch_rows, sampler.batches):
            placed = first_fit(source[batch], target[batch], sampler.rows, sampler.row_length)
            assert placed == [row for row, pairs in enumerate(rows) for _ in pairs]


def test_a_pair_that_does_not_fit_waits_for_the_next_batch_and_comes_first_there():
    # 2 rows of 8 tokens, pairs in index order: 0, 1 and 2 take 6, 6 and 1 tokens; pair 3 (7 tokens) fits nowhere and
    # waits, pair 4 (1 token) still fits, pair 5 (5 tokens) waits too, and with 2 pairs waiting the batch closes
    source = [6, 6, 1, 7, 1, 5, 3]
    sampler = PackedBatchSampler(source, source, 16, row_length=8, shuffle=False, lookahead=2)
    assert sampler.batch_rows == [[[0, 2, 4], [1]], [[3], [5, 6]]]  # those that waited open the next batch


def test_epochs_shuffle_the_batch_order_deterministically_from_the_seed():
    source, target = random_lengths()
    first, again = (PackedBatchSampler(source, target, 1024, seed=3) for _ in range(2))
    epoch0 = list(first)
    assert epoch0 == list(again)
    first.set_epoch(1)
    epoch1 = list(first)
    assert epoch1 != epoch0 and sorted(map(tuple, epoch1)) == sorted(map(tuple, epoch0))
    assert PackedBatchSampler(source, target, 1024, seed=4).batches != first.batches


def test_the_collated_grid():
    features = features_of([(5, 3), (2, 4), (6, 6), (2, 2)])
    batch = DataCollatorForPackedSeq2Seq(2, 8, PAD, START)(features)
    assert {name: tuple(tensor.shape) for name, tensor in batch.items()} == {
        name: (2, 8) for name in ("input_ids", "position_ids", "pair_ids", "labels", "decoder_input_ids",
                                  "decoder_position_ids", "decoder_pair_ids")}
    # first-fit: pairs 0 and 1 share row 0, pair 2 fits only row 1, and pair 3 the rest of row 1
    assert batch["pair_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, -1], [2, 2, 2, 2, 2, 2, 3, 3]]
    assert batch["decoder_pair_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 1, -1], [2, 2, 2, 2, 2, 2, 3, 3]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 0], [0, 1, 2, 3, 4, 5, 0, 1]]
    assert batch["decoder_position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 0], [0, 1, 2, 3, 4, 5, 0, 1]]
    for pair, feature in enumerate(features):
        on_source, on_target = batch["pair_ids"] == pair, batch["decoder_pair_ids"] == pair
        assert batch["input_ids"][on_source].tolist() == feature["input_ids"]
        assert batch["labels"][on_target].tolist() == feature["labels"]
        # the decoder inputs shifted within the pair: its start token, then its own labels but the last
        assert batch["decoder_input_ids"][on_target].tolist() == [START, *feature["labels"][:-1]]
    assert batch["input_ids"][0, -1] == PAD and batch["labels"][0, -1] == -100
    assert batch["decoder_input_ids"][0, -1] == PAD


def test_source_row_and_target_row_hold_the_same_pairs_in_the_same_order():
    source, target = random_lengths(300, seed=4)
    sampler = PackedBatchSampler(source, target, 512, seed=0)
    collator = DataCollatorForPackedSeq2Seq(sampler.rows, sampler.row_length, PAD, START)
    for batch in sampler.batches[:5]:
        packed = collator(features_of([(source[i], target[i]) for i in batch]))
        for source_row, target_row in zip(packed["pair_ids"], packed["decoder_pair_ids"]):
            assert list(dict.fromkeys(source_row[source_row >= 0].tolist())) == list(
                dict.fromkeys(target_row[target_row >= 0].tolist()))


def test_bad_settings_and_batches_are_clear_errors():
    with pytest.raises(PairsOverBudgetError, match=r"1 pair\(s\) are longer than a packed row of 16 tokens: index 1"):
        PackedBatchSampler([4, 17, 3], [4, 2, 3], 64, row_length=16)
    with pytest.raises(ValueError, match="max_tokens=32 holds no row of row_length=40"):
        PackedBatchSampler([4, 40], [4, 3], 32)
    with pytest.raises(ValueError, match="pair 1 has 0 source and 3 target tokens"):
        PackedBatchSampler([4, 0], [4, 3], 64)
    with pytest.raises(ValueError, match="cannot give 2 processes the same number of batches"):
        PackedBatchSampler([8, 8, 8], [8, 8, 8], 8, num_replicas=2)
    with pytest.raises(ValueError, match=r"3 pairs of \(source, target\) lengths .* do not fit a packed grid of 1 "):
        DataCollatorForPackedSeq2Seq(1, 8, PAD, START)(features_of([(4, 4), (4, 4), (2, 2)]))


def test_packed_grids_hold_less_padding_than_padded_gpu_batches_on_multi30k(multi30k_de_en, multi30k_tokenizer):
    backend = multi30k_tokenizer.tokenizer.backend_tokenizer
    source, target = (
        np.array([len(encoding.ids) for encoding in backend.encode_batch(multi30k_de_en["train"][column][:])])
        for column in ("source", "target")
    )
    for max_tokens in (4096, 32768):  # the GPU recipes' and the GPU benchmark's budget, padded to multiples of 8
        padded = TokenBudgetBatchSampler(source, target, max_tokens, pad_to_multiple_of=8)
        padded_share = padding_stats(padded.batches, source, target, 8)["padding_fraction"]
        packed = packing_stats(PackedBatchSampler(source, target, max_tokens, pad_to_multiple_of=8))
        packed_share = (packed["source_padding_fraction"] + packed["target_padding_fraction"]) / 2
        print(f"\nMulti30k de-en, {max_tokens} tokens: padded batches {padded_share:.1%} padding, packed "
              f"{packed['rows']} x {packed['row_length']} grids {packed_share:.1%}")
        assert packed["pairs"] == len(source) and packed_share < 0.5 * padded_share


# ---- the model ------------------------------------------------------------------------------------------------------

# Three rows of 16 tokens: one long pair alone (row 0), five short ones (row 1), three (row 2), padding at row ends.
ROWS, ROW_LENGTH = 3, 16
LENGTHS = [(15, 16), (3, 2), (2, 3), (4, 2), (1, 3), (3, 4), (6, 5), (5, 7), (4, 3)]
# Float32, dropout off: the packed and the unpacked runs sum the same terms in other orders (matrix products of other
# shapes; a softmax over a row whose masked scores add exact zeros), which moves the results by a few float32 ulps:
# up to 2.4e-6 of a gradient's largest entry on an Intel Xeon, and float32 kernels of AMD and Intel CPUs differ by
# about 1e-6 relative on their own. A pair that saw another pair's tokens would change by far more (nearly 1e-2 of its
# loss, `test_attention_across_pairs_would_fail_the_bound`), so the bound sits between: 1e-4 of each gradient's
# largest entry, 1e-5 for losses.
GRADIENT_BOUND, LOSS_BOUND = 1e-4, 1e-5


@pytest.fixture(scope="module")
def packed():
    features = features_of(LENGTHS, seed=0)
    batch = DataCollatorForPackedSeq2Seq(ROWS, ROW_LENGTH, PAD, START)(features)
    assert batch["pair_ids"][0].max() == 0 and batch["pair_ids"][1].unique().tolist() == [-1, 1, 2, 3, 4, 5]
    return features, batch


def loss_and_gradients(model, **inputs):
    """The summed loss (num_items_in_batch=1) and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    loss = model(**inputs, num_items_in_batch=1).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def alone(feature) -> dict:
    return {"input_ids": torch.tensor([feature["input_ids"]]), "labels": torch.tensor([feature["labels"]])}


def assert_gradients_close(got: dict, expected: dict, what: str) -> None:
    assert got.keys() == expected.keys()
    for name, gradient in expected.items():
        scale = gradient.abs().max().item()
        error = (got[name] - gradient).abs().max().item()
        assert error <= GRADIENT_BOUND * scale + 1e-7, f"{what}: {name} off by {error:.2e} of {scale:.2e}"


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_a_packed_batch_gives_each_pairs_loss_and_gradients_as_the_pair_alone(packed, attention, norm_first):
    model = tiny_model(seed=1, dropout=0.0, label_smoothing=0.1, attn_implementation=attention,
                       norm_first=norm_first).train()
    assert_each_pair_as_alone(model, *packed)


def test_learned_positions_and_other_head_sizes_read_each_pairs_own_positions(packed):
    """Table 3's settings in a packed batch: learned positions looked up by each token's position within its pair,
    heads whose d_k and d_v differ from d_model / h (and from each other)."""
    model = tiny_model(seed=1, dropout=0.0, label_smoothing=0.1, position_embedding_type="learned", d_k=4,
                       d_v=12).train()
    assert model.model.encoder.layers[0].self_attn.k_proj.weight.shape == (16, 32)  # 4 heads of d_k 4
    assert_each_pair_as_alone(model, *packed)


def assert_each_pair_as_alone(model, features, batch) -> None:
    """Each pair's loss from the packed batch's logits, and the gradients of a pair at a row's start, middle and
    end, are the pair's alone."""
    logits = model(**batch).logits
    for pair, feature in enumerate(features):  # every pair's loss, from the packed batch's logits
        on_target = batch["decoder_pair_ids"] == pair
        packed_loss, tokens = label_smoothed_loss(logits[on_target], batch["labels"][on_target], 0.1, PAD)
        expected, _ = label_smoothed_loss(model(**alone(feature)).logits, alone(feature)["labels"], 0.1, PAD)
        assert tokens == len(feature["labels"])
        torch.testing.assert_close(packed_loss, expected, rtol=LOSS_BOUND, atol=0)
    # the gradients of a pair at a row's start, middle and end, its loss alone in the packed batch
    for pair in (1, 3, 5, 0):  # row 1's first, middle, last; pair 0 fills row 0 alone
        labels = batch["labels"].masked_fill(batch["decoder_pair_ids"] != pair, -100)
        loss, gradients = loss_and_gradients(model, **{**batch, "labels": labels})
        expected_loss, expected = loss_and_gradients(model, **alone(features[pair]))
        torch.testing.assert_close(loss, expected_loss, rtol=LOSS_BOUND, atol=0)
        assert_gradients_close(gradients, expected, f"pair {pair}")


def test_the_whole_batch_is_the_sum_of_its_pairs_and_its_mean_counts_real_target_tokens_only(packed):
    features, batch = packed
    model = tiny_model(seed=1, dropout=0.0, label_smoothing=0.1).train()
    loss, gradients = loss_and_gradients(model, **batch)
    expected_loss, expected = 0.0, {}
    for feature in features:
        pair_loss, pair_gradients = loss_and_gradients(model, **alone(feature))
        expected_loss += pair_loss
        for name, gradient in pair_gradients.items():
            expected[name] = expected.get(name, 0) + gradient
    torch.testing.assert_close(loss, expected_loss, rtol=LOSS_BOUND, atol=0)
    assert_gradients_close(gradients, expected, "the whole batch")
    real_target_tokens = sum(target for _, target in LENGTHS)
    assert real_target_tokens < batch["labels"].numel()
    torch.testing.assert_close(model(**batch).loss, expected_loss / real_target_tokens, rtol=LOSS_BOUND, atol=0)


def test_decoder_inputs_built_from_the_labels_are_shifted_within_each_pair(packed):
    _, batch = packed
    model = tiny_model(seed=1, dropout=0.0).train()
    built = packed_batches.shift_tokens_right_per_pair(batch["labels"], batch["decoder_pair_ids"], PAD, START)
    assert torch.equal(built, batch["decoder_input_ids"])
    without = {name: tensor for name, tensor in batch.items() if name != "decoder_input_ids"}
    assert torch.equal(model(**without).loss, model(**batch).loss)


def test_attention_across_pairs_would_fail_the_bound(packed):
    """The bound can fail: the same batch with each row's pairs taken as one sequence (attention over the whole row)
    moves a pair's loss far beyond it."""
    features, batch = packed
    model = tiny_model(seed=1, dropout=0.0).train()
    row_ids = {name: torch.where(batch[name] >= 0, torch.arange(ROWS)[:, None], -1)
               for name in ("pair_ids", "decoder_pair_ids")}
    logits = model(**{**batch, **row_ids}).logits
    on_target = batch["decoder_pair_ids"] == 3  # row 1's middle pair
    leaked, _ = label_smoothed_loss(logits[on_target], batch["labels"][on_target], 0.0, PAD)
    expected, _ = label_smoothed_loss(model(**alone(features[3])).logits, alone(features[3])["labels"], 0.0, PAD)
    assert abs(leaked - expected) > 100 * LOSS_BOUND * abs(expected)


@pytest.mark.slow
def test_flex_attentions_block_masks_give_the_dense_masks_logits(packed):
    """FlexAttention (the packed path for GPUs) on a CPU, which runs its forward only (it compiles its kernel)."""
    _, batch = packed
    dense, flex = (tiny_model(seed=1, attn_implementation=attention) for attention in ("sdpa", "flex_attention"))
    with torch.no_grad():
        torch.testing.assert_close(flex(**batch).logits, dense(**batch).logits, rtol=1e-5, atol=1e-5)


def test_packed_inputs_are_checked(packed):
    _, batch = packed
    model = tiny_model(seed=1)
    with pytest.raises(ValueError, match=r"Give `pair_ids` \(a packed batch\) or `attention_mask`, not both"):
        model(**batch, attention_mask=torch.ones_like(batch["input_ids"]))
    with pytest.raises(ValueError, match=r"A packed batch \(`decoder_pair_ids`\) needs `decoder_position_ids`"):
        model(**{**batch, "decoder_position_ids": None})
    with pytest.raises(ValueError, match=r"`position_ids` has shape \(3, 15\), but its tokens are"):
        model(**{**batch, "position_ids": batch["position_ids"][:, 1:]})
    with pytest.raises(ValueError, match="pair ids for both the source and the target"):
        model(**{**batch, "decoder_pair_ids": None, "decoder_position_ids": None})
    with pytest.raises(ValueError, match=r"attention implementations \['eager', 'sdpa', 'flex_attention'\]"):
        model.config._attn_implementation = "flash_attention_2"  # its varlen arguments are another path
        model(**batch)


# ---- compiled, and the unpacked paths untouched ---------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_packed_training_compiles_one_graph_for_a_whole_run_and_evaluation_does_not_recompile_it(fresh_dynamo):
    source, target = random_lengths(400, seed=6)
    source, target = np.clip(source // 2, 2, 30), np.clip(target // 2, 2, 30)
    sampler = PackedBatchSampler(source, target, 256, seed=0)
    collator = DataCollatorForPackedSeq2Seq(sampler.rows, sampler.row_length, PAD, START)
    features = features_of(list(zip(source, target)), seed=1)
    model = tiny_model(seed=1).train()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train(batches):
        for indices in batches:
            batch = collator([features[i] for i in indices])
            # as the Trainer calls it: the real target tokens counted outside the graph
            compiled(**batch, num_items_in_batch=(batch["labels"] != -100).sum()).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    batches = list(sampler)
    assert len(batches) >= 6 and len(batches[-1]) < max(map(len, batches))  # a last, fuller or emptier, grid too
    train(batches[:3])
    assert counter.frame_count == 1
    model.eval()  # evaluation: padded batches through the compiled model, and generate()
    with torch.no_grad():
        input_ids, attention_mask = padded_batch()
        compiled(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4)
    evaluation_frames = counter.frame_count
    model.train()
    train(batches[3:])
    assert counter.frame_count == evaluation_frames  # training went on in the graph it compiled first


def test_the_packed_forward_compiles_without_a_graph_break(packed, fresh_dynamo):
    _, batch = packed
    model = tiny_model(seed=1).train()
    explanation = torch._dynamo.explain(lambda inputs: model(**inputs).loss)(batch)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_unpacked_training_evaluation_and_generate_never_take_the_packed_path(monkeypatch):
    """Unpacked inputs go through the code they went through before packing existed: with the packed masks, shift
    and positions made to fail, training, evaluation and generate() run and give what they gave."""
    model = generating_model()
    input_ids, attention_mask = padded_batch()
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    expected_tokens = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6)
    expected_beams = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6,
                                    num_beams=3)
    expected_loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def refused(*args, **kwargs):
        raise AssertionError("an unpacked call took the packed path")

    from modeling import attention_masks
    from modeling import modeling_annotated_transformer as modeling

    monkeypatch.setattr(attention_masks, "packed_attention_mask", refused)
    monkeypatch.setattr(modeling, "shift_tokens_right_per_pair", refused)
    monkeypatch.setattr(modeling.PositionLookups, "at", refused)
    assert torch.equal(model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6),
                       expected_tokens)
    assert torch.equal(model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6,
                                      num_beams=3), expected_beams)
    assert torch.equal(model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss, expected_loss)
    model.train()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()


# ---- training with --packing ----------------------------------------------------------------------------------------


def test_packing_is_a_training_flag_and_a_config_key_that_needs_a_token_budget(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("packing: true\nmax_tokens: 512\n")
    assert parse_arguments(["--config", str(config)])[2].packing is True
    assert parse_arguments(["--max_tokens", "512"])[2].packing is False
    with pytest.raises(ConfigurationError, match=r"--packing fills a token budget with pairs: give --max_tokens"):
        parse_arguments(["--config", str(config), "--per_device_train_batch_size", "8"])


def trained(output_dir, *extra, launch=("--num_processes", "1")):
    accelerate_launch(list(launch), [*QUICK, "--packing", "--max_eval_samples", "8", "--max_test_samples", "8",
                                     "--output_dir", str(output_dir), *extra])
    losses = [entry["loss"] for entry in json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
              if "loss" in entry]
    return losses, json.loads((output_dir / "train_results.json").read_text())


@pytest.mark.slow  # the default run has the one-graph test in this process
def test_packed_compiled_training_through_accelerate_launch_compiles_one_graph_for_the_whole_run(tmp_path):
    """`accelerate launch scripts/train.py --packing --torch_compile`: every training batch has the grid's one shape,
    so the run compiles one graph, and the evaluations between its steps (padded batches, generate()) compile none
    that training needs again (padded, the copy task's batches compile two: tests/test_compile.py)."""
    output_dir = tmp_path / "run"
    losses, metrics = trained(output_dir, "--torch_compile_backend", "aot_eager", "--max_steps", "24",
                              "--eval_steps", "8", "--save_steps", "8")
    assert metrics["train_compiled_graphs"] == 1
    assert len(losses) == 24 and losses[-1] < losses[0] / 2  # it trained
    args = torch.load(output_dir / "training_args.bin", weights_only=False)
    assert args.packing and args.torch_compile


@pytest.mark.slow  # two processes
def test_packed_training_on_two_processes_shares_the_grids_out(tmp_path):
    losses, metrics = trained(tmp_path / "run", "--max_steps", "12", "--eval_strategy", "no",
                              launch=("--multi_gpu", "--num_processes", "2"))
    assert len(losses) == 12 and losses[-1] < losses[0] and metrics["train_runtime"] > 0


def test_resuming_with_packing_turned_on_or_off_is_named_as_other_batches():
    from types import SimpleNamespace

    from datasets import Dataset

    from modeling.training.callbacks import EpochBatches

    pairs = Dataset.from_dict({"input_ids": [[5, 6, 2], [7, 2]], "labels": [[8, 2], [9, 9, 2]]})
    common = dict(data_seed=None, seed=0, world_size=1, gradient_accumulation_steps=1, pad_to_multiple_of=None,
                  max_tokens=1024)
    packed = EpochBatches.of(pairs, SimpleNamespace(**common, packing=True))
    padded = EpochBatches.of(pairs, SimpleNamespace(**common, packing=False))
    assert padded.differences(packed.state()["args"]) == ["--packing False (the checkpoint's: True)"]
    assert packed.differences(packed.state()["args"]) == []


@pytest.mark.slow  # about 3.5 minutes: the GPU script's steps, shrunk to the tiny model on the CPU
def test_the_gpu_script_runs_its_steps_and_writes_their_json(tmp_path):
    """benchmarks/gpu.sh with BENCHMARK_ARGS making each step a CPU smoke test: its flags are the benchmark's, each
    step writes its JSON, and FlexAttention's step is refused on a CPU in one line; DDP's scaling, as on 2 GPUs
    (GPUS=2), trains 1 and 2 processes on the CPU (SCALING_ARGS) and writes their speed-up."""
    import os
    import subprocess

    from launch_helpers import REPO_ROOT, SCRIPT_ENV

    smoke = ("--device cpu --dtype fp32 --sizes tiny --steps 2 --repetitions 1 --max_tokens 256 --vocab_size 300 "
             "--peak_matmul_size 64 --threads 1 --compile_backend aot_eager")
    result = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu.sh"), str(tmp_path), str(tmp_path / "none")],
                            env={**os.environ, **SCRIPT_ENV, "BENCHMARK_ARGS": smoke, "TOTAL_SECONDS": "900",
                                 "GPUS": "2", "SCALING_ARGS": "--device cpu --size tiny --steps 2 --warmup 1 "
                                                              "--max_tokens 256 --threads 1"},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for step in ("base", "big"):  # the compile section: ours packed eager and compiled, the padded runs eager
        results = json.loads((tmp_path / f"results-gpu-packed-{step}.json").read_text())
        steady = results["compile"]["tiny"]["label_smoothing_0.1"]["side_by_side"]["steady target tokens/s"]
        assert steady["ours packed compiled"] > 0 and steady["ours packed eager"] > 0 and steady["marian eager"] > 0
        assert steady["marian compiled"] is None and steady["ours compiled"] is None
    # Marian compiled alone, in the training section: no eager half to measure again
    results = json.loads((tmp_path / "results-gpu-packed-base-marian-compiled.json").read_text())
    steady = results["train"]["tiny"]["label_smoothing_0.1"]["steady"]
    assert results["environment"]["compiled_training"] and "compile" not in results
    assert steady["marian"]["target_tokens_per_s"] > 0 and steady["ours"] is None
    assert "flex_attention trains on CUDA only" in (tmp_path / "flex.log").read_text()
    scaling = json.loads((tmp_path / "results-gpu-ddp-scaling.json").read_text())
    assert (scaling["one"]["processes"], scaling["many"]["processes"], scaling["engine"]) == (1, 2, "ddp")
    assert scaling["speedup"] > 0 and scaling["reference"]["speedup"] == 6.72


def test_the_masks_keep_each_pair_to_itself_and_give_padding_one_key():
    pairs = torch.tensor([[0, 0, 1, 1, 1, -1]])
    allowed = packed_batches.same_pair(pairs, pairs, causal=True)(
        torch.arange(1)[:, None, None, None], torch.arange(1)[None, :, None, None],
        torch.arange(6)[None, None, :, None], torch.arange(6)[None, None, None, :])[0, 0].int().tolist()
    assert allowed == [[1, 0, 0, 0, 0, 0],
                       [1, 1, 0, 0, 0, 0],
                       [0, 0, 1, 0, 0, 0],  # pair 1 starts afresh: causal within its own tokens
                       [0, 0, 1, 1, 0, 0],
                       [0, 0, 1, 1, 1, 0],
                       [1, 0, 0, 0, 0, 0]]  # padding: the row's first key, so its softmax stays finite
    source = torch.tensor([[1, 1, 0, 0, 0, -1, -1]])
    cross = packed_batches.same_pair(pairs, source, causal=False)(
        torch.arange(1)[:, None, None, None], torch.arange(1)[None, :, None, None],
        torch.arange(6)[None, None, :, None], torch.arange(7)[None, None, None, :])[0, 0].int().tolist()
    assert cross[0] == [0, 0, 1, 1, 1, 0, 0] and cross[4] == [1, 1, 0, 0, 0, 0, 0] and cross[5] == [1, 0, 0, 0, 0, 0, 0]
