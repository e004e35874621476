"""Token-budget batching: the cap holds, every pair appears once per epoch across ranks, padding waste is low."""

import os

import numpy as np
import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from transformers import DataCollatorForSeq2Seq

from modeling.data import batching, freed_memory
from modeling.data.batching import TokenBudgetBatchSampler, batch_cost, pad_length, padding_stats, token_lengths
from modeling.data.corpus import synthetic_task_dataset, tokenize_pairs
from modeling.data.packing import PackedBatchSampler
from modeling.tokenization import train_tokenizer


def random_lengths(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, 80, n)
    return source, np.maximum(1, (source * rng.uniform(0.6, 1.5, n)).astype(int))


def padded_cost(batch, source, target, pad_to_multiple_of, token_count):
    longest_source = pad_length(source[batch], pad_to_multiple_of).max()
    longest_target = pad_length(target[batch], pad_to_multiple_of).max()
    return batch_cost(len(batch), longest_source, longest_target, token_count)


@pytest.mark.parametrize("token_count", ["max", "sum"])
@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
@pytest.mark.parametrize("num_replicas", [1, 2, 3])
def test_cap_holds_and_each_pair_appears_once_per_epoch_across_ranks(token_count, pad_to_multiple_of, num_replicas):
    source, target = random_lengths()
    settings = dict(seed=5, num_replicas=num_replicas, pad_to_multiple_of=pad_to_multiple_of, token_count=token_count)
    samplers = [TokenBudgetBatchSampler(source, target, 1000, rank=rank, **settings) for rank in range(num_replicas)]
    for epoch in (0, 1):
        shares = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
            assert len(shares[-1]) == len(sampler)
        assert len({len(share) for share in shares}) == 1, "every rank gets the same number of batches"
        batches = [batch for share in shares for batch in share]
        assert all(padded_cost(batch, source, target, pad_to_multiple_of, token_count) <= 1000 for batch in batches)
        assert sorted(index for batch in batches for index in batch) == list(range(len(source)))


def test_batch_count_is_made_divisible_by_splitting_batches_not_by_duplicating():
    source, target = random_lengths(997)
    single = TokenBudgetBatchSampler(source, target, 700, seed=1)
    for num_replicas in (2, 3, 4, 7):
        split = TokenBudgetBatchSampler(source, target, 700, seed=1, num_replicas=num_replicas, rank=None)
        assert len(split.batches) % num_replicas == 0
        assert len(single.batches) <= len(split.batches) < len(single.batches) + num_replicas
        assert sorted(i for batch in split.batches for i in batch) == list(range(997))


def test_epochs_shuffle_batch_order_deterministically_from_the_seed():
    source, target = random_lengths()
    first, again = (TokenBudgetBatchSampler(source, target, 1000, seed=3) for _ in range(2))
    epoch0 = list(first)
    assert epoch0 == list(again)  # same seed, same epoch: same batches in the same order
    first.set_epoch(1)
    epoch1 = list(first)
    assert epoch1 != epoch0 and sorted(map(tuple, epoch1)) == sorted(map(tuple, epoch0))
    assert list(TokenBudgetBatchSampler(source, target, 1000, seed=4)) != epoch0
    fixed = TokenBudgetBatchSampler(source, target, 1000, shuffle=False)
    fixed.set_epoch(7)
    assert list(fixed) == fixed.batches  # in length order: sorted by source length, then target length
    assert all(source[a].max() <= source[b].min() for a, b in zip(fixed.batches, fixed.batches[1:]))


@pytest.mark.parametrize("sampler", [TokenBudgetBatchSampler, PackedBatchSampler])
def test_rank_none_with_accelerate_sharding_gives_the_same_shares(sampler):
    """Padded batches and packed grids alike: accelerate's sharding of all the batches gives each process its own."""
    source, target = random_lengths()
    everything = sampler(source, target, 1000, seed=2, num_replicas=2, rank=None)
    everything.set_epoch(3)
    for rank in range(2):
        own = sampler(source, target, 1000, seed=2, num_replicas=2, rank=rank)
        own.set_epoch(3)
        sharded = BatchSamplerShard(everything, num_processes=2, process_index=rank)
        assert list(sharded) == list(own) and len(sharded) == len(own)


