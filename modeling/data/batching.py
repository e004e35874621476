"""Token-budget batching: batches of similar-length pairs capped at `max_tokens` padded tokens.

The paper (§5.1) batches "sentence pairs ... by approximate sequence length. Each training batch contained a set of
sentence pairs containing approximately 25000 source tokens and 25000 target tokens". The Annotated Transformer's
`batch_size_fn` and fairseq's `--max-tokens` implement that as a cap on padded tokens. Here a batch of n pairs whose
longest source and target are S and T tokens (each rounded up to `pad_to_multiple_of`) costs

    token_count="max":  n * max(S, T)    each side's padded tensor holds at most max_tokens tokens (the seed's
                                         batch_size_fn, fairseq's --max-tokens, the paper's 25000 + 25000)
    token_count="sum":  n * (S + T)      encoder and decoder tensors together hold at most max_tokens tokens

Batches are built once, deterministically from `seed` (pairs sorted by source then target length, ties in random
order, then taken greedily into batches), and their order is shuffled each epoch (`set_epoch`). They are held as
arrays (`Batches`: the pairs' indices in batch order, 4 bytes a pair, and where each batch starts and ends), beside
the padded lengths (4 bytes a side), so a sampler over 45M pairs holds about 12 bytes a pair and no Python object per
pair (`modeling.data.batch_cache` keeps them beside the tokens in the `datasets` cache for the next launch). For
`num_replicas` processes, the largest batches are split in two until the batch count is a multiple of `num_replicas`
(splitting never exceeds the cap), and rank r takes every `num_replicas`-th batch from position r of the epoch's
order: every rank gets the same number of batches, and every pair appears exactly once per epoch across all ranks.

Use in a plain DataLoader: `DataLoader(tokenized, batch_sampler=sampler, collate_fn=DataCollatorForSeq2Seq(tok,
pad_to_multiple_of=8))`, with the same `pad_to_multiple_of` in the sampler and the collator so that the cap holds
for the padded tensors. Distributed, either give each process `rank=process_index`, or give `rank=None` to yield the
whole epoch (a multiple of `num_replicas` batches) and let accelerate's `BatchSamplerShard` (which the Trainer's
`accelerator.prepare` wraps around a batch sampler) hand batch i to process i % num_processes: the same split.
"""

from __future__ import annotations

import array
import hashlib
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from .datasets_internals import indices_mapping
from .freed_memory import release_freed_memory

TOKEN_COUNTS = ("max", "sum")
LENGTHS_AT_A_TIME = 1 << 20  # rows whose lengths are read at once


