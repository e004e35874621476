"""Packed training batches: whole pairs laid end to end in the rows of a grid of one fixed shape.

A token-budget batch (`batching`) pads each pair to its batch's longest source and target, so the batch size and both
lengths change from batch to batch: each new shape is a new graph for torch.compile, and the padding is computed for
nothing. A packed batch is instead `rows` x `row_length` source tokens and `rows` x `row_length` target tokens, every
batch the same: `rows = max_tokens // row_length`, so each side holds at most `max_tokens` tokens (the paper's
"approximately 25000 source tokens and 25000 target tokens", §5.1). Source row r and target row r hold the same pairs
in the same order, each pair whole, so a target token's pair index names its source pair in the same row; the model
keeps every attention within its pair (`modeling.packed_batches`).

`PackedBatchSampler` decides which pairs share a batch: it goes through the pairs in an order drawn from `seed` and
puts each in the first row where both its source and its target still fit (first-fit, a pair never split). A pair
that fits nowhere waits for the next batch, where it comes first; a batch is closed once `lookahead` pairs have
waited. It yields each batch row by row (row 0's pairs in the order they were placed, then row 1's, ...), and
`DataCollatorForPackedSeq2Seq` lays the pairs it is given out again with the same first-fit (`first_fit`; both place
pairs with `FirstFitGrid.place`), which puts each pair in the row it had: the two agree without the sampler handing
the layout over. Like `TokenBudgetBatchSampler`, batches are built once, their order is shuffled each epoch
(`set_epoch`), the batch count is made a multiple of `num_replicas` by splitting batches (never by dropping or
repeating a pair), and every pair appears exactly once per epoch across all processes.

Use: `DataLoader(tokenized, batch_sampler=sampler, collate_fn=DataCollatorForPackedSeq2Seq(sampler.rows,
sampler.row_length, pad_token_id, decoder_start_token_id))`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .batching import Batches, PairsOverBudgetError, TokenBudgetBatchSampler, pad_length

# The multiple a row's length is rounded up to when `pad_to_multiple_of` is not given: tensor cores' and
# vectorised kernels' preferred widths, at a cost of at most 7 tokens per row.
ROW_LENGTH_MULTIPLE = 8


class FirstFitGrid:
    """A grid of `rows` rows of `row_length` tokens per side, filled first-fit: the one placement that both the sampler
    and the collator use, so that they agree by construction (see the module doc)."""

    def __init__(self, rows: int, row_length: int):
        self.free_source = np.full(rows, row_length, dtype=np.int64)
        self.free_target = self.free_source.copy()

    def place(self, source: int, target: int) -> int | None:
        """Put a pair of `source` and `target` tokens in the first row where both still fit; that row, or None (the
        grid unchanged) when it fits in no row."""
        fits = np.flatnonzero((self.free_source >= source) & (self.free_target >= target))
        if not len(fits):
            return None
        row = int(fits[0])
        self.free_source[row] -= source
        self.free_target[row] -= target
        return row


def first_fit(
    source_lengths: Sequence[int], target_lengths: Sequence[int], rows: int, row_length: int
) -> list[int] | None:
    """The row of each pair, placed in the order given (`FirstFitGrid.place`: the first row where both its source and
    its target still fit), or None when some pair fits in no row."""
    grid = FirstFitGrid(rows, row_length)
    placed = []
    for source, target in zip(source_lengths, target_lengths):
        row = grid.place(source, target)
        if row is None:
            return None
        placed.append(row)
    return placed


class PackedBatchSampler(TokenBudgetBatchSampler):
    """Yields lists of dataset indices, each filling one fixed `rows` x `row_length` grid per side (see the module doc).

    Args:
        source_lengths, target_lengths: token counts per pair (e.g. from `batching.token_lengths`), each at least 1.
        max_tokens: the token budget per side; `rows = max_tokens // row_length`.
        row_length: tokens per row, on each side; by default the longest source or target, rounded up to
            `pad_to_multiple_of` (8 when that is None). A longer pair is an error.
        shuffle: pack the pairs in an order drawn from `seed` (else in index order) and shuffle the batch order each
            epoch.
        seed, num_replicas, rank: as `TokenBudgetBatchSampler`'s (`rank=None` yields every batch, for accelerate's
            `BatchSamplerShard`).
        pad_to_multiple_of: the multiple the default row length is rounded up to.
        lookahead: how many pairs may wait for the next batch before a batch is closed (default: `rows`, at least 16):
            more fills the rows' last gaps with shorter pairs, for more time spent building the batches.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        *,
        row_length: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int | None = 0,
        pad_to_multiple_of: int | None = None,
        lookahead: int | None = None,
    ):
        source, target = np.asarray(source_lengths, dtype=np.int64), np.asarray(target_lengths, dtype=np.int64)
        if source.ndim != 1 or source.shape != target.shape:
            raise ValueError(f"need one source and one target length per pair, got {source.shape} and {target.shape}")
        if len(source) and min(source.min(), target.min()) < 1:
            empty = int(np.flatnonzero((source < 1) | (target < 1))[0])
            raise ValueError(f"pair {empty} has {source[empty]} source and {target[empty]} target tokens: a packed "
                             "pair needs at least one token on each side (its </s>)")
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of={pad_to_multiple_of} must be >= 1 or None")
        if row_length is None:
            longest = int(max(source.max(), target.max())) if len(source) else 1
            row_length = int(pad_length(longest, pad_to_multiple_of or ROW_LENGTH_MULTIPLE))
        if row_length < 1:
            raise ValueError(f"row_length={row_length} must be >= 1")
        if max_tokens < row_length:
            raise ValueError(f"max_tokens={max_tokens} holds no row of row_length={row_length} tokens: raise "
                             "max_tokens to at least the row length")
        if lookahead is not None and lookahead < 1:
            raise ValueError(f"lookahead={lookahead} must be >= 1 or None")
        self.row_length, self.rows = row_length, max_tokens // row_length
        self.lookahead = lookahead or max(self.rows, 16)
        # the parent checks the shared settings, then calls `_check_fits` and `_build_batches`
        super().__init__(source, target, max_tokens, shuffle=shuffle, seed=seed, num_replicas=num_replicas,
                         rank=rank)

    def _check_fits(self) -> None:
        source, target = self.padded_source_lengths, self.padded_target_lengths  # unpadded: no pad_to_multiple_of
        too_long = np.flatnonzero((source > self.row_length) | (target > self.row_length))
        if len(too_long):
            examples = ", ".join(f"index {i} (source {source[i]}, target {target[i]} tokens)" for i in too_long[:3])
            raise PairsOverBudgetError(
                f"{len(too_long)} pair(s) are longer than a packed row of {self.row_length} tokens: {examples}",
                too_long.tolist(),
            )

    def _build_batches(self) -> Batches:
        """The packed batches (`_pack_rows`), split for the replicas by whole rows, each flattened row by row."""
        return self._split_rows_for_replicas(self._pack_rows())

    def _pack_rows(self) -> list[list[list[int]]]:
        """Each batch as its rows, each row its pairs in the order they were placed (see the module doc)."""
        source, target = self.padded_source_lengths.tolist(), self.padded_target_lengths.tolist()
        rng = np.random.default_rng([self.seed, 2**32 - 2])  # a stream of its own, as the parent's tie break
        stream = (rng.permutation(len(source)) if self.shuffle else np.arange(len(source))).tolist()
        batches, waiting, position = [], [], 0
        while waiting or position < len(stream):
            grid = FirstFitGrid(self.rows, self.row_length)
            rows: list[list[int]] = [[] for _ in range(self.rows)]
            still_waiting = []
            candidates = waiting  # those that waited come first, in the order they began to wait
            while True:
                if candidates:
                    index = candidates.pop(0)
                elif len(still_waiting) < self.lookahead and position < len(stream):
                    index, position = stream[position], position + 1
                else:
                    break
                row = grid.place(source[index], target[index])
                if row is None:
                    still_waiting.append(index)
                else:
                    rows[row].append(index)
            batches.append([row for row in rows if row])
            waiting = still_waiting
        return batches

    def _split_rows_for_replicas(self, batches: list[list[list[int]]]) -> Batches:
        """Split the batches with the most pairs in two until every replica gets the same number, then flatten each
        batch row by row. A split moves whole rows (or, from a batch of one row, the row's later pairs), so that the
        collator's first-fit gives each part's pairs the rows they had."""
        needed = -len(batches) % self.num_replicas
        for _ in range(needed):
            position = max(range(len(batches)), key=lambda b: (sum(map(len, batches[b])), -b))
            rows = batches[position]
            if len(rows) > 1:
                half = len(rows) // 2
                batches[position], moved = rows[:half], rows[half:]
            elif len(rows[0]) > 1:
                half = len(rows[0]) // 2
                batches[position], moved = [rows[0][:half]], [rows[0][half:]]
            else:
                raise ValueError(
                    f"cannot give {self.num_replicas} processes the same number of batches: the {len(batches)} "
                    f"batches hold one pair each and cannot be split further"
                )
            batches.append(moved)
        self.batch_rows = batches
        return Batches.from_lists([[index for row in rows for index in row] for rows in batches])


