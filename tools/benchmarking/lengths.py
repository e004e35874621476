"""Sentence-pair lengths and the token-id batches built from them, shared by the training and generation sections.

Lengths come from Multi30k when its folder exists: the training split, tokenized as the training pipeline does it
(a byte-level BPE tokenizer trained on that split by `modeling.tokenization.train_tokenizer`, the same length filter,
`</s>` counted). Otherwise from a synthetic distribution resembling it (see `synthetic_lengths`).

Only the lengths are real: the token ids are drawn at random (>= 4, below the special tokens' ids never), with `</s>`
last and padding as `DataCollatorForSeq2Seq` pads (source with <pad> and attention mask 0, labels with -100), and the
decoder inputs it adds (the labels shifted right). Speed does not depend on which ids a batch holds, and both models
get the very same tensors. Packed batches (`--packing`) are the pairs of `PackedBatchSampler`'s batches laid out by
`DataCollatorForPackedSeq2Seq`, as training lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from modeling.data.batching import TokenBudgetBatchSampler, pad_length, token_lengths
from modeling.data.corpus import load_parallel_corpus, prepare_pairs
from modeling.data.packing import DataCollatorForPackedSeq2Seq, PackedBatchSampler
from modeling.modeling_annotated_transformer import shift_tokens_right
from modeling.tokenization import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, SPECIAL_TOKENS, dataset_texts, train_tokenizer

MULTI30K_TRAIN_PAIRS = 29000
FIRST_ORDINARY_ID = len(SPECIAL_TOKENS)


@dataclass
class PairLengths:
    source: np.ndarray
    target: np.ndarray
    origin: str  # where they come from, for the report

    def summary(self) -> dict:
        return {
            "origin": self.origin,
            "pairs": len(self.source),
            "source_mean": float(self.source.mean()),
            "source_std": float(self.source.std()),
            "target_mean": float(self.target.mean()),
            "target_std": float(self.target.std()),
            "max": int(max(self.source.max(), self.target.max())),
        }


def synthetic_lengths(num_pairs: int = MULTI30K_TRAIN_PAIRS, seed: int = 0) -> PairLengths:
    """Multi30k-like BPE lengths (`</s>` included): source ~ Normal(16, 6), target = source * Normal(0.95, 0.12),
    both rounded and clipped to [3, 64] (Multi30k de-en with an 8000-token BPE: means 16-17 and 15, sd about 6)."""
    rng = np.random.default_rng([seed, 30])
    source = np.clip(np.rint(rng.normal(16, 6, num_pairs)), 3, 64).astype(np.int64)
    target = np.clip(np.rint(source * rng.normal(0.95, 0.12, num_pairs)), 3, 64).astype(np.int64)
    return PairLengths(source, target, f"synthetic Multi30k-like, {num_pairs} pairs")


def corpus_lengths(
    data_dir: str | Path, source_lang: str, target_lang: str, vocab_size: int, max_length: int
) -> PairLengths:
    """Token lengths of a corpus's training split, tokenized as `modeling.training.run` does it."""
    corpus = load_parallel_corpus(data_dir, source_lang, target_lang, splits=["train"])
    tokenizer = train_tokenizer(dataset_texts(corpus["train"]), vocab_size=vocab_size)
    _, tokenized, report = prepare_pairs(corpus, tokenizer, max_length=max_length)
    if len(tokenized["train"]) == 0:
        raise ValueError(f"no training pair is left after filtering with max_length {max_length} ({report['train']})")
    source, target = token_lengths(tokenized["train"])
    origin = f"{data_dir} train {source_lang}-{target_lang}, BPE {len(tokenizer)} tokens, max_length {max_length}"
    return PairLengths(source, target, origin)


def batch_lengths(
    lengths: PairLengths, max_tokens: int, steps: int, seed: int, pad_to_multiple_of: int | None
) -> list[tuple[list[int], list[int]]]:
    """The first `steps` token-budget batches of epoch 0 (`TokenBudgetBatchSampler`, as training builds them), as
    (source lengths, target lengths) per batch; fewer when an epoch has fewer batches."""
    sampler = TokenBudgetBatchSampler(
        lengths.source, lengths.target, max_tokens, seed=seed, pad_to_multiple_of=pad_to_multiple_of
    )
    batches = []
    for _, indices in zip(range(steps), sampler):
        batches.append((lengths.source[indices].tolist(), lengths.target[indices].tolist()))
    return batches


