"""Parallel corpora as a `datasets.DatasetDict` with two string columns, `source` and `target`.

`load_parallel_corpus(data, source_lang, target_lang)` takes:

- `None`, "copy" or "reverse": a synthetic task generated from a seed, no files needed (`synthetic_task_dataset`).
  The copy task is The Annotated Transformer's first example.
- a directory of line-aligned text files `{split}.{lang}` or `{split}.{lang}.gz` (Multi30k, IWSLT/WMT dumps),
  one sentence per line, line N of one language the translation of line N of the other;
- `{split}.tsv` / `{split}.jsonl` files (`.gz` allowed) in a directory, or one such file (the train split);
- a folder written by `DatasetDict.save_to_disk` (or `Dataset.save_to_disk`: the train split);
- `{split}.csv` / `{split}.json` / `{split}.parquet` files in a directory (shards `{split}-00000-of-00002.parquet`),
  each a split named as above, read by `datasets`' builder for the format of the train split's files (others are
  ignored, with a warning), CSV cells as stored ("NA" and "null" included), or one such file (the train split);
- anything else goes to `datasets.load_dataset(data, dataset_config)`: a Hub name ("wmt14", "de-en") or a Hub-style
  folder (`data/train-00000-of-00001.parquet`).
Datasets have a `translation` column of {language: text} (wmt14 and iwslt2017 style) or two named text columns.

Split names become `train`, `validation` (from val, valid, dev, ...) and `test` (also from the one `test*` split
when there is exactly one, such as Multi30k's `test_2016_flickr`). Other splits keep their names.

The loaders return the pairs exactly as stored. `prepare_pairs` then tokenizes them once and removes empty and
over-long pairs (`filter_pairs` without keeping the tokens), and reports how many it removed per split; nothing is
dropped without a count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, List, Translation, Value, load_dataset, load_from_disk
from datasets.data_files import DataFilesDict, DataFilesList
from datasets.exceptions import DatasetGenerationError
from datasets.features import Json

from ..common.file_writes import replace_array, replace_text
from ..tokenization import read_lines
from ..weight_files import sha256
from .batching import index_dtype, token_lengths
from .datasets_internals import cache_folder, fingerprint
from .freed_memory import release_freed_memory

logger = logging.getLogger(__name__)

SYNTHETIC_TASKS = ("copy", "reverse")
# Multi30k's Task 1 files from its authors, into data/multi30k (the README and docs/data.md show this command)
MULTI30K_DOWNLOAD = (
    "mkdir -p data/multi30k && for f in {train,val,test_2016_flickr}.{de,en}; do curl -fsSL -o data/multi30k/$f.gz "
    "https://raw.githubusercontent.com/multi30k/dataset/HEAD/data/task1/raw/$f.gz; done"
)
# Rows per record batch of the Arrow files the loaders and the tokenizer write (`datasets` writes 1000): an opened
# file holds about 1.4 KB of memory per record batch, 3 bytes a pair at 1000 rows and a tenth of that at 10,000
ROWS_PER_RECORD_BATCH = 10_000
PAIR_FEATURES = Features({"source": Value("string"), "target": Value("string")})
_SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "development": "validation",
    "test": "test",
    "testing": "test",
}
_SPLIT_ORDER = ("train", "validation", "test")
# `{split}.{suffix}` files whose suffix is a file format, not a language.
_NOT_LANGUAGES = {"tsv", "jsonl", "json", "csv", "parquet", "arrow", "txt", "md", "py", "yaml", "yml", "zip", "tar"}
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}([-_][A-Za-z]{2,4})?")  # de, en, fra, pt-BR, zh_Hant
_TEXT_PAIR_FILE = re.compile(r"^(?P<split>[^.]+)\.(?P<lang>[^.]+?)(?P<gz>\.gz)?$")
_TABLE_FILE = re.compile(r"^(?P<split>[^.]+)\.(?P<format>tsv|jsonl)(?P<gz>\.gz)?$")
_DEFAULT_COLUMN_PAIRS = (("source", "target"), ("src", "tgt"))
# `{split}.csv|json|parquet`, or a shard of a split, `{split}-00000-of-00002.parquet`; the format is the builder's name
_DATA_FILE = re.compile(r"^(?P<split>[^.]+?)(?P<shard>-\d+-of-\d+)?\.(?P<format>csv|json|parquet)$")
_DATASETS_METADATA = ("dataset_info", "dataset_infos")  # `datasets`' own json files, not data


# --------------------------------------------------------------------------------------------------------------------
# Synthetic tasks


def is_synthetic_task(name) -> bool:
    """Whether a corpus name (`--dataset_name`) names a synthetic task: one of SYNTHETIC_TASKS that is no local
    folder or file (a folder named `copy` is a corpus)."""
    return isinstance(name, str) and name in SYNTHETIC_TASKS and not Path(name).exists()


def synthetic_task_dataset(
    task: str = "copy",
    num_train: int = 2000,
    num_validation: int = 200,
    num_test: int = 200,
    *,
    seed: int = 0,
    symbols: int = 10,
    min_length: int = 1,
    max_length: int = 10,
) -> DatasetDict:
    """Sequences of space-separated symbols ("7 3 9 2 5") drawn from `range(symbols)`, with lengths uniform in
    [min_length, max_length]; the target is the source itself (`copy`) or reversed (`reverse`).

    Deterministic from `seed`. Each split has its own random stream, so a split's first N pairs do not depend on
    the sizes of the splits, and `copy` and `reverse` with the same seed have the same sources.
    """
    if task not in SYNTHETIC_TASKS:
        raise ValueError(f"unknown synthetic task {task!r}; choose one of {SYNTHETIC_TASKS}")
    if symbols < 1:
        raise ValueError(f"symbols={symbols} must be >= 1")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got min_length={min_length}, max_length={max_length}")
    sizes = {"train": num_train, "validation": num_validation, "test": num_test}
    splits = {}
    for split, size in sizes.items():
        if size < 0:
            raise ValueError(f"num_{split}={size} must be >= 0")
        rng = random.Random(f"{seed}/{split}")
        sources = [
            [str(rng.randrange(symbols)) for _ in range(rng.randint(min_length, max_length))] for _ in range(size)
        ]
        targets = sources if task == "copy" else [sequence[::-1] for sequence in sources]
        splits[split] = _pairs_dataset([" ".join(s) for s in sources], [" ".join(t) for t in targets])
    return DatasetDict(splits)


# --------------------------------------------------------------------------------------------------------------------
# Entry point


def load_parallel_corpus(
    data: str | os.PathLike | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    *,
    dataset_config: str | None = None,
    source_column: str | None = None,
    target_column: str | None = None,
    splits: Sequence[str] | None = None,
    **load_dataset_kwargs,
) -> DatasetDict:
    """Load a parallel corpus as a DatasetDict with string columns `source` and `target` (see the module doc).

    Args:
        data: None/"copy"/"reverse" (synthetic task), a directory or file, or a `datasets.load_dataset` name.
        source_lang, target_lang: language codes: file suffixes (`train.de`), keys of a `translation` column or
            JSONL object, or column names. May be left out when exactly two languages are present: then the order
            is "src"->"tgt", the config name's ("de-en"), or else the files' alphabetical order (logged).
        dataset_config: the `load_dataset` configuration name (e.g. "de-en").
        source_column, target_column: explicit column (TSV header, JSONL key, dataset column) names.
        splits: canonical split names to return (e.g. ["train", "validation"]); a missing one is an error.
        load_dataset_kwargs: passed to `datasets.load_dataset` (revision, data_files, ...).
    """
    if data is None or is_synthetic_task(data):
        corpus = synthetic_task_dataset(data or "copy")
    else:
        path = Path(data)
        if not path.exists() and (path.is_absolute() or str(data).startswith((".", "~"))):
            raise FileNotFoundError(f"{data} does not exist (a path, not a dataset name, since it starts with . / ~)")
        if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            corpus = _from_datasets(
                _load_from_disk(path), source_lang, target_lang, source_column, target_column, keep=splits
            )
        elif path.is_dir() and (text_pairs := find_text_pairs(path)):
            _refuse_columns(source_column, target_column, f"{path} holds plain text files")
            corpus = _load_text_pairs(path, text_pairs, source_lang, target_lang)
        elif path.is_dir() and (tables := _find_tables(path)):
            corpus = _load_tables(tables, source_lang, target_lang, source_column, target_column)
        elif path.is_file() and _TABLE_FILE.match(path.name):
            corpus = _load_tables({"train": path}, source_lang, target_lang, source_column, target_column)
        else:
            if path.is_file():  # a single csv/json/parquet file: let `datasets` read it as the train split
                match = _DATA_FILE.match(path.name)
                if match is None:
                    raise ValueError(
                        f"cannot read {path}: a single file must be .tsv, .jsonl (optionally .gz), .csv, .json or "
                        ".parquet; for line-aligned text give the directory holding {split}.{lang} files"
                    )
                raw = _load_data_files(match["format"], {"train": [str(path)]}, load_dataset_kwargs)
            elif path.is_dir() and "data_files" not in load_dataset_kwargs and (data_files := _find_data_files(path)):
                raw = _load_data_files(*data_files, load_dataset_kwargs)
            else:  # a Hub name (an existing folder by its full path: "json" alone would be datasets' JSON builder)
                raw = load_dataset(str(path.resolve()) if path.is_dir() else str(data), dataset_config,
                                   **load_dataset_kwargs)
            corpus = _from_datasets(
                raw, source_lang, target_lang, source_column, target_column, dataset_config, keep=splits
            )
    return _select_splits(corpus, splits, data)


# --------------------------------------------------------------------------------------------------------------------
# Filtering and tokenization


def prepare_pairs(
    corpus: DatasetDict,
    tokenizer,
    *,
    max_length: int | None = None,
    target_tokenizer=None,
    remove_empty: bool = True,
    num_proc: int | None = None,
) -> tuple[DatasetDict, DatasetDict, dict[str, dict[str, int]]]:
    """Tokenize every pair once (`tokenize_pairs`), then remove empty pairs and pairs with a side longer than
    `max_length` tokens (`</s>` included), as `filter_pairs` does, reading the lengths from the token columns.

    Returns (the kept pairs as text, the kept pairs tokenized, the report of `filter_pairs`); row i of one is row i
    of the other. Nothing is held as Python lists: a 4.5M-pair corpus stays in (memory-mapped) Arrow tables."""
    _check_max_length(max_length)
    tokenized = tokenize_pairs(corpus, tokenizer, target_tokenizer=target_tokenizer, num_proc=num_proc)
    keep, report = {}, {}
    for split, dataset in corpus.items():
        found = _FilterCache(dataset, tokenized[split], max_length, remove_empty)
        if found.keep_and_report is None:
            lengths = token_lengths(tokenized[split]) if max_length is not None else None
            found.store(*_keep(dataset, lengths, max_length, remove_empty))
        keep[split], report[split] = found.keep_and_report
        _log_removals(split, report[split], max_length, "tokens")
    release_freed_memory()  # what the filters read of a large corpus
    return _selected(corpus, keep), _selected(tokenized, keep), report


def filter_pairs(
    corpus: DatasetDict,
    *,
    max_length: int | None = None,
    tokenizer=None,
    target_tokenizer=None,
    remove_empty: bool = True,
) -> tuple[DatasetDict, dict[str, dict[str, int]]]:
    """Remove empty pairs (either side blank) and pairs with a side longer than `max_length`.

    Length is in characters, or in tokens (`</s>` included) when a tokenizer is given (`target_tokenizer` for the
    target side when the vocabularies are separate; `prepare_pairs` also keeps the tokens). Returns the filtered
    corpus and, per split, {"total", "empty", "too_long", "kept"}; removals are also logged as warnings.
    """
    _check_max_length(max_length)
    if tokenizer is not None and max_length is not None:
        filtered, _, report = prepare_pairs(
            corpus, tokenizer, max_length=max_length, target_tokenizer=target_tokenizer, remove_empty=remove_empty
        )
        return filtered, report
    keep, report = {}, {}
    for split, dataset in corpus.items():
        keep[split], report[split] = _keep(dataset, None, max_length, remove_empty)
        _log_removals(split, report[split], max_length, "characters")
    release_freed_memory()  # what the filters read of a large corpus
    return _selected(corpus, keep), report


TOKENIZED_FEATURES = Features({"input_ids": List(Value("int32")), "labels": List(Value("int32"))})


def tokenize_pairs(
    corpus: DatasetDict, tokenizer, *, target_tokenizer=None, num_proc: int | None = None
) -> DatasetDict:
    """Replace `source`/`target` with the token ids `input_ids` and `labels` (each ending in `</s>`; int32).

    No truncation and no padding: remove over-long pairs first with `filter_pairs` (or use `prepare_pairs`), and
    pad per batch in the collator (`DataCollatorForSeq2Seq` pads labels with -100 and makes the attention mask)."""
    target_tokenizer = target_tokenizer or tokenizer
    encode_source, encode_target = _token_ids_function(tokenizer), _token_ids_function(target_tokenizer)

    def encode(batch):
        return {"input_ids": encode_source(batch["source"]), "labels": encode_target(batch["target"])}

    return DatasetDict({
        split: dataset.map(
            encode, batched=True, batch_size=ROWS_PER_RECORD_BATCH, writer_batch_size=ROWS_PER_RECORD_BATCH,
            remove_columns=["source", "target"], features=TOKENIZED_FEATURES, num_proc=num_proc,
            new_fingerprint=_tokens_fingerprint(dataset, tokenizer, target_tokenizer),
        )
        for split, dataset in corpus.items()
    })


def _token_ids_function(tokenizer):
    """texts -> token ids, as `tokenizer(texts)["input_ids"]`. For a plain `tokenizers`-backed tokenizer (ours) that
    call is its backend's `encode_batch` plus conversions; `encode_batch_fast` (no character offsets) gives the same
    ids about 1.5x faster, which is most of the time to prepare a WMT-size corpus. Subclasses may add their own
    processing, so they keep the full call."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast  # local: keep `import modeling.data.corpus` light

    if type(tokenizer) is PreTrainedTokenizerFast and hasattr(tokenizer.backend_tokenizer, "encode_batch_fast"):
        backend = tokenizer.backend_tokenizer
        if backend.truncation is not None or backend.padding is not None:
            # left on by an earlier call (truncation=True, padding=True) or saved so: the tokenizer's own call
            # switches them off for these arguments, the backend would cut and pad with them
            backend = Tokenizer.from_str(backend.to_str())
            backend.no_truncation()
            backend.no_padding()
        return lambda texts: [encoding.ids for encoding in backend.encode_batch_fast(texts)]
    return lambda texts: tokenizer(texts, return_attention_mask=False)["input_ids"]