def packing_stats(sampler: PackedBatchSampler) -> dict[str, int | float]:
    """How full the grids of `sampler`'s batches are: batches, pairs, real source and target tokens, the grids'
    tokens (batches x rows x row_length per side), and each side's padding share (1 - tokens / grid tokens)."""
    grid = len(sampler.batches) * sampler.rows * sampler.row_length
    source, target = int(sampler.padded_source_lengths.sum()), int(sampler.padded_target_lengths.sum())
    return {
        "batches": len(sampler.batches),
        "pairs": sum(map(len, sampler.batches)),
        "rows": sampler.rows,
        "row_length": sampler.row_length,
        "source_tokens": source,
        "target_tokens": target,
        "grid_tokens_per_side": grid,
        "source_padding_fraction": 1 - source / grid if grid else 0.0,
        "target_padding_fraction": 1 - target / grid if grid else 0.0,
    }


class DataCollatorForPackedSeq2Seq:
    """Lays a batch's pairs (features with `input_ids` and `labels`, as `corpus.tokenize_pairs` makes them) out in a
    `rows` x `row_length` grid per side by `first_fit`, and returns, each (rows, row_length):

    - `input_ids`, `labels`: the pairs' tokens end to end, padded with `pad_token_id` and -100 after each row's last;
    - `decoder_input_ids`: the labels shifted right within each pair, each pair's starting with
      `decoder_start_token_id` (§3.1's shift, per pair: a pair's first target token is never predicted from the
      previous pair's last);
    - `position_ids`, `decoder_position_ids`: each token's position within its pair, from 0 (§3.5's encodings restart
      with every pair); 0 on padding;
    - `pair_ids`, `decoder_pair_ids`: each token's pair, its index in `features`; -1 on padding.

    Raises ValueError when the pairs do not fit the grid (a batch that was not built for it)."""

    def __init__(self, rows: int, row_length: int, pad_token_id: int, decoder_start_token_id: int):
        if rows < 1 or row_length < 1:
            raise ValueError(f"a packed grid needs rows >= 1 and row_length >= 1, got {rows} x {row_length}")
        self.rows, self.row_length = rows, row_length
        self.pad_token_id, self.decoder_start_token_id = pad_token_id, decoder_start_token_id

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        sources = [list(feature["input_ids"]) for feature in features]
        targets = [list(feature["labels"]) for feature in features]
        placed = first_fit(list(map(len, sources)), list(map(len, targets)), self.rows, self.row_length)
        if placed is None or not all(sources) or not all(targets):
            lengths = [(len(s), len(t)) for s, t in zip(sources, targets)]
            raise ValueError(f"{len(features)} pairs of (source, target) lengths {lengths[:8]}"
                             f"{' ...' if len(lengths) > 8 else ''} do not fit a packed grid of {self.rows} rows of "
                             f"{self.row_length} tokens, each pair whole and non-empty: build the batches with a "
                             "PackedBatchSampler of the same rows and row_length")
        shape = (self.rows, self.row_length)
        batch = {
            "input_ids": np.full(shape, self.pad_token_id, dtype=np.int64),
            "position_ids": np.zeros(shape, dtype=np.int64),
            "pair_ids": np.full(shape, -1, dtype=np.int64),
            "labels": np.full(shape, -100, dtype=np.int64),
            "decoder_input_ids": np.full(shape, self.pad_token_id, dtype=np.int64),
            "decoder_position_ids": np.zeros(shape, dtype=np.int64),
            "decoder_pair_ids": np.full(shape, -1, dtype=np.int64),
        }
        used_source, used_target = [0] * self.rows, [0] * self.rows
        for pair, (row, source, target) in enumerate(zip(placed, sources, targets)):
            start, end = used_source[row], used_source[row] + len(source)
            batch["input_ids"][row, start:end] = source
            batch["position_ids"][row, start:end] = np.arange(len(source))
            batch["pair_ids"][row, start:end] = pair
            used_source[row] = end
            start, end = used_target[row], used_target[row] + len(target)
            batch["labels"][row, start:end] = target
            batch["decoder_input_ids"][row, start:end] = [self.decoder_start_token_id, *target[:-1]]
            batch["decoder_position_ids"][row, start:end] = np.arange(len(target))
            batch["decoder_pair_ids"][row, start:end] = pair
            used_target[row] = end
        return {name: torch.from_numpy(values) for name, values in batch.items()}


__all__ = ["DataCollatorForPackedSeq2Seq", "FirstFitGrid", "PackedBatchSampler", "first_fit", "packing_stats"]