def packed_batch_lengths(
    lengths: PairLengths, max_tokens: int, steps: int, seed: int, pad_to_multiple_of: int | None
) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """The first `steps` packed batches of epoch 0 (`PackedBatchSampler`, its rows of the longest pair's length
    rounded up to `pad_to_multiple_of`, 8 without it), as (source lengths, target lengths) per batch in the order the
    collator lays them out, and the grid: {"rows": ..., "row_length": ...}."""
    sampler = PackedBatchSampler(lengths.source, lengths.target, max_tokens, seed=seed,
                                 pad_to_multiple_of=pad_to_multiple_of)
    batches = [(lengths.source[indices].tolist(), lengths.target[indices].tolist())
               for _, indices in zip(range(steps), sampler)]
    return batches, {"rows": sampler.rows, "row_length": sampler.row_length}


def source_lengths_sample(lengths: PairLengths, count: int, seed: int) -> list[int]:
    """`count` source lengths drawn without replacement (with, when there are fewer pairs)."""
    rng = np.random.default_rng([seed, 31])
    return lengths.source[rng.choice(len(lengths.source), count, replace=count > len(lengths.source))].tolist()


def _padded_ids(lengths: list[int], vocab_size: int, generator: torch.Generator, pad_to_multiple_of, pad_value):
    width = int(pad_length(max(lengths), pad_to_multiple_of))
    ids = torch.randint(FIRST_ORDINARY_ID, vocab_size, (len(lengths), width), generator=generator)
    length = torch.tensor(lengths).unsqueeze(1)
    position = torch.arange(width).unsqueeze(0)
    ids[position == length - 1] = EOS_TOKEN_ID
    ids[position >= length] = pad_value
    return ids, (position < length).long()


def source_batch(
    lengths: list[int], vocab_size: int, seed: int, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """`input_ids` and `attention_mask` for sources of the given lengths (ending in `</s>`, right-padded)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids, attention_mask = _padded_ids(lengths, vocab_size, generator, pad_to_multiple_of, PAD_TOKEN_ID)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def training_batch(
    source_lengths: list[int], target_lengths: list[int], vocab_size: int, seed: int,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """`input_ids`, `attention_mask`, `labels` (-100 on padding) and `decoder_input_ids` (the labels shifted right
    behind the decoder start token, as `DataCollatorForSeq2Seq` adds them) for pairs of the given lengths."""
    batch = source_batch(source_lengths, vocab_size, seed, pad_to_multiple_of)
    generator = torch.Generator().manual_seed(seed + 1)
    batch["labels"], _ = _padded_ids(target_lengths, vocab_size, generator, pad_to_multiple_of, -100)
    batch["decoder_input_ids"] = shift_tokens_right(batch["labels"], PAD_TOKEN_ID, BOS_TOKEN_ID)
    return batch


def packed_training_batch(
    source_lengths: list[int], target_lengths: list[int], grid: dict[str, int], vocab_size: int, seed: int
) -> dict[str, torch.Tensor]:
    """Pairs of the given lengths (random ids, `</s>` last) laid out in a packed grid by the training collator:
    `input_ids`, `labels`, `decoder_input_ids`, each token's pair and its position within it (see
    `modeling.data.packing`)."""
    generator = torch.Generator().manual_seed(seed)
    features = [
        {"input_ids": torch.randint(FIRST_ORDINARY_ID, vocab_size, (source - 1,), generator=generator).tolist()
         + [EOS_TOKEN_ID],
         "labels": torch.randint(FIRST_ORDINARY_ID, vocab_size, (target - 1,), generator=generator).tolist()
         + [EOS_TOKEN_ID]}
        for source, target in zip(source_lengths, target_lengths)
    ]
    return DataCollatorForPackedSeq2Seq(grid["rows"], grid["row_length"], PAD_TOKEN_ID, BOS_TOKEN_ID)(features)