def _tokens_fingerprint(dataset: Dataset, tokenizer, target_tokenizer) -> str | None:
    """The cache key of a split's tokens: the split's fingerprint and what the tokenizers compute, i.e. their
    serialized pipelines without the padding and truncation settings that calling a tokenizer may change (hashing
    the tokenizer object itself is unstable across runs: huggingface/datasets#5985, #6179). None (let `datasets`
    hash) for a tokenizer without a `tokenizers` backend."""
    # v2: v1's fast path obeyed the backend's truncation and padding, which the key leaves out: its caches may hold
    # cut or padded tokens
    parts = ["tokenize_pairs v2", fingerprint(dataset)]
    for each in (tokenizer, target_tokenizer):
        backend = getattr(each, "backend_tokenizer", None)
        if backend is None:
            return None
        state = json.loads(backend.to_str())
        for setting in ("padding", "truncation"):
            state.pop(setting, None)
        parts.append(json.dumps(state, sort_keys=True))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _check_max_length(max_length: int | None) -> None:
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length={max_length} must be >= 1 (or None for no length limit)")


FILTERED_AT_A_TIME = 1 << 20  # pairs filtered at a time: the filter's own arrays stay a few MB at any corpus size


def _keep(dataset: Dataset, lengths, max_length: int | None, remove_empty: bool):
    """The indices of a split's pairs to keep (None: all of them) and its report {"total", "empty", "too_long",
    "kept"}. `lengths`: (source, target) token counts per pair, or None to count characters of the text; used with
    `max_length`. A million pairs at a time; the indices are made only once a pair is removed (4 bytes a pair)."""
    count = len(dataset)
    kept, cursor, empty, too_long = None, 0, 0, 0
    texts = dataset.select_columns(["source", "target"]).with_format("arrow")
    for start, table in zip(itertools.count(0, FILTERED_AT_A_TIME), texts.iter(batch_size=FILTERED_AT_A_TIME)):
        stop = start + table.num_rows
        blank = _blank(table) if remove_empty else np.zeros(table.num_rows, dtype=bool)
        over = np.zeros_like(blank)
        if max_length is not None:
            source, target = (
                (lengths[0][start:stop], lengths[1][start:stop]) if lengths is not None else
                (_as_numpy(pc.utf8_length(table["source"])), _as_numpy(pc.utf8_length(table["target"])))
            )
            over = ~blank & (np.maximum(source, target) > max_length)
        removed = blank | over
        empty, too_long = empty + int(blank.sum()), too_long + int(over.sum())
        if kept is None and removed.any():  # the first removal: every earlier pair was kept
            kept = np.empty(count, dtype=index_dtype(count))
            kept[:start] = np.arange(start, dtype=kept.dtype)
            cursor = start
        if kept is not None:
            chosen = np.flatnonzero(~removed).astype(kept.dtype) + kept.dtype.type(start)
            kept[cursor:cursor + len(chosen)] = chosen
            cursor += len(chosen)
    report = {"total": count, "empty": empty, "too_long": too_long, "kept": count - empty - too_long}
    return (None if kept is None else kept[:cursor]), report