def pad_length(lengths, pad_to_multiple_of: int | None):
    """Lengths rounded up to a multiple of `pad_to_multiple_of` (unchanged when it is None)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if not pad_to_multiple_of:
        return lengths
    return -(-lengths // pad_to_multiple_of) * pad_to_multiple_of


def batch_cost(num_sentences: int, max_source: int, max_target: int, token_count: str = "max") -> int:
    """Padded tokens of a batch (see the module doc), from its size and its padded longest source and target."""
    if token_count == "max":
        return num_sentences * np.maximum(max_source, max_target)
    return num_sentences * (max_source + max_target)


def token_lengths(dataset, source_column: str = "input_ids", target_column: str = "labels"):
    """(source_lengths, target_lengths) as int32 arrays, read from the token lists of a tokenized `datasets.Dataset`
    (as `modeling.data.corpus.tokenize_pairs` makes) without decoding the rows into Python.

    Read a million rows at a time into arrays made once: no whole-column Arrow buffer is made, which Arrow's memory
    pool would keep after it is freed (its allocator returns freed pages to the system only when asked)."""
    import pyarrow.compute as pc

    for column in (source_column, target_column):
        if column not in dataset.column_names:
            raise KeyError(f"column {column!r} not in the dataset; it has {dataset.column_names}")
    # the lengths of the stored rows, then the rows a `select`/`filter`/`shuffle` left (their indices mapping): reading
    # the mapped rows themselves takes each token list row by row, seconds per million pairs
    indices = indices_mapping(dataset)
    lengths = []
    for column in (source_column, target_column):
        values = dataset.data.column(column)
        stored = np.empty(len(values), dtype=np.int32)  # a token list's length is an int32 in Arrow
        for start in range(0, len(values), LENGTHS_AT_A_TIME):
            part = pc.list_value_length(values.slice(start, LENGTHS_AT_A_TIME))
            stored[start:start + len(part)] = part.to_numpy()
        lengths.append(stored if indices is None else stored[indices])
    release_freed_memory()  # the parts Arrow computed
    return tuple(lengths)


def lengths_digest(lengths) -> str:
    """SHA-256 of token lengths (`token_lengths`' arrays, in order), each as little-endian int64, a million at a
    time: what a checkpoint records of its training pairs (`EpochBatches`), which `batch_cache` keeps beside the
    batches so that a launch on cached batches need not read the lengths again."""
    digest = hashlib.sha256()
    for values in lengths:
        for start in range(0, len(values), 2**20):
            digest.update(np.asarray(values[start:start + 2**20]).astype("<i8").tobytes())
    return digest.hexdigest()


def index_dtype(count: int):
    """The smallest of int32 and int64 that indexes `count` pairs."""
    return np.int32 if count < 2**31 else np.int64


SORTED_AT_A_TIME = 1 << 20  # pairs placed at a time by `length_order`
_MOST_LENGTH_BINS = 1 << 22


def length_order(source: np.ndarray, target: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """`pairs` (indices into the lengths) stably sorted by source length, then target length: what
    `pairs[np.lexsort((target[pairs], source[pairs]))]` gives, in `pairs`' own type.

    A counting sort, a million pairs at a time: each pair goes straight to its place among the pairs of its
    (source, target) lengths, so no whole-corpus int64 array is made (lexsort's indices and keys are 24 bytes a pair
    beside the 4 of the result). Lengths too varied for a table of their pairs (over 4M distinct (source, target))
    take lexsort."""
    if not len(pairs):
        return pairs.copy()
    top = int(max(source.max(), target.max()))
    if top >= _MOST_LENGTH_BINS:
        return pairs[np.lexsort((target[pairs], source[pairs]))]
    # each length's rank among the lengths present, so that the bins are the (source, target) pairs that can occur
    source_rank = (np.cumsum(np.bincount(source, minlength=top + 1) > 0) - 1).astype(np.int32)
    target_rank = (np.cumsum(np.bincount(target, minlength=top + 1) > 0) - 1).astype(np.int32)
    width = int(target_rank[-1]) + 1
    bins = (int(source_rank[-1]) + 1) * width
    if bins > _MOST_LENGTH_BINS:
        return pairs[np.lexsort((target[pairs], source[pairs]))]

    def keys(chunk):  # int32: fewer than 2**22 bins
        return source_rank[source[chunk]] * np.int32(width) + target_rank[target[chunk]]

    chunks = [pairs[at:at + SORTED_AT_A_TIME] for at in range(0, len(pairs), SORTED_AT_A_TIME)]
    counts = np.zeros(bins, dtype=np.int64)
    for chunk in chunks:
        counts += np.bincount(keys(chunk), minlength=bins)
    place = np.cumsum(counts) - counts  # where the next pair of each bin goes
    order = np.empty_like(pairs)
    for chunk in chunks:
        key = keys(chunk)
        by_key = np.argsort(key, kind="stable")
        sorted_key = key[by_key]
        among_its_key = np.arange(len(chunk)) - np.searchsorted(sorted_key, sorted_key)  # earlier pairs of its key
        order[place[sorted_key] + among_its_key] = chunk[by_key]
        place += np.bincount(key, minlength=bins)
    return order


class Batches(Sequence):
    """Batches of pair indices held as arrays: batch b is `indices[starts[b]:ends[b]]`. A batch reads as a list of
    Python ints (made when read); the batches compare, slice and iterate as a list of such lists."""

    def __init__(self, indices: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        self.indices, self.starts, self.ends = indices, np.asarray(starts, np.int64), np.asarray(ends, np.int64)

    @classmethod
    def from_lists(cls, batches: Sequence[Sequence[int]]) -> "Batches":
        sizes = np.fromiter((len(batch) for batch in batches), dtype=np.int64, count=len(batches))
        ends = np.cumsum(sizes)
        flat = np.fromiter((index for batch in batches for index in batch), dtype=np.int64, count=int(sizes.sum()))
        return cls(flat.astype(index_dtype(len(flat)), copy=False), ends - sizes, ends)

    @property
    def sizes(self) -> np.ndarray:
        return self.ends - self.starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[each] for each in range(*position.indices(len(self)))]
        return self.indices[self.starts[position]:self.ends[position]].tolist()

    def __iter__(self):
        for start, end in zip(self.starts.tolist(), self.ends.tolist()):
            yield self.indices[start:end].tolist()

    def __eq__(self, other) -> bool:
        if isinstance(other, Batches):
            return len(self) == len(other) and np.array_equal(self.sizes, other.sizes) and all(
                np.array_equal(self.indices[a:b], other.indices[c:d])
                for a, b, c, d in zip(self.starts, self.ends, other.starts, other.ends))
        return isinstance(other, Sequence) and list(self) == [list(batch) for batch in other]

    def __repr__(self) -> str:
        return f"Batches({len(self)} batches of {int(self.sizes.sum())} pairs)"


def _int32_lengths(lengths) -> np.ndarray:
    """Token counts as a read-only int32 array: a view of the array given when it is one (a large corpus's lengths
    are not copied; `token_lengths` makes a new one each call), else a new one."""
    lengths = np.asarray(lengths)
    if lengths.dtype.kind not in "iu":
        lengths = lengths.astype(np.int64)
    if lengths.size and lengths.max() >= 2**31:
        raise ValueError(f"a length of {lengths.max()} tokens is beyond what the batches hold (2**31 - 1)")
    lengths = lengths.astype(np.int32, copy=False).view()
    lengths.flags.writeable = False
    return lengths


def _padded(lengths: np.ndarray, pad_to_multiple_of: int) -> np.ndarray:
    """`pad_length` in int32 (which makes int64 arrays), in one new read-only array."""
    padded = np.negative(lengths)
    np.floor_divide(padded, pad_to_multiple_of, out=padded)
    np.multiply(padded, -pad_to_multiple_of, out=padded)
    padded.flags.writeable = False
    return padded


class PairsOverBudgetError(ValueError):
    """Pairs that exceed the token budget on their own; `indices`: their positions in the lengths given."""

    def __init__(self, message: str, indices: list[int]):
        super().__init__(message)
        self.indices = indices


SAMPLER_DEFAULTS = dict(shuffle=True, seed=0, num_replicas=1, rank=0, pad_to_multiple_of=None, token_count="max",
                        max_sentences=None)  # `TokenBudgetBatchSampler`'s keywords


def sampler_settings(settings: dict) -> dict:
    """`settings` (keywords of `TokenBudgetBatchSampler`) with the defaults of those not given."""
    unknown = set(settings) - set(SAMPLER_DEFAULTS)
    if unknown:
        raise TypeError(f"TokenBudgetBatchSampler has no settings {sorted(unknown)}")
    return {**SAMPLER_DEFAULTS, **settings}


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices whose padded cost is at most `max_tokens` (see the module doc).

    Args:
        source_lengths, target_lengths: token counts per pair (e.g. from `token_lengths`); `target_lengths=None`
            counts the source only. int32 arrays are kept as given (read-only views, not copies).
        max_tokens: the cap on a batch's padded tokens. A pair that alone exceeds it is an error.
        shuffle: shuffle the batch order every epoch (and break length ties randomly when filling the batches).
        seed: the seed every process must share; the epoch order comes from (seed, epoch).
        num_replicas, rank: the number of processes and this one's index; `rank=None` yields all batches.
        pad_to_multiple_of: round padded lengths up to this multiple (8 suits tensor cores), as the collator does.
        token_count: "max" (the seed's and fairseq's rule) or "sum" (source plus target).
        max_sentences: optional cap on the number of pairs per batch.
    """

    lengths_digest: str | None = None  # `lengths_digest` of the lengths it was built from, where its builder kept it

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int] | None,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int | None = 0,
        pad_to_multiple_of: int | None = None,
        token_count: str = "max",
        max_sentences: int | None = None,
    ):
        source = _int32_lengths(source_lengths)
        target = np.zeros_like(source) if target_lengths is None else _int32_lengths(target_lengths)
        if source.ndim != 1 or source.shape != target.shape:
            raise ValueError(f"need one source and one target length per pair, got {source.shape} and {target.shape}")
        if len(source) and min(source.min(), target.min()) < 0:
            raise ValueError("lengths must be >= 0")
        self._set_settings(max_tokens, shuffle, seed, num_replicas, rank, pad_to_multiple_of, token_count,
                           max_sentences)
        if pad_to_multiple_of:
            source, target = _padded(source, pad_to_multiple_of), _padded(target, pad_to_multiple_of)
        self.padded_source_lengths, self.padded_target_lengths = source, target
        self._check_fits()
        self.batches = self._build_batches()
        release_freed_memory()  # the sort's and the batch filling's temporaries

    def _set_settings(self, max_tokens, shuffle, seed, num_replicas, rank, pad_to_multiple_of, token_count,
                      max_sentences) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be >= 1")
        if num_replicas < 1 or not (rank is None or 0 <= rank < num_replicas):
            raise ValueError(f"need num_replicas >= 1 and 0 <= rank < num_replicas, got {num_replicas=}, {rank=}")
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of={pad_to_multiple_of} must be >= 1 or None")
        if token_count not in TOKEN_COUNTS:
            raise ValueError(f"token_count={token_count!r}; choose one of {TOKEN_COUNTS}")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences={max_sentences} must be >= 1 or None")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, 0
        self.pad_to_multiple_of, self.token_count, self.max_sentences = pad_to_multiple_of, token_count, max_sentences
        self.batch_size, self.drop_last = None, False  # what accelerate's BatchSamplerShard reads

    @classmethod
    def from_batches(cls, padded_source_lengths: np.ndarray, padded_target_lengths: np.ndarray, batches: Batches,
                     max_tokens: int, **settings) -> "TokenBudgetBatchSampler":
        """The sampler whose padded lengths and batches an earlier one with the same `max_tokens` and `settings` (the
        constructor's keywords) built, as `modeling.data.batch_cache` keeps them: nothing is sorted or filled again."""
        sampler = cls.__new__(cls)
        sampler._set_settings(max_tokens, **sampler_settings(settings))
        sampler.padded_source_lengths, sampler.padded_target_lengths = padded_source_lengths, padded_target_lengths
        if len(batches) % sampler.num_replicas or len(batches.indices) != len(padded_source_lengths):
            raise ValueError(f"{batches} do not fit {len(padded_source_lengths)} pairs and {sampler.num_replicas} "
                             "processes")
        sampler.batches = batches
        return sampler

    def _check_fits(self) -> None:
        costs = batch_cost(1, self.padded_source_lengths, self.padded_target_lengths, self.token_count)
        too_long = np.flatnonzero(costs > self.max_tokens)
        if len(too_long):
            examples = ", ".join(
                f"index {i} (source {self.padded_source_lengths[i]}, target {self.padded_target_lengths[i]} tokens)"
                for i in too_long[:3]
            )
            padding = f", padded to multiples of {self.pad_to_multiple_of}" if self.pad_to_multiple_of else ""
            raise PairsOverBudgetError(
                f"{len(too_long)} pair(s) exceed max_tokens={self.max_tokens} on their own "
                f"(token_count={self.token_count!r}{padding}): {examples}",
                too_long.tolist(),
            )

    def _build_batches(self) -> Batches:
        """The batches, their count a multiple of `num_replicas`; what a subclass of other batches replaces."""
        return self._split_for_replicas(self._fill_batches())

    def _fill_batches(self) -> Batches:
        """Sort by source length, then target length (as fairseq), and fill each batch greedily up to the cap: a batch
        ends before the first pair that would take its padded cost over the cap (or its size over max_sentences).
        The cost of the first k pairs only grows with k, so it is found in a window of the sorted lengths at a time,
        in NumPy (the window doubles until it holds the batch's end)."""
        source, target = self.padded_source_lengths, self.padded_target_lengths
        count = len(source)
        rng = np.random.default_rng([self.seed, 2**32 - 1])  # a stream separate from the per-epoch orders
        tie_break = np.arange(count, dtype=index_dtype(count))
        if self.shuffle:
            rng.shuffle(tie_break)  # as `rng.permutation(count)`, in the index's own type
        order = length_order(source, target, tie_break)
        del tie_break
        most = self.max_sentences or count
        ends, start, window = array.array("q"), 0, 64  # 8 bytes a batch
        while start < count:
            width = min(window, count - start, most)
            pairs = order[start:start + width]
            longest_source = np.maximum.accumulate(source[pairs]).astype(np.int64)
            longest_target = np.maximum.accumulate(target[pairs]).astype(np.int64)
            costs = batch_cost(np.arange(1, width + 1), longest_source, longest_target, self.token_count)
            over = np.flatnonzero(costs > self.max_tokens)
            if len(over):
                size = max(1, int(over[0]))  # a pair alone always fits (`_check_fits`)
            elif width < min(count - start, most):
                window *= 2
                continue
            else:
                size = width
            start += size
            ends.append(start)
            window = max(64, 2 * size)
        ends = np.frombuffer(ends, dtype=np.int64) if len(ends) else np.zeros(0, dtype=np.int64)
        return Batches(order, np.concatenate([[0], ends[:-1]]).astype(np.int64), ends)

    def _split_for_replicas(self, batches: Batches) -> Batches:
        """Split the largest batch in two (the first such, its shorter half staying in its place and the other going
        last) until every replica gets the same number; nothing is duplicated."""
        needed = -len(batches) % self.num_replicas
        if not needed:
            return batches
        starts, ends = list(batches.starts), list(batches.ends)  # one entry per batch; a few splits
        sizes = batches.sizes
        for _ in range(needed):
            position = int(np.argmax(sizes))
            if sizes[position] < 2:
                raise ValueError(
                    f"cannot give {self.num_replicas} processes the same number of batches: the {len(starts)} "
                    f"batches hold one pair each ({int(sizes.sum())} pairs) and cannot be split further"
                )
            middle = starts[position] + int(sizes[position]) // 2  # the shorter half stays: pairs are in length order
            starts.append(middle)
            ends.append(ends[position])
            ends[position] = middle
            sizes = np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64)
        return Batches(batches.indices, np.asarray(starts, np.int64), np.asarray(ends, np.int64))

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose batch order `__iter__` yields (same on every process)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.batches))
        else:
            order = np.arange(len(self.batches))
        if self.rank is not None:
            order = order[self.rank :: self.num_replicas]
        for position in order.tolist():
            yield self.batches[position]

    def __len__(self) -> int:
        return len(self.batches) if self.rank is None else len(self.batches) // self.num_replicas


