"""Token-budget batching: batches of similar-length pairs capped at `max_tokens` padded tokens.

The paper (§5.1) batches "sentence pairs ... by approximate sequence length. Each training batch contained a set of
sentence pairs containing approximately 25000 source tokens and 25000 target tokens". The Annotated Transformer's
`batch_size_fn` and fairseq's `--max-tokens` implement that as a cap on padded tokens. Here a batch of n pairs whose
longest source and target are S and T tokens (each rounded up to `pad_to_multiple_of`) costs

    token_count="max":  n * max(S, T)    each side's padded tensor holds at most max_tokens tokens (the seed's
                                         batch_size_fn, fairseq's --max-tokens, the paper's 25000 + 25000)
    token_count="sum":  n * (S + T)      encoder and decoder tensors together hold at most max_tokens tokens

Batches are built once, deterministically from `seed` (pairs sorted by source then target length, ties in random
order, then packed greedily), and their order is shuffled each epoch (`set_epoch`). For `num_replicas` processes,
the largest batches are split in two until the batch count is a multiple of `num_replicas` (splitting never exceeds
the cap), and rank r takes every `num_replicas`-th batch from position r of the epoch's order: every rank gets the
same number of batches, and every pair appears exactly once per epoch across all ranks.

Use in a plain DataLoader: `DataLoader(tokenized, batch_sampler=sampler, collate_fn=DataCollatorForSeq2Seq(tok,
pad_to_multiple_of=8))`, with the same `pad_to_multiple_of` in the sampler and the collator so that the cap holds
for the padded tensors. Distributed, either give each process `rank=process_index`, or give `rank=None` to yield the
whole epoch (a multiple of `num_replicas` batches) and let accelerate's `BatchSamplerShard` (which the Trainer's
`accelerator.prepare` wraps around a batch sampler) hand batch i to process i % num_processes: the same split.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

TOKEN_COUNTS = ("max", "sum")


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
    """(source_lengths, target_lengths) as int64 arrays, read from the token lists of a tokenized `datasets.Dataset`
    (as `modeling.data.corpus.tokenize_pairs` makes) without decoding the rows into Python."""
    import pyarrow.compute as pc

    for column in (source_column, target_column):
        if column not in dataset.column_names:
            raise KeyError(f"column {column!r} not in the dataset; it has {dataset.column_names}")
    # the lengths of the stored rows, then the rows a `select`/`filter`/`shuffle` left (their indices mapping): reading
    # the mapped rows themselves takes each token list row by row, seconds per million pairs
    indices = dataset._indices.column(0).to_numpy() if dataset._indices is not None else None
    lengths = []
    for column in (source_column, target_column):
        stored = pc.list_value_length(dataset.data.column(column)).to_numpy(zero_copy_only=False).astype(np.int64)
        lengths.append(stored if indices is None else stored[indices])
    return tuple(lengths)


class PairsOverBudgetError(ValueError):
    """Pairs that exceed the token budget on their own; `indices`: their positions in the lengths given."""

    def __init__(self, message: str, indices: list[int]):
        super().__init__(message)
        self.indices = indices


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices whose padded cost is at most `max_tokens` (see the module doc).

    Args:
        source_lengths, target_lengths: token counts per pair (e.g. from `token_lengths`); `target_lengths=None`
            counts the source only.
        max_tokens: the cap on a batch's padded tokens. A pair that alone exceeds it is an error.
        shuffle: shuffle the batch order every epoch (and break length ties randomly when packing).
        seed: the seed every process must share; the epoch order comes from (seed, epoch).
        num_replicas, rank: the number of processes and this one's index; `rank=None` yields all batches.
        pad_to_multiple_of: round padded lengths up to this multiple (8 suits tensor cores), as the collator does.
        token_count: "max" (the seed's and fairseq's rule) or "sum" (source plus target).
        max_sentences: optional cap on the number of pairs per batch.
    """

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
        source = np.asarray(source_lengths, dtype=np.int64)
        target = np.zeros_like(source) if target_lengths is None else np.asarray(target_lengths, dtype=np.int64)
        if source.ndim != 1 or source.shape != target.shape:
            raise ValueError(f"need one source and one target length per pair, got {source.shape} and {target.shape}")
        if len(source) and min(source.min(), target.min()) < 0:
            raise ValueError("lengths must be >= 0")
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
        self.padded_source_lengths = pad_length(source, pad_to_multiple_of)
        self.padded_target_lengths = pad_length(target, pad_to_multiple_of)
        self._check_fits()
        self.batches = self._split_for_replicas(self._pack())

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

    def _pack(self) -> list[list[int]]:
        """Sort by source length, then target length (as fairseq), and fill each batch greedily up to the cap."""
        source, target = self.padded_source_lengths, self.padded_target_lengths
        rng = np.random.default_rng([self.seed, 2**32 - 1])  # a stream separate from the per-epoch orders
        tie_break = rng.permutation(len(source)) if self.shuffle else np.arange(len(source))
        order = tie_break[np.lexsort((target[tie_break], source[tie_break]))]
        batches, batch, max_source, max_target = [], [], 0, 0
        for index, s, t in zip(order.tolist(), source[order].tolist(), target[order].tolist()):
            new_source, new_target = max(max_source, s), max(max_target, t)
            full = self.max_sentences is not None and len(batch) == self.max_sentences
            over = batch_cost(len(batch) + 1, new_source, new_target, self.token_count) > self.max_tokens
            if batch and (full or over):
                batches.append(batch)
                batch, new_source, new_target = [], s, t
            batch.append(index)
            max_source, max_target = new_source, new_target
        if batch:
            batches.append(batch)
        return batches

    def _split_for_replicas(self, batches: list[list[int]]) -> list[list[int]]:
        """Split the largest batches in two until every replica gets the same number; nothing is duplicated."""
        needed = -len(batches) % self.num_replicas
        if not needed:
            return batches
        heap = [(-len(batch), position) for position, batch in enumerate(batches)]
        heapq.heapify(heap)
        for _ in range(needed):
            size, position = heapq.heappop(heap)
            if -size < 2:
                raise ValueError(
                    f"cannot give {self.num_replicas} processes the same number of batches: the {len(batches)} "
                    f"batches hold one pair each ({sum(map(len, batches))} pairs) and cannot be split further"
                )
            batch = batches[position]
            half = len(batch) // 2
            batches[position] = batch[:half]  # the shorter half: pairs are in length order
            batches.append(batch[half:])
            heapq.heappush(heap, (-len(batches[position]), position))
            heapq.heappush(heap, (-len(batches[-1]), len(batches) - 1))
        return batches

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
            yield list(self.batches[position])

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