def _log_removals(split: str, report: dict, max_length: int | None, unit: str) -> None:
    removed = report["total"] - report["kept"]
    if removed:
        limit = f" (longer than {max_length} {unit})" if max_length is not None else ""
        logger.warning(
            "%s: removed %d of %d pairs: %d empty, %d too long%s",
            split, removed, report["total"], report["empty"], report["too_long"], limit,
        )


class _FilterCache:
    """What `_keep` found for a split's tokens, kept beside them in the `datasets` cache: a run on the cached tokens
    reads the kept indices and the report back instead of reading every text again. Keyed by the tokens' and the
    text's fingerprints (which the tokens' cache is found by) and the filter's settings; not kept for tokens held
    in memory (no cache file)."""

    VERSION = "filter v1"

    def __init__(self, texts: Dataset, tokens: Dataset, max_length: int | None, remove_empty: bool):
        self.keep_and_report, self.path = None, None
        folder = cache_folder(tokens)
        if folder is None:
            return
        key = "\n".join([self.VERSION, fingerprint(texts), fingerprint(tokens), str(max_length), str(remove_empty)])
        self.path = folder / f"filter-{hashlib.sha256(key.encode()).hexdigest()[:32]}"
        try:
            report = json.loads(self.path.with_suffix(".json").read_text(encoding="utf-8"))
            kept = np.load(self.path.with_suffix(".npy")) if report["kept"] < report["total"] else None
        except (OSError, ValueError, KeyError):
            return  # none yet, or one a stopped run left incomplete: the filter runs again
        if kept is None or len(kept) == report["kept"]:
            self.keep_and_report = kept, report

    def store(self, kept: np.ndarray | None, report: dict) -> None:
        self.keep_and_report = kept, report
        if self.path is None:
            return
        try:
            if kept is not None:  # the indices first: the report, written last and whole, says they are complete
                replace_array(self.path.with_suffix(".npy"), kept)
            replace_text(self.path.with_suffix(".json"), json.dumps(report))
        except OSError as error:  # a full or read-only cache: the next run filters again
            logger.warning("could not keep the filter's result in the datasets cache (%s)", error)