def padding_stats(
    batches: Sequence[Sequence[int]],
    source_lengths: Sequence[int],
    target_lengths: Sequence[int],
    pad_to_multiple_of: int | None = None,
) -> dict[str, int | float]:
    """How much of the padded source and target tensors is padding, over a list of batches.

    Returns the number of batches and pairs, `tokens` (real source + target tokens), `padded_tokens`
    (sum of n * (S + T) over batches, S and T the batch's padded longest source and target) and
    `padding_fraction` = 1 - tokens / padded_tokens, plus the largest batch's `max_batch_padded_tokens`."""
    source, target = np.asarray(source_lengths, dtype=np.int64), np.asarray(target_lengths, dtype=np.int64)
    padded_source, padded_target = pad_length(source, pad_to_multiple_of), pad_length(target, pad_to_multiple_of)
    tokens = padded = largest = pairs = 0
    for batch in batches:
        batch = np.asarray(batch, dtype=np.int64)
        cost = len(batch) * int(padded_source[batch].max() + padded_target[batch].max())
        tokens += int(source[batch].sum() + target[batch].sum())
        padded, largest, pairs = padded + cost, max(largest, cost), pairs + len(batch)
    return {
        "batches": len(batches),
        "pairs": pairs,
        "tokens": tokens,
        "padded_tokens": padded,
        "padding_fraction": 1 - tokens / padded if padded else 0.0,
        "max_batch_padded_tokens": largest,
    }