def test_a_pair_over_the_budget_is_a_clear_error():
    source, target = np.array([5, 10, 40, 7]), np.array([5, 12, 30, 50])
    with pytest.raises(ValueError, match=r"2 pair\(s\) exceed max_tokens=32 .*index 2 \(source 40, target 30"):
        TokenBudgetBatchSampler(source, target, 32)
    with pytest.raises(ValueError, match=r"index 1 \(source 16, target 16 tokens\)"):
        TokenBudgetBatchSampler(source[:2], target[:2], 24, token_count="sum", pad_to_multiple_of=8)
    with pytest.raises(ValueError, match="cannot give 2 processes the same number of batches"):
        TokenBudgetBatchSampler([30, 30, 30], [30, 30, 30], 40, num_replicas=2)
    with pytest.raises(ValueError, match="token_count='both'"):
        TokenBudgetBatchSampler([1], [1], 10, token_count="both")


def test_max_sentences_caps_the_batch_size():
    source, target = random_lengths()
    sampler = TokenBudgetBatchSampler(source, target, 100_000, max_sentences=16)
    assert max(map(len, sampler.batches)) == 16


def test_plain_dataloader_batches_respect_the_cap_after_collation():
    corpus = synthetic_task_dataset("reverse", 600, 10, 10, min_length=1, max_length=40)
    tokenizer = train_tokenizer(corpus["train"]["source"], vocab_size=270)
    train = tokenize_pairs(corpus, tokenizer)["train"]
    source, target = token_lengths(train)
    assert source.tolist() == [len(ids) for ids in train["input_ids"]]
    sampler = TokenBudgetBatchSampler(source, target, 512, pad_to_multiple_of=8, token_count="sum")
    collator = DataCollatorForSeq2Seq(tokenizer, pad_to_multiple_of=8)
    loader = torch.utils.data.DataLoader(train, batch_sampler=sampler, collate_fn=collator)
    rows = 0
    for batch in loader:
        size, source_width = batch["input_ids"].shape
        target_width = batch["labels"].shape[1]
        assert source_width % 8 == 0 and target_width % 8 == 0
        assert size * (source_width + target_width) <= 512
        rows += size
    assert rows == len(train) and len(loader) == len(sampler)


def test_padding_waste_on_multi30k_is_far_below_fixed_size_random_batches(multi30k_de_en, multi30k_tokenizer):
    backend = multi30k_tokenizer.tokenizer.backend_tokenizer  # the fastest way to count tokens (</s> included)
    source, target = (
        np.array([len(encoding.ids) for encoding in backend.encode_batch(multi30k_de_en["train"][column][:])])
        for column in ("source", "target")
    )
    print(f"\nMulti30k de-en train: {len(source)} pairs, {source.mean():.1f} source, {target.mean():.1f} target tokens")
    for pad_to_multiple_of in (None, 8):
        sampler = TokenBudgetBatchSampler(source, target, 4096, seed=0, pad_to_multiple_of=pad_to_multiple_of)
        budget = padding_stats(sampler.batches, source, target, pad_to_multiple_of)
        batch_size = round(budget["pairs"] / budget["batches"])  # the same mean batch size, drawn at random
        order = np.random.default_rng(0).permutation(len(source))
        fixed = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        random = padding_stats(fixed, source, target, pad_to_multiple_of)
        print(
            f"pad_to_multiple_of={pad_to_multiple_of}: token budget 4096 -> {budget['batches']} batches, "
            f"padding {budget['padding_fraction']:.1%}; fixed-size random batches of {batch_size} -> "
            f"{random['batches']} batches, padding {random['padding_fraction']:.1%}"
        )
        assert budget["pairs"] == len(source) and budget["tokens"] == random["tokens"]
        assert budget["padding_fraction"] < 0.5 * random["padding_fraction"]
    assert budget["padding_fraction"] < 0.25 and random["padding_fraction"] > 0.5


def greedy_batches(source, target, max_tokens, order, token_count="max", max_sentences=None):
    """The greedy fill one pair at a time, in `order`: a batch ends before the pair that would take it over."""
    batches, batch, longest_source, longest_target = [], [], 0, 0
    for index in order:
        new_source, new_target = max(longest_source, source[index]), max(longest_target, target[index])
        if batch and (len(batch) == max_sentences
                      or batch_cost(len(batch) + 1, new_source, new_target, token_count) > max_tokens):
            batches.append(batch)
            batch, new_source, new_target = [], source[index], target[index]
        batch.append(index)
        longest_source, longest_target = new_source, new_target
    return batches + ([batch] if batch else [])