def _selected(corpus: DatasetDict, keep) -> DatasetDict:
    """The kept pairs of each split. A split read from the `datasets` cache keeps its indices mapping in a file beside
    it (memory-mapped, as the rows are), not in memory."""
    selected = {}
    for split, dataset in corpus.items():
        if keep[split] is None:
            selected[split] = dataset
            continue
        indices_file, folder = None, cache_folder(dataset)
        if folder is not None:
            digest = hashlib.sha256(keep[split].tobytes()).hexdigest()[:16]
            indices_file = str(folder / f"indices-{fingerprint(dataset)}-{digest}.arrow")
        selected[split] = dataset.select(keep[split], indices_cache_file_name=indices_file)
    return DatasetDict(selected)


def _blank(texts) -> np.ndarray:
    """Pairs (an Arrow table's rows) with a side that is empty or only whitespace (Unicode's, as `str.strip`: Arrow's
    `utf8_is_space` and Python's `str.isspace` count the same characters)."""
    blank = [
        _as_numpy(pc.or_(pc.equal(pc.binary_length(texts[column]), 0), pc.utf8_is_space(texts[column])), fill=False)
        for column in ("source", "target")
    ]
    return blank[0] | blank[1]


def _as_numpy(values, fill=None) -> np.ndarray:
    """An Arrow (chunked) array as NumPy; nulls (a missing text) become `fill`."""
    if fill is not None:
        values = pc.fill_null(values, fill)
    return values.to_numpy() if isinstance(values, pa.ChunkedArray) else values.to_numpy(zero_copy_only=False)


