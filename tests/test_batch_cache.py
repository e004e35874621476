"""Token-budget batches kept beside the tokens in the `datasets` cache: read back equal, keyed by tokens, settings."""

from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, load_from_disk

from modeling.data import batch_cache
from modeling.data.batch_cache import cached_token_budget_sampler
from modeling.data.batching import TokenBudgetBatchSampler, token_lengths


@pytest.fixture
def tokens(tmp_path):
    """3,000 pairs of token lists, read back from disk as a cached dataset is (it has cache files)."""
    rng = np.random.default_rng(0)
    rows = {
        "input_ids": [list(range(n)) for n in rng.integers(1, 40, 3000)],
        "labels": [list(range(n)) for n in rng.integers(1, 40, 3000)],
    }
    Dataset.from_dict(rows).save_to_disk(tmp_path / "tokens")
    return load_from_disk(tmp_path / "tokens")


def batch_files(dataset):
    return sorted(path.name for path in _folder(dataset).glob("batches-*"))


def _folder(dataset):
    return Path(dataset.cache_files[0]["filename"]).parent


def test_read_back_equal_to_built_and_without_reading_lengths(tokens, monkeypatch):
    settings = dict(seed=3, num_replicas=2, rank=None, pad_to_multiple_of=8)
    built = TokenBudgetBatchSampler(*token_lengths(tokens), 500, **settings)
    first = cached_token_budget_sampler(tokens, 500, **settings)
    assert len(batch_files(tokens)) == 6  # five arrays and the manifest

    def no_lengths(*args, **kwargs):
        raise AssertionError("the cached batches read the token lengths")

    monkeypatch.setattr(batch_cache, "token_lengths", no_lengths)
    again = cached_token_budget_sampler(tokens, 500, **settings)
    assert isinstance(again.batches.indices, np.memmap)  # file-backed, not private memory
    for sampler in (first, again):
        assert sampler.batches == built.batches and len(sampler) == len(built)
        assert np.array_equal(sampler.padded_source_lengths, built.padded_source_lengths)
        assert np.array_equal(sampler.padded_target_lengths, built.padded_target_lengths)
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            built.set_epoch(epoch)
            assert list(sampler) == list(built)
    # every rank reads the same batches and takes its share
    ranks = [cached_token_budget_sampler(tokens, 500, **{**settings, "rank": rank}) for rank in (0, 1)]
    assert sorted(i for sampler in ranks for batch in sampler for i in batch) == list(range(len(tokens)))


def test_other_settings_or_tokens_are_other_batches(tokens):
    base = cached_token_budget_sampler(tokens, 500)
    assert cached_token_budget_sampler(tokens, 500, seed=0, shuffle=True, rank=None).batches == base.batches
    assert len(batch_files(tokens)) == 6  # the defaults named or not, and any rank: the same key
    other_seed = cached_token_budget_sampler(tokens, 500, seed=1)
    other_budget = cached_token_budget_sampler(tokens, 300, seed=0)
    assert len(batch_files(tokens)) == 3 * 6
    assert other_seed.batches != base.batches
    assert other_seed.batches == TokenBudgetBatchSampler(*token_lengths(tokens), 500, seed=1).batches
    assert other_budget.batches == TokenBudgetBatchSampler(*token_lengths(tokens), 300, seed=0).batches
    fewer = tokens.select(range(1000))  # another fingerprint: its own batches, over its own 1,000 pairs
    expected = TokenBudgetBatchSampler(*token_lengths(fewer), 500).batches
    assert cached_token_budget_sampler(fewer, 500).batches == expected
    assert len(batch_files(tokens)) == 4 * 6


@pytest.mark.parametrize("damage", ["manifest", "indices"])
def test_an_incomplete_cache_is_built_again(tokens, damage):
    built = cached_token_budget_sampler(tokens, 500)
    folder = _folder(tokens)
    if damage == "manifest":  # a run stopped before it wrote the manifest
        next(folder.glob("batches-*.json")).unlink()
    else:  # a file cut short
        path = next(folder.glob("batches-*.indices.npy"))
        path.write_bytes(path.read_bytes()[:200])
    again = cached_token_budget_sampler(tokens, 500)
    assert again.batches == built.batches
    assert len(batch_files(tokens)) == 6
    assert cached_token_budget_sampler(tokens, 500).batches == built.batches  # and kept again, whole


def test_tokens_in_memory_are_indexed_every_time(tokens):
    in_memory = Dataset.from_dict(tokens[:500])
    assert not in_memory.cache_files
    sampler = cached_token_budget_sampler(in_memory, 500)
    assert sampler.batches == TokenBudgetBatchSampler(*token_lengths(in_memory), 500).batches
    assert not isinstance(sampler.batches.indices, np.memmap)


def test_from_batches_refuses_batches_of_other_pairs(tokens):
    built = TokenBudgetBatchSampler(*token_lengths(tokens), 500)
    with pytest.raises(ValueError, match="do not fit 10 pairs"):
        TokenBudgetBatchSampler.from_batches(built.padded_source_lengths[:10], built.padded_target_lengths[:10],
                                             built.batches, 500)
    with pytest.raises(TypeError, match="no settings"):
        TokenBudgetBatchSampler.from_batches(built.padded_source_lengths, built.padded_target_lengths,
                                             built.batches, 500, ranks=2)