@pytest.mark.parametrize("token_count, max_sentences", [("max", None), ("sum", None), ("max", 7)])
def test_the_batches_are_the_greedy_fill_of_the_length_order(token_count, max_sentences):
    """The windowed NumPy fill ends each batch where the pair-by-pair greedy fill does."""
    source, target = random_lengths(5000, seed=2)
    sampler = TokenBudgetBatchSampler(source, target, 900, seed=1, shuffle=False, token_count=token_count,
                                      max_sentences=max_sentences)
    order = np.lexsort((target, source))  # without shuffling, ties in index order
    assert sampler.batches == greedy_batches(source, target, 900, order.tolist(), token_count, max_sentences)


def test_a_sampler_holds_about_12_bytes_a_pair_and_no_python_object_per_pair():
    source, target = random_lengths(200_000, seed=3)
    sampler = TokenBudgetBatchSampler(source, target, 2048, seed=0, num_replicas=3, rank=None)
    batches = sampler.batches
    held = (sampler.padded_source_lengths.nbytes + sampler.padded_target_lengths.nbytes + batches.indices.nbytes
            + batches.starts.nbytes + batches.ends.nbytes)
    assert held / len(source) < 13 and batches.indices.dtype == np.int32
    assert isinstance(batches[0], list) and len(batches[:3]) == 3 and sum(map(len, batches)) == len(source)


@pytest.mark.parametrize("spread", ["narrow", "too many length pairs for a table"])
def test_the_length_order_is_lexsorts_stable_order_a_chunk_at_a_time(monkeypatch, spread):
    """The counting sort places pairs across chunk boundaries as one stable sort does, ties in the order given; and
    the shuffled tie break is `rng.permutation`'s, so the batches are those samplers made before it."""
    monkeypatch.setattr(batching, "SORTED_AT_A_TIME", 1000)
    rng = np.random.default_rng(5)
    high = 40 if spread == "narrow" else 5000
    source, target = (rng.integers(0, high, 7777).astype(np.int32) for _ in range(2))
    pairs = rng.permutation(7777).astype(np.int32)
    order = batching.length_order(source, target, pairs)
    assert order.dtype == np.int32 and np.array_equal(order, pairs[np.lexsort((target[pairs], source[pairs]))])
    sampler = TokenBudgetBatchSampler(source + 1, target + 1, 20000, seed=4)
    tie_break = np.random.default_rng([4, 2**32 - 1]).permutation(7777)
    assert np.array_equal(sampler.batches.indices, tie_break[np.lexsort((target[tie_break], source[tie_break]))])


def test_int32_lengths_are_kept_not_copied_and_padding_leaves_them_as_given():
    source, target = (lengths.astype(np.int32) for lengths in random_lengths(1000, seed=6))
    given = source.copy()
    sampler = TokenBudgetBatchSampler(source, target, 2048)
    assert np.shares_memory(sampler.padded_source_lengths, source)
    assert not sampler.padded_source_lengths.flags.writeable
    padded = TokenBudgetBatchSampler(source, target, 2048, pad_to_multiple_of=8)
    assert np.array_equal(source, given) and np.array_equal(padded.padded_source_lengths, pad_length(source, 8))


def _private_mib():
    from tools.benchmarking.measure import private_bytes

    return private_bytes(os.getpid()) / 2**20


@pytest.mark.skipif(freed_memory._malloc_trim() is None, reason="glibc's malloc_trim only")
def test_freed_heap_arrays_go_back_to_the_system():
    """NumPy arrays below glibc's (raised) mmap threshold come from the heap; freed between live ones they stay in the
    process's private memory until `release_freed_memory` trims the heap (what the sampler's sort leaves)."""
    big = np.ones(8 << 20, np.uint8)
    del big  # a freed mmapped array raises the threshold above the 1 MiB arrays below
    arrays = [np.ones(1 << 20, np.uint8) for _ in range(128)]
    del arrays[::2]  # 64 MiB freed between the arrays still alive
    held = _private_mib()
    freed_memory.release_freed_memory()
    assert held - _private_mib() > 48
    assert len(arrays) == 64  # alive until here


def test_freed_arrow_buffers_go_back_to_the_system():
    """Arrow's pool keeps the pages of the buffers `pyarrow.compute` made (as `token_lengths` reads them) until
    asked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pa.array(np.arange(1 << 23, dtype=np.int64))
    start = _private_mib()
    parts = [pc.add(values.slice(at, 1 << 20), 1) for at in range(0, 1 << 23, 1 << 20)]  # 64 MiB
    del parts
    held = _private_mib()
    freed_memory.release_freed_memory()
    assert held - start > 48
    assert held - _private_mib() > 48