# --------------------------------------------------------------------------------------------------------------------
# Helpers


def _pairs_dataset(sources: list[str], targets: list[str]) -> Dataset:
    return Dataset.from_dict({"source": sources, "target": targets}, features=PAIR_FEATURES)


def _refuse_columns(source_column, target_column, reason):
    if source_column is not None or target_column is not None:
        raise ValueError(
            f"source_column/target_column ({source_column!r}, {target_column!r}) do not apply: {reason}; "
            "choose the languages with source_lang/target_lang"
        )


def canonical_split_names(names: Sequence[str]) -> dict[str, str]:
    """Map raw split names to train/validation/test where that is unambiguous."""
    mapping = {name: _SPLIT_ALIASES.get(name.lower(), name) for name in names}
    test_like = [name for name in names if mapping[name] == name and name.lower().startswith("test")]
    if len(test_like) == 1 and "test" not in mapping.values():
        mapping[test_like[0]] = "test"
    seen: dict[str, str] = {}
    for name, canonical in mapping.items():
        if canonical in seen:
            raise ValueError(f"splits {seen[canonical]!r} and {name!r} would both become {canonical!r}; keep one")
        seen[canonical] = name
    return mapping


def _ordered(splits: dict[str, Dataset]) -> DatasetDict:
    known = [name for name in _SPLIT_ORDER if name in splits]
    return DatasetDict({name: splits[name] for name in known + sorted(set(splits) - set(known))})


def _select_splits(corpus: DatasetDict, splits: Sequence[str] | None, data) -> DatasetDict:
    if not corpus:
        raise ValueError(f"no splits found in {data!r}")
    if splits is not None:
        missing = [split for split in splits if split not in corpus]
        if missing:
            raise ValueError(f"split(s) {missing} not found in {data!r}; it has {list(corpus)}")
        corpus = DatasetDict({split: corpus[split] for split in splits})
    if empty := [split for split, dataset in corpus.items() if len(dataset) == 0]:
        raise ValueError(f"the {' and '.join(empty)} split(s) of {str(data)!r} hold no sentence pairs")
    return corpus


def _choose_languages(
    available: Sequence[str], source_lang, target_lang, where: str, preferred: Sequence[str] | None = None
) -> tuple[str, str]:
    """Resolve (source, target) among the languages present, defaulting only when exactly two are present."""
    for lang in (source_lang, target_lang):
        if lang is not None and lang not in available:
            raise ValueError(f"language {lang!r} not found in {where}; available: {sorted(available)}")
    if source_lang is not None and target_lang is not None:
        if source_lang == target_lang:
            raise ValueError(f"source_lang and target_lang are both {source_lang!r}")
        return source_lang, target_lang
    if len(available) != 2:
        raise ValueError(
            f"{where} has languages {sorted(available)}: pass source_lang and target_lang (two of them)"
        )
    if source_lang is not None or target_lang is not None:
        given = source_lang or target_lang
        other = next(lang for lang in available if lang != given)
        return (given, other) if source_lang is not None else (other, given)
    for order in (*_DEFAULT_COLUMN_PAIRS, tuple(preferred or ())):
        if set(order) == set(available) and len(order) == 2:
            return order[0], order[1]
    first, second = available
    logger.warning("%s: translating %s -> %s (pass source_lang/target_lang to choose)", where, first, second)
    return first, second


def _columns_name_no_language(where: str, columns: Sequence[str], languages: Sequence[str | None]) -> None:
    """Languages were asked for, but the data's text columns are `source`/`target` (or `src`/`tgt`): they are read
    in that order, which may be the other direction; say so."""
    asked = [lang for lang in languages if lang is not None]
    if asked:
        logger.warning("%s: its columns do not name the language(s) %s; reading %r as the source and %r as the "
                       "target", where, " and ".join(map(repr, asked)), *columns)


# Line-aligned text files ----------------------------------------------------------------------------------------


def find_text_pairs(directory: Path) -> dict[str, dict[str, Path]]:
    """{split: {lang: path}} for the `{split}.{lang}[.gz]` files in a directory."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(directory.iterdir()):
        match = _TEXT_PAIR_FILE.match(path.name)
        if not path.is_file() or not match or match["lang"].lower() in _NOT_LANGUAGES:
            continue
        split, lang = match["split"], match["lang"]
        if lang in found.setdefault(split, {}):
            raise ValueError(f"both {found[split][lang].name} and {path.name} exist in {directory}; keep one")
        found[split][lang] = path
    return found


def _load_text_pairs(directory: Path, found, source_lang, target_lang) -> DatasetDict:
    languages = sorted({lang for langs in found.values() for lang in langs})
    source_lang, target_lang = _choose_languages(languages, source_lang, target_lang, str(directory))
    names = canonical_split_names([split for split, langs in found.items() if {source_lang, target_lang} & set(langs)])
    splits = {}
    for split, canonical in names.items():
        files = found[split]
        for lang in (source_lang, target_lang):
            if lang not in files:
                present = ", ".join(path.name for path in files.values())
                raise ValueError(
                    f"split {split!r} in {directory} has no {split}.{lang} or {split}.{lang}.gz (found: {present})"
                )
        splits[canonical] = _text_pairs_dataset(files[source_lang], files[target_lang])
    skipped = sorted(set(found) - set(names))
    if skipped:
        logger.info("%s: skipped split(s) %s: no %s or %s file", directory, skipped, source_lang, target_lang)
    return _ordered(splits)


def _text_pairs_dataset(source_path: Path, target_path: Path) -> Dataset:
    """The two files' lines as pairs, streamed into an Arrow file in the `datasets` cache (memory-mapped: a 4.5M-pair
    corpus is not held in memory). The cache is keyed by both files' paths and SHA-256 digests (about 1 s per GB),
    so a second run on unchanged files reads it back instead of the text, and a file changed in place, even with
    its size and modification time kept (`cp -p`, `rsync -a`), is read again."""
    files = {"source_path": str(source_path.resolve()), "target_path": str(target_path.resolve())}
    # A string: `from_generator` would split a list-valued argument into shards, one generator run each.
    digests = " ".join(sha256(path) for path in (source_path, target_path))
    try:
        return Dataset.from_generator(
            _line_pairs, features=PAIR_FEATURES, gen_kwargs={**files, "digests": digests},
            writer_batch_size=ROWS_PER_RECORD_BATCH,
        )
    except DatasetGenerationError as error:  # a line-count mismatch or bad UTF-8: our message, not the wrapper's
        raise (error.__cause__ if isinstance(error.__cause__, ValueError) else error) from None
    except ValueError as error:  # `datasets` on zero rows: 'Instruction "train" corresponds to no data!'
        if "corresponds to no data" not in str(error):
            raise
        raise ValueError(f"{source_path} and {target_path} hold no lines") from None


def _line_pairs(source_path: str, target_path: str, digests) -> Iterator[dict[str, str]]:
    """Rows {"source", "target"} from line-aligned files; unequal line counts are an error naming both files.
    (`digests` only keys the cache.)"""
    sources, targets = read_lines(source_path), read_lines(target_path)
    count = 0
    for count, (source, target) in enumerate(itertools.zip_longest(sources, targets), start=1):
        if source is None or target is None:
            longer = count + sum(1 for _ in (sources if target is None else targets))
            source_count, target_count = (longer, count - 1) if target is None else (count - 1, longer)
            raise ValueError(
                f"line counts differ: {source_path} has {source_count} lines but {target_path} has {target_count}; "
                "line N of one must be the translation of line N of the other"
            )
        yield {"source": source, "target": target}


# TSV and JSONL ---------------------------------------------------------------------------------------------------


def _find_data_files(directory: Path) -> tuple[str, dict[str, list[str]]] | None:
    """(format, {split: [files]}) for the `{split}.csv|json|parquet` files (and shards) of a directory, with the
    split names canonicalised as for text files (so `valid` and `validation` together are refused, and
    `newstest2014` stays a split of its own rather than being merged or dropped by `datasets`' file-name patterns);
    None when it has none. The train split's format is the corpus's; files of another format are left out, named."""
    by_format: dict[str, dict[str, list[str]]] = {}
    for path in sorted(directory.iterdir()):
        match = _DATA_FILE.match(path.name)
        if path.is_file() and match and match["split"] not in _DATASETS_METADATA:
            if not re.fullmatch(r"\w+", match["split"]):
                raise ValueError(f"{path}: a split's file is named {{split}}.{match['format']} (letters, digits, _) "
                                 f"or {{split}}-00000-of-00002.{match['format']} for shards")
            by_format.setdefault(match["format"], {}).setdefault(match["split"], []).append(str(path))
    if not by_format:
        return None
    with_train = [name for name, files in by_format.items() if "train" in files]
    if len(with_train) > 1 or (not with_train and len(by_format) > 1):
        raise ValueError(f"{directory} mixes {' and '.join(sorted(by_format))} files for its splits; keep one format")
    chosen = with_train[0] if with_train else next(iter(by_format))
    if ignored := sorted(path for name, files in by_format.items() if name != chosen for paths in files.values()
                         for path in paths):
        logger.warning("%s: reading its %s files; left out: %s", directory, chosen, ", ".join(ignored))
    names = canonical_split_names(list(by_format[chosen]))
    return chosen, {names[split]: files for split, files in by_format[chosen].items()}


def _load_data_files(builder: str, data_files: dict[str, list[str]], load_dataset_kwargs: dict) -> DatasetDict:
    """`datasets`' csv/json/parquet builder on the given files; CSV cells are read as stored (pandas would turn
    "NA", "None", "null", "n/a" ... into missing values). Its cache is keyed by the files' SHA-256 digests, as for
    text files, where `datasets` would key it by their modification times (an edit that keeps one was not seen)."""
    options = {"keep_default_na": False, "na_filter": False} if builder == "csv" else {}
    by_content = DataFilesDict({
        split: DataFilesList([os.path.abspath(path) for path in paths], [(sha256(path),) for path in paths])
        for split, paths in data_files.items()
    })
    return load_dataset(builder, data_files=by_content, **options, **load_dataset_kwargs)


def _find_tables(directory: Path) -> dict[str, Path]:
    tables: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        match = _TABLE_FILE.match(path.name)
        if path.is_file() and match:
            if match["split"] in tables:
                raise ValueError(f"both {tables[match['split']].name} and {path.name} exist in {directory}; keep one")
            tables[match["split"]] = path
    return tables


def _load_tables(tables: dict[str, Path], source_lang, target_lang, source_column, target_column) -> DatasetDict:
    if (source_column is None) != (target_column is None):
        raise ValueError("name both source_column and target_column, or neither")
    columns = (source_column, target_column) if source_column is not None else None
    languages = (source_lang, target_lang)
    names = canonical_split_names(list(tables))
    splits = {}
    for split, path in tables.items():
        reader = _read_tsv if _TABLE_FILE.match(path.name)["format"] == "tsv" else _read_jsonl
        splits[names[split]] = _pairs_dataset(*reader(path, columns, languages))
    return _ordered(splits)


def _read_tsv(path: Path, columns, languages) -> tuple[list[str], list[str]]:
    """`source<TAB>target` per line, or named columns picked from a header row: `columns` must be in the header,
    `languages` are used when both are. A `source<TAB>target` or `src<TAB>tgt` header is skipped. A sentence
    cannot contain a tab."""
    rows = [line.split("\t") for line in read_lines(path)]
    header = rows[0] if rows else []
    if columns is None and None not in languages and set(languages) <= set(header):
        columns = languages
    if columns is not None:
        missing = [name for name in columns if name not in header]
        if missing:
            raise ValueError(f"{path}: column(s) {missing} not in the header line {header}")
        positions, width, first_data_row = [header.index(name) for name in columns], len(header), 1
    else:
        positions, width, first_data_row = (0, 1), 2, int(tuple(header) in _DEFAULT_COLUMN_PAIRS)
        if first_data_row:
            _columns_name_no_language(str(path), header, languages)
    hint = ""
    if columns is None and all(languages):
        hint = f" (or a header row naming {languages[0]!r} and {languages[1]!r})"
    if first_data_row == 0 and None in languages and len(header) == 2 and all(map(_LANGUAGE_CODE.fullmatch, header)):
        logger.warning("%s: the first line %s looks like a header naming languages, but is read as a sentence pair: "
                       "pass source_lang and target_lang to use it as the header", path, header)
    sources, targets = [], []
    for number, fields in enumerate(rows[first_data_row:], start=first_data_row + 1):
        if len(fields) != width:
            raise ValueError(f"{path}: line {number} has {len(fields)} tab-separated fields, expected {width}{hint}")
        sources.append(fields[positions[0]])
        targets.append(fields[positions[1]])
    return sources, targets


def _read_jsonl(path: Path, columns, languages) -> tuple[list[str], list[str]]:
    """One JSON object per line: {"source": .., "target": ..}, {"de": .., "en": ..} or {"translation": {"de": ..}}.
    Blank lines are skipped."""
    sources, targets, keys = [], [], columns
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {number} is not valid JSON ({error.msg})") from None
        if isinstance(record, dict) and isinstance(record.get("translation"), dict):
            record = record["translation"]
        if not isinstance(record, dict):
            raise ValueError(f"{path}: line {number} is a JSON {type(record).__name__}, expected an object")
        if keys is None:
            keys = _choose_keys(list(record), languages, f"{path} line {number}")
        values = []
        for key in keys:
            if key not in record:
                raise ValueError(f"{path}: line {number} has no key {key!r} (keys: {list(record)})")
            value = record[key]
            if not isinstance(value, str):
                raise ValueError(f"{path}: line {number}: {key!r} is {type(value).__name__}, expected a string")
            values.append(value)
        sources.append(values[0])
        targets.append(values[1])
    return sources, targets


def _choose_keys(keys: list[str], languages, where: str) -> tuple[str, str]:
    """The languages when both are keys, else source/target or src/tgt keys, else languages among the keys."""
    if None in languages or not set(languages) <= set(keys):
        for pair in _DEFAULT_COLUMN_PAIRS:
            if set(pair) <= set(keys):
                _columns_name_no_language(where, pair, languages)
                return pair
    return _choose_languages(keys, *languages, where)


# datasets (Hub, local data folders, save_to_disk) ------------------------------------------------------------------


def _load_from_disk(path: Path) -> Dataset | DatasetDict:
    """`datasets.load_from_disk`, with its IndexError on a saved split of no rows named."""
    try:
        return load_from_disk(path)
    except IndexError:
        states = [path / "state.json"] if (path / "state.json").is_file() else sorted(path.glob("*/state.json"))
        empty = [state.parent.name for state in states
                 if not json.loads(state.read_text(encoding="utf-8")).get("_data_files")]
        if not empty:
            raise
        raise ValueError(f"{path}: the {' and '.join(empty)} split(s) hold no rows, which `datasets` cannot load "
                         "from disk; save the dataset without them") from None


def _from_datasets(
    raw: DatasetDict, source_lang, target_lang, source_column, target_column, dataset_config=None, keep=None
) -> DatasetDict:
    if isinstance(raw, Dataset):
        raw = DatasetDict({"train": raw})
    names = canonical_split_names(list(raw))
    first = next(iter(raw.values()))
    columns, features = first.column_names, first.features
    where = f"dataset with columns {columns}"
    if (source_column is None) != (target_column is None):
        raise ValueError("name both source_column and target_column, or neither")
    if source_column is not None:
        source_key = target_key = None
        for column in (source_column, target_column):
            if column not in columns:
                raise ValueError(f"column {column!r} not in the {where}")
    elif "translation" in columns:
        feature = features["translation"]
        if isinstance(feature, Json):  # rows of differing keys, kept as JSON: the languages of a sample
            sample = first.select(range(min(len(first), 10_000)))["translation"]
            languages = sorted({key for row in sample if isinstance(row, dict) for key in row})
        else:
            languages = list(getattr(feature, "languages", None) or feature.keys())
        preferred = dataset_config.split("-") if dataset_config and dataset_config.count("-") == 1 else None
        source_key, target_key = _choose_languages(
            languages, source_lang, target_lang, f"the translation column ({where})", preferred
        )
        source_column = target_column = "translation"
    else:
        source_key = target_key = None
        pairs = [(source_lang, target_lang)] if source_lang and target_lang else []
        pairs += _DEFAULT_COLUMN_PAIRS
        source_column, target_column = next(
            (pair for pair in pairs if set(pair) <= set(columns)), (None, None)
        )
        if source_column is None:
            raise ValueError(
                f"cannot find the text pairs in the {where}: expected a 'translation' column, columns named by "
                "source_lang/target_lang, 'source'/'target', or pass source_column/target_column"
            )
        if (source_column, target_column) in _DEFAULT_COLUMN_PAIRS:
            _columns_name_no_language(f"the {where}", (source_column, target_column), (source_lang, target_lang))

    def side(batch, column, key):
        if key is None:
            return batch[column]
        return [row.get(key) if isinstance(row, dict) else None for row in batch[column]]  # a JSON row may lack it

    def extract(batch):
        sides = {"source": side(batch, source_column, source_key), "target": side(batch, target_column, target_key)}
        for texts in sides.values():  # a JSON column is typed row by row
            if wrong := next((text for text in texts if text is not None and not isinstance(text, str)), None):
                raise ValueError(f"the {where} holds {wrong!r} where a sentence belongs, not text")
        # A missing side becomes "", which `filter_pairs` counts as empty instead of failing later.
        return {name: ["" if text is None else text for text in texts] for name, texts in sides.items()}

    splits = {}
    for split, dataset in raw.items():
        if keep is not None and names[split] not in keep:
            continue  # converting a split costs a pass over it (wmt14's train has 4.5M pairs)
        for column, key in ((source_column, source_key), (target_column, target_key)):
            feature = dataset.features[column]
            if isinstance(feature, Json):
                continue  # no declared type: `extract` checks each value
            if key is not None:  # a Translation feature holds strings; a struct column holds what it declares
                feature = Value("string") if isinstance(feature, Translation) else feature[key]
            if getattr(feature, "dtype", None) not in ("string", "large_string"):
                raise ValueError(f"split {split!r}: {column}{'.' + key if key else ''} holds {feature}, not text")
        splits[names[split]] = dataset.map(
            extract, batched=True, remove_columns=dataset.column_names, features=PAIR_FEATURES
        )
    return _ordered(splits)
