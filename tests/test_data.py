"""Parallel-corpus loaders: synthetic tasks, text-file pairs, TSV/JSONL, `datasets` folders; errors; filtering."""

import gzip
import json
import logging
import os
from pathlib import Path

import datasets
import numpy as np
import pytest
from datasets import Dataset, DatasetDict, Features, Translation, Value, load_from_disk
from transformers import AutoTokenizer

from modeling.data import corpus as corpus_module
from modeling.data.corpus import (
    filter_pairs,
    load_parallel_corpus,
    prepare_pairs,
    synthetic_task_dataset,
    tokenize_pairs,
)
from modeling.data.datasets_internals import cache_folder, fingerprint, indices_mapping
from modeling.tokenization import read_lines, train_tokenizer

PAIRS = [("Ein Hund.", "A dog."), ("  Zwei Katzen ", "Two cats"), ("Tab\tinside", "x"), ("Ümlaut ☃", "snowman ☃")]


def write_lines(path, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)


def as_pairs(dataset):
    columns = dataset[:]  # one conversion; iterating `dataset["source"]` converts row by row, far slower
    return list(zip(columns["source"], columns["target"]))


def assert_pair_columns(corpus):
    for dataset in corpus.values():
        assert dataset.column_names == ["source", "target"]
        assert dataset.features == Features({"source": Value("string"), "target": Value("string")})


# Synthetic tasks --------------------------------------------------------------------------------------------------


def test_copy_task_is_the_default_and_deterministic():
    corpus = load_parallel_corpus()
    assert list(corpus) == ["train", "validation", "test"]
    assert_pair_columns(corpus)
    assert as_pairs(corpus["train"]) == as_pairs(synthetic_task_dataset("copy", seed=0)["train"])
    assert all(source == target for source, target in as_pairs(corpus["train"]))
    assert as_pairs(synthetic_task_dataset(seed=1)["train"]) != as_pairs(corpus["train"])


def test_synthetic_tasks_respect_their_settings():
    corpus = synthetic_task_dataset("reverse", 50, 5, 7, seed=3, symbols=5, min_length=2, max_length=4)
    assert [len(corpus[split]) for split in corpus] == [50, 5, 7]
    for source, target in as_pairs(corpus["train"]):
        symbols = source.split(" ")
        assert 2 <= len(symbols) <= 4 and set(symbols) <= {"0", "1", "2", "3", "4"}
        assert target.split(" ") == symbols[::-1]
    # Same seed: the copy task has the same sources; a larger split starts with the smaller one.
    copy = synthetic_task_dataset("copy", 80, 5, 7, seed=3, symbols=5, min_length=2, max_length=4)
    assert copy["train"]["source"][:50] == corpus["train"]["source"][:]
    assert as_pairs(load_parallel_corpus("reverse")["train"])[0][1] == as_pairs(load_parallel_corpus()["train"])[0][
        1
    ][::-1]
    with pytest.raises(ValueError, match="'sort'.*'copy', 'reverse'"):
        synthetic_task_dataset("sort")
    with pytest.raises(ValueError, match="min_length=5, max_length=2"):
        synthetic_task_dataset(min_length=5, max_length=2)


# Line-aligned text files ------------------------------------------------------------------------------------------


def test_multi30k_loads_with_one_call_and_matches_the_files(multi30k_dir, multi30k_de_en):
    corpus = multi30k_de_en
    assert {split: len(corpus[split]) for split in corpus} == {"train": 29000, "validation": 1014, "test": 1000}
    assert_pair_columns(corpus)
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        de, en = (gzip.decompress((multi30k_dir / f"{name}.{lang}.gz").read_bytes()).decode() for lang in ("de", "en"))
        expected = list(zip(de.split("\n")[:-1], en.split("\n")[:-1]))
        assert as_pairs(corpus[split]) == expected
    french = load_parallel_corpus(multi30k_dir, "en", "fr", splits=["validation"])
    assert list(french) == ["validation"] and french["validation"][0]["target"].startswith("Un groupe")


def test_a_missing_path_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        load_parallel_corpus(tmp_path / "nowhere", "de", "en")


def test_multi30k_needs_the_languages_named(multi30k_dir):
    with pytest.raises(ValueError, match=r"\['cs', 'de', 'en', 'fr'\]: pass source_lang and target_lang"):
        load_parallel_corpus(multi30k_dir)
    with pytest.raises(ValueError, match=r"'xx' not found.*\['cs', 'de', 'en', 'fr'\]"):
        load_parallel_corpus(multi30k_dir, "de", "xx")
    with pytest.raises(ValueError, match=r"split\(s\) \['dev'\] not found.*\['train', 'validation', 'test'\]"):
        load_parallel_corpus(multi30k_dir, "de", "en", splits=["dev"])


def test_text_pairs_in_a_directory_plain_and_gzip(tmp_path, caplog):
    write_lines(tmp_path / "train.de", [s for s, _ in PAIRS])
    write_lines(tmp_path / "train.en.gz", [t for _, t in PAIRS], compress=True)
    write_lines(tmp_path / "dev.de", ["Hallo"])
    write_lines(tmp_path / "dev.en", ["Hello"])
    write_lines(tmp_path / "test2019.de", ["Tschüss"])
    write_lines(tmp_path / "test2019.en", ["Bye"])
    (tmp_path / "README.md").write_text("not a language\n")
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        corpus = load_parallel_corpus(tmp_path)  # exactly two languages: alphabetical order, logged
    assert "de -> en" in caplog.text
    assert list(corpus) == ["train", "validation", "test"]
    assert as_pairs(corpus["train"]) == PAIRS and as_pairs(corpus["test"]) == [("Tschüss", "Bye")]
    reverse = load_parallel_corpus(tmp_path, target_lang="de")
    assert as_pairs(reverse["validation"]) == [("Hello", "Hallo")]


def test_src_tgt_file_names_give_the_direction(tmp_path):
    write_lines(tmp_path / "train.src", ["3 1 2"])
    write_lines(tmp_path / "train.tgt", ["1 2 3"])
    assert as_pairs(load_parallel_corpus(tmp_path)["train"]) == [("3 1 2", "1 2 3")]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    write_lines(tmp_path / "train.de", ["a", "b", "c"])
    write_lines(tmp_path / "train.en", ["a", "b"])
    with pytest.raises(ValueError, match=r"train\.de has 3 lines but .*train\.en has 2"):
        load_parallel_corpus(tmp_path, "de", "en")


def test_empty_files_are_named_with_their_split(tmp_path):
    write_lines(tmp_path / "train.de", ["a"])
    write_lines(tmp_path / "train.en", ["b"])
    (tmp_path / "val.de").write_text("")
    (tmp_path / "val.en").write_text("")
    with pytest.raises(ValueError, match=r"val\.de and .*val\.en hold no lines"):
        load_parallel_corpus(tmp_path, "de", "en")


def test_a_split_of_no_pairs_in_any_format_is_named(tmp_path):
    """A header-only TSV, a JSONL file of blank lines, a save_to_disk split of no rows: one line naming the split
    (the tokenizing step found no token columns in them: a KeyError; `datasets` cannot load the last: IndexError)."""
    (tmp_path / "tsv").mkdir()
    (tmp_path / "tsv" / "train.tsv").write_text("ein Hund\ta dog\n")
    (tmp_path / "tsv" / "validation.tsv").write_text("de\ten\n")
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "train.jsonl").write_text('{"de": "ein Hund", "en": "a dog"}\n')
    (tmp_path / "jsonl" / "test.jsonl").write_text("\n  \n")
    for folder, split in (("tsv", "validation"), ("jsonl", "test")):
        with pytest.raises(ValueError, match=rf"the {split} split\(s\) of .*{folder}' hold no sentence pairs"):
            load_parallel_corpus(tmp_path / folder, "de", "en")
    DatasetDict(train=Dataset.from_dict({"de": ["ein Hund"], "en": ["a dog"]}),
                validation=Dataset.from_dict({"de": [], "en": []})).save_to_disk(tmp_path / "saved")
    with pytest.raises(ValueError, match=r"saved: the validation split\(s\) hold no rows, which `datasets` cannot "):
        load_parallel_corpus(tmp_path / "saved", "de", "en")


def test_undecodable_bytes_name_file_and_line(tmp_path):
    (tmp_path / "train.de").write_bytes(b"gut\nschlecht \xc3\x28\n")
    write_lines(tmp_path / "train.en", ["good", "bad"])
    with pytest.raises(ValueError, match=r"train\.de: line 2 is not valid UTF-8"):
        load_parallel_corpus(tmp_path, "de", "en")


def test_a_split_missing_one_side_is_named(tmp_path):
    for name in ("train.de", "train.en", "valid.de"):
        write_lines(tmp_path / name, ["x"])
    with pytest.raises(ValueError, match=r"split 'valid' .* has no valid\.en or valid\.en\.gz \(found: valid\.de"):
        load_parallel_corpus(tmp_path, "de", "en")


# TSV and JSONL ----------------------------------------------------------------------------------------------------


def test_tsv_with_and_without_header(tmp_path, caplog):
    write_lines(tmp_path / "train.tsv", ["source\ttarget"] + [f"{s}\t{t}" for s, t in PAIRS[:2]])
    write_lines(tmp_path / "valid.tsv.gz", ["Hallo\tHello"], compress=True)
    corpus = load_parallel_corpus(tmp_path)
    assert as_pairs(corpus["train"]) == PAIRS[:2] and as_pairs(corpus["validation"]) == [("Hallo", "Hello")]

    named = tmp_path / "named.tsv"
    write_lines(named, ["id\ten\tde", "1\tA dog.\tEin Hund."])
    assert as_pairs(load_parallel_corpus(named, "de", "en")["train"]) == [("Ein Hund.", "A dog.")]
    with pytest.raises(ValueError, match=r"line 1 has 3 tab-separated fields, expected 2 \(or a header row naming"):
        load_parallel_corpus(named, "fr", "en")
    with pytest.raises(ValueError, match=r"column\(s\) \['fr'\] not in the header line \['id', 'en', 'de'\]"):
        load_parallel_corpus(named, source_column="fr", target_column="en")

    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):  # languages asked of source/target columns
        assert as_pairs(load_parallel_corpus(tmp_path, "en", "de")["train"]) == PAIRS[:2]
    assert "train.tsv: its columns do not name the language(s) 'en' and 'de'; reading 'source' as the source" in (
        caplog.text)
    caplog.clear()

    languages = tmp_path / "languages.tsv"
    write_lines(languages, ["de\ten", "Ein Hund.\tA dog."])
    assert as_pairs(load_parallel_corpus(languages, "de", "en")["train"]) == [("Ein Hund.", "A dog.")]
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        assert len(load_parallel_corpus(languages)["train"]) == 2  # no languages given: the header is a pair
    assert "looks like a header naming languages, but is read as a sentence pair" in caplog.text
    caplog.clear()
    one_column = tmp_path / "one_column.tsv"
    write_lines(one_column, ["ja", "Ein Hund.\tA dog."])
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"), pytest.raises(ValueError, match="line 1 has 1"):
        load_parallel_corpus(one_column)
    assert "looks like a header" not in caplog.text

    broken = tmp_path / "broken.tsv"
    write_lines(broken, ["a\tb", "c\td\te"])
    with pytest.raises(ValueError, match="broken.tsv: line 2 has 3 tab-separated fields, expected 2"):
        load_parallel_corpus(broken)


def test_jsonl_flat_and_translation_objects(tmp_path, caplog):
    write_lines(tmp_path / "train.jsonl", [json.dumps({"source": s, "target": t}) for s, t in PAIRS] + [""])
    write_lines(tmp_path / "test.jsonl", [json.dumps({"translation": {"de": "Hallo", "en": "Hello", "fr": "Salut"}})])
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        corpus = load_parallel_corpus(tmp_path, "en", "fr")
    assert as_pairs(corpus["train"]) == PAIRS and as_pairs(corpus["test"]) == [("Hello", "Salut")]
    assert "train.jsonl line 1: its columns do not name the language(s) 'en' and 'fr'" in caplog.text
    assert "test.jsonl" not in caplog.text

    bad = tmp_path / "bad.jsonl"
    write_lines(bad, [json.dumps({"de": "a", "en": "b"}), "{not json", ""])
    with pytest.raises(ValueError, match="bad.jsonl: line 2 is not valid JSON"):
        load_parallel_corpus(bad, "de", "en")
    write_lines(bad, [json.dumps({"de": "a", "en": "b"}), json.dumps({"de": "c"})])
    with pytest.raises(ValueError, match=r"line 2 has no key 'en'"):
        load_parallel_corpus(bad, "de", "en")


# `datasets` folders (the Hub code path) ---------------------------------------------------------------------------


def test_local_dataset_folder_with_a_translation_column_goes_through_load_dataset(tmp_path):
    features = Features({"translation": Translation(languages=["de", "en"])})
    for split, pairs in (("train", PAIRS), ("validation", PAIRS[:1])):
        rows = {"translation": [{"de": s, "en": t} for s, t in pairs]}
        Dataset.from_dict(rows, features=features).to_parquet(tmp_path / "data" / f"{split}-00000-of-00001.parquet")
    corpus = load_parallel_corpus(tmp_path, "de", "en")
    assert list(corpus) == ["train", "validation"]
    assert_pair_columns(corpus)
    assert as_pairs(corpus["train"]) == PAIRS
    assert as_pairs(load_parallel_corpus(tmp_path, "en", "de")["validation"]) == [(PAIRS[0][1], PAIRS[0][0])]


def test_a_folder_of_csv_files_keeps_each_file_a_split_and_each_cell_as_stored(tmp_path, monkeypatch):
    """`datasets`' file-name patterns would merge `train.csv` and `train_backtranslated.csv` and drop
    `newstest2014.csv`; pandas would read "NA" or "null" as missing values."""
    corpus_dir = tmp_path / "csv"  # named like datasets' csv builder: read as this folder, by its path
    corpus_dir.mkdir()
    for split, rows in (("train", ["Hallo,hello", "NA,null"]), ("train_backtranslated", ["a,b"]), ("dev", ["c,d"]),
                        ("newstest2014", ["e,f"])):
        write_lines(corpus_dir / f"{split}.csv", ["de,en", *rows])
    monkeypatch.chdir(tmp_path)
    corpus = load_parallel_corpus("csv", "de", "en")
    assert {split: len(rows) for split, rows in corpus.items()} == {
        "train": 2, "validation": 1, "train_backtranslated": 1, "newstest2014": 1}
    assert as_pairs(corpus["train"]) == [("Hallo", "hello"), ("NA", "null")]
    write_lines(corpus_dir / "validation.csv", ["de,en", "g,h"])
    with pytest.raises(ValueError, match=r"splits 'dev' and 'validation' would both become 'validation'; keep one"):
        load_parallel_corpus(corpus_dir, "de", "en")


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_csv_files_are_cached_by_their_content(tmp_path, monkeypatch, kind):
    """`datasets` keys a data file's cache by its modification time: a file edited in place with its time kept
    (`cp -p`, `rsync -a` of another version) is read again, as text files are."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    table = corpus_dir / "train.csv"
    write_lines(table, ["de,en", "A,B", "C,D"])
    path = corpus_dir if kind == "folder" else table
    first = load_parallel_corpus(path, "de", "en")["train"]
    assert as_pairs(first) == [("A", "B"), ("C", "D")]
    assert load_parallel_corpus(path, "de", "en")["train"].cache_files == first.cache_files  # reused
    stat = table.stat()
    write_lines(table, ["de,en", "X,Y", "C,D"])
    os.utime(table, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert as_pairs(load_parallel_corpus(path, "de", "en")["train"]) == [("X", "Y"), ("C", "D")]


def test_a_folder_of_data_files_takes_shards_ignores_other_formats_and_yields_to_data_files(tmp_path, caplog):
    for shard, pairs in enumerate((PAIRS[:2], PAIRS[2:])):
        Dataset.from_dict({"de": [s for s, _ in pairs], "en": [t for _, t in pairs]}).to_parquet(
            tmp_path / f"train-0000{shard}-of-00002.parquet")
    (tmp_path / "metadata.json").write_text('{"license": "cc-by"}\n')  # not data: another format than train's
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        corpus = load_parallel_corpus(tmp_path, "de", "en")
    assert as_pairs(corpus["train"]) == PAIRS and list(corpus) == ["train"]
    assert "reading its parquet files; left out: " in caplog.text and "metadata.json" in caplog.text
    chosen = load_parallel_corpus(tmp_path, "de", "en", data_files={"train": str(tmp_path / "train-00001-of-00002"
                                                                                              ".parquet")})
    assert as_pairs(chosen["train"]) == PAIRS[2:]  # the caller's data_files, not the folder's files
    (tmp_path / "train-part1.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=r"train-part1.parquet: a split's file is named \{split\}.parquet"):
        load_parallel_corpus(tmp_path, "de", "en")


def test_a_translation_column_whose_rows_differ_keeps_every_row(tmp_path):
    """Rows lacking a language, or with a third one, or null: `datasets` types such a column as JSON; a missing
    side becomes "" (counted as empty when filtering), as for a Translation column."""
    rows = [{"translation": {"de": "a", "en": "A"}}, {"translation": {"de": "b"}},
            {"translation": {"de": "c", "en": "C", "fr": "ç"}}, {"translation": None}]
    (tmp_path / "train.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    corpus = load_parallel_corpus(tmp_path, "de", "en")
    assert as_pairs(corpus["train"]) == [("a", "A"), ("b", ""), ("c", "C"), ("", "")]


def test_translation_direction_defaults_to_the_config_name_order():
    from modeling.data.corpus import _from_datasets  # what load_parallel_corpus("wmt14", dataset_config="de-en") runs

    features = Features({"translation": Translation(languages=["de", "en"])})
    raw = DatasetDict({"train": Dataset.from_dict({"translation": [{"de": "Hund", "en": "dog"}]}, features=features)})
    assert as_pairs(_from_datasets(raw, None, None, None, None, "en-de")["train"]) == [("dog", "Hund")]
    assert as_pairs(_from_datasets(raw, None, None, None, None, "de-en")["train"]) == [("Hund", "dog")]


def test_two_named_columns_and_save_to_disk_folders(tmp_path, caplog):
    rows = {"german": [s for s, _ in PAIRS], "english": [t for _, t in PAIRS], "score": [1.0] * len(PAIRS)}
    DatasetDict({"train": Dataset.from_dict(rows)}).save_to_disk(tmp_path / "saved")
    corpus = load_parallel_corpus(tmp_path / "saved", source_column="german", target_column="english")
    assert as_pairs(corpus["train"]) == PAIRS
    with pytest.raises(ValueError, match=r"cannot find the text pairs .*'german', 'english', 'score'"):
        load_parallel_corpus(tmp_path / "saved")
    with pytest.raises(ValueError, match="score.* not text"):
        load_parallel_corpus(tmp_path / "saved", source_column="german", target_column="score")
    Dataset.from_dict(rows).save_to_disk(tmp_path / "one")  # a single Dataset: the train split
    assert as_pairs(load_parallel_corpus(tmp_path / "one", source_column="german", target_column="english")["train"]) \
        == PAIRS
    unnamed = {"source": rows["german"], "target": rows["english"]}
    DatasetDict({"train": Dataset.from_dict(unnamed)}).save_to_disk(tmp_path / "unnamed")
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        assert as_pairs(load_parallel_corpus(tmp_path / "unnamed", "en", "de")["train"]) == PAIRS
    assert "columns ['source', 'target']: its columns do not name the language(s) 'en' and 'de'" in caplog.text


# Filtering and tokenization ---------------------------------------------------------------------------------------


def test_filter_pairs_counts_what_it_removes(caplog):
    pairs = [("ok", "fine"), ("", "empty source"), ("empty target", "  "), ("x" * 30, "long source"), ("a", "b")]
    corpus = DatasetDict({
        "train": Dataset.from_dict({"source": [s for s, _ in pairs], "target": [t for _, t in pairs]}),
        "test": Dataset.from_dict({"source": ["kept"], "target": ["kept"]}),
    })
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        filtered, report = filter_pairs(corpus, max_length=20)
    assert report == {
        "train": {"total": 5, "empty": 2, "too_long": 1, "kept": 2},
        "test": {"total": 1, "empty": 0, "too_long": 0, "kept": 1},
    }
    assert as_pairs(filtered["train"]) == [("ok", "fine"), ("a", "b")] and len(filtered["test"]) == 1
    assert "train: removed 3 of 5 pairs: 2 empty, 1 too long (longer than 20 characters)" in caplog.text
    assert "test:" not in caplog.text


def test_filter_pairs_by_tokens_and_tokenize_pairs():
    corpus = synthetic_task_dataset(num_train=200, num_validation=20, num_test=20, max_length=12)
    tokenizer = train_tokenizer(corpus["train"]["source"], vocab_size=280)
    filtered, report = filter_pairs(corpus, max_length=8, tokenizer=tokenizer)
    lengths = [len(ids) for ids in tokenizer(corpus["train"]["source"][:])["input_ids"]]
    assert report["train"]["too_long"] == sum(length > 8 for length in lengths) > 0
    tokenized = tokenize_pairs(filtered, tokenizer)
    assert tokenized["train"].column_names == ["input_ids", "labels"]  # the collator makes the attention mask
    assert {feature.feature.dtype for feature in tokenized["train"].features.values()} == {"int32"}
    assert max(len(ids) for ids in tokenized["train"]["input_ids"]) <= 8
    decoded = tokenizer.batch_decode(tokenized["train"]["labels"][:], skip_special_tokens=True)
    assert decoded == filtered["train"]["target"][:]
    separate = tokenize_pairs(filtered, tokenizer, target_tokenizer=train_tokenizer(["a b"], vocab_size=260))
    assert separate["test"]["labels"][:] != tokenized["test"]["labels"][:]


def test_prepare_pairs_tokenizes_once_and_filters_like_filter_pairs(caplog):
    pairs = [("ein Hund", "a dog"), ("\u3000\t", "blank source (ideographic space)"), ("zwei", " \u2003"),
             ("xq" * 20, "too long"), ("Katze", "cat")]
    sources, targets = map(list, zip(*pairs))
    corpus = DatasetDict({"train": Dataset.from_dict({"source": sources, "target": targets})})
    tokenizer = train_tokenizer(["ein Hund", "a dog", "Katze", "cat"] * 5, vocab_size=300)
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        text, tokenized, report = prepare_pairs(corpus, tokenizer, max_length=10)
    assert report == {"train": {"total": 5, "empty": 2, "too_long": 1, "kept": 2}}
    assert "train: removed 3 of 5 pairs: 2 empty, 1 too long (longer than 10 tokens)" in caplog.text
    assert as_pairs(text["train"]) == [("ein Hund", "a dog"), ("Katze", "cat")]
    expected = tokenizer(["ein Hund", "Katze"], text_target=["a dog", "cat"])
    assert tokenized["train"]["input_ids"][:] == expected["input_ids"]
    assert tokenized["train"]["labels"][:] == expected["labels"]
    assert filter_pairs(corpus, max_length=10, tokenizer=tokenizer)[1] == report
    _, everything, kept_all = prepare_pairs(corpus, tokenizer, max_length=None, remove_empty=False)
    assert kept_all["train"]["kept"] == len(everything["train"]) == 5


@pytest.mark.parametrize("damage", ["not gzip", "cut short"])
def test_a_damaged_gzip_file_is_named_when_loading(tmp_path, damage):
    write_lines(tmp_path / "train.de", [s for s, _ in PAIRS])
    compressed = gzip.compress("".join(f"{t}\n" for _, t in PAIRS * 200).encode())
    (tmp_path / "train.en.gz").write_bytes(b"plain text" if damage == "not gzip" else compressed[:-40])
    with pytest.raises(ValueError, match=r"train\.en\.gz: cannot be read as gzip after line \d+ \("):
        load_parallel_corpus(tmp_path, "de", "en")


def test_read_lines_is_what_the_loaders_use_for_text_files(tmp_path):
    write_lines(tmp_path / "x.gz", ["eins", "", " zwei "], compress=True)
    assert list(read_lines(tmp_path / "x.gz")) == ["eins", "", " zwei "]


def test_carriage_return_line_endings_are_warned_of(tmp_path, caplog):
    """Only \\n ends a line: a file with \\r endings is one line (two such files made one training pair, silently)."""
    (tmp_path / "mac.de").write_bytes(b"eins\rzwei\rdrei\r")
    (tmp_path / "dos.de").write_bytes(b"eins\r\nzwei\r\n")
    with caplog.at_level(logging.WARNING):
        assert list(read_lines(tmp_path / "dos.de")) == ["eins", "zwei"]
        assert not caplog.records
        assert list(read_lines(tmp_path / "mac.de")) == ["eins\rzwei\rdrei"]
    assert [record.getMessage() for record in caplog.records] == [
        f"{tmp_path / 'mac.de'}: line 1 holds a carriage return (\\r) inside it; only \\n ends a line, so a file with "
        "\\r line endings (old Mac) reads as one line: convert it with tr '\\r' '\\n'"
    ]


def test_text_files_and_their_tokens_are_cached_and_reused_while_nothing_changes(tmp_path, monkeypatch):
    """A second run (fresh tokenizer object loaded from disk) reads the Arrow files the first one wrote; edited text
    or another tokenizer is not served from the cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    write_lines(corpus_dir / "train.de", ["ein Hund", "eine Katze", "zwei Hunde"])
    write_lines(corpus_dir / "train.en", ["a dog", "a cat", "two dogs"])
    train_tokenizer(["ein Hund", "a dog", "eine Katze", "a cat"], vocab_size=270).save_pretrained(tmp_path / "tok")

    def run(tokenizer_dir=tmp_path / "tok"):
        corpus = load_parallel_corpus(corpus_dir, "de", "en")
        _, tokenized, _ = prepare_pairs(corpus, AutoTokenizer.from_pretrained(tokenizer_dir), max_length=50)
        return corpus["train"], tokenized["train"]

    text, tokens = run()
    assert text.cache_files and tokens.cache_files  # memory-mapped Arrow files, not Python lists
    files = [entry["filename"] for entry in (*text.cache_files, *tokens.cache_files)]
    again_text, again_tokens = run()
    assert [entry["filename"] for entry in (*again_text.cache_files, *again_tokens.cache_files)] == files
    assert again_tokens["labels"][:] == tokens["labels"][:]

    train_tokenizer(["ganz anders", "quite different"], vocab_size=270).save_pretrained(tmp_path / "other")
    _, other_tokens = run(tmp_path / "other")
    assert other_tokens.cache_files[0]["filename"] != tokens.cache_files[0]["filename"]
    write_lines(corpus_dir / "train.en", ["a dog", "a cat", "two cats"])
    edited_text, _ = run()
    assert edited_text["target"][2] == "two cats"
    # edited in place with its size and modification time kept (`cp -p`, `rsync -a` of another version)
    stat = (corpus_dir / "train.en").stat()
    write_lines(corpus_dir / "train.en", ["a dog", "a cat", "two rats"])
    os.utime(corpus_dir / "train.en", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (corpus_dir / "train.en").stat().st_size == stat.st_size
    assert run()[0]["target"][2] == "two rats"


def test_the_fast_token_path_gives_the_ids_of_the_tokenizer_call():
    texts = ["Ein Hund läuft.", "", "  zwei  Leerzeichen ", "ﬁ Ligatur (NFKC)", "数字 123"]
    tokenizer = train_tokenizer(texts * 3, vocab_size=300)
    tokenized = tokenize_pairs(DatasetDict({"train": Dataset.from_dict({"source": texts, "target": texts[::-1]})}),
                               tokenizer)["train"]
    assert tokenized["input_ids"][:] == tokenizer(texts)["input_ids"]
    assert tokenized["labels"][:] == tokenizer(texts[::-1])["input_ids"]


def test_tokens_are_neither_cut_nor_padded_by_the_tokenizers_saved_or_last_settings(tmp_path, monkeypatch):
    """A backend left truncating by an earlier call (translate's truncation=True) or saved truncating and padding:
    the pairs are tokenized as the tokenizer's plain call does, so a long pair is filtered, not cut, and labels hold
    no padding; nor is a cut result served from the cache to a clean tokenizer."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    texts = ["ein sehr langer Satz mit vielen Woertern und noch mehr", "kurz"]
    corpus = DatasetDict({"train": Dataset.from_dict({"source": texts, "target": ["kurz", "kurz"]})})
    tokenizer = train_tokenizer(texts * 5, vocab_size=300)
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    assert lengths[0] > 8
    tokenizer(texts, truncation=True, max_length=5)
    assert tokenizer.backend_tokenizer.truncation is not None  # what the fast path would have obeyed
    assert [len(ids) for ids in tokenize_pairs(corpus, tokenizer)["train"]["input_ids"]] == lengths

    tokenizer.backend_tokenizer.enable_padding(pad_id=tokenizer.pad_token_id, length=20)
    tokenizer.save_pretrained(tmp_path / "saved")
    saved = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert saved.backend_tokenizer.truncation is not None and saved.backend_tokenizer.padding is not None
    _, tokenized, report = prepare_pairs(corpus, saved, max_length=8)
    assert report["train"]["too_long"] == 1
    short = tokenizer(["kurz"])["input_ids"]
    assert tokenized["train"]["input_ids"][:] == short and tokenized["train"]["labels"][:] == short


def test_the_filter_reads_a_chunk_at_a_time_and_its_result_is_kept_beside_the_tokens(tmp_path, monkeypatch, caplog):
    """Filtered a few pairs at a time, the same pairs are kept as at once; a second run on the cached tokens reads
    the kept indices and the report back (no text is read to filter it) and keeps its indices mapping in a file;
    another max_length filters again, and a result a stopped run left incomplete is made again."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    sources = ["ein Hund", "", "zwei Hunde", "Katze " * 9, "eine Katze", " ", "drei", "vier", "fünf"]
    targets = ["a dog", "nothing", "two dogs", "cat " * 9, "a cat", "blank", "three", "\u2003", "five"]
    write_lines(corpus_dir / "train.de", sources)
    write_lines(corpus_dir / "train.en", targets)
    tokenizer = train_tokenizer(sources + targets, vocab_size=300)
    expected = [(s, t) for s, t in zip(sources, targets) if s.strip() and t.strip() and "Katze K" not in s]

    def run(max_length=8):
        corpus = load_parallel_corpus(corpus_dir, "de", "en")
        return prepare_pairs(corpus, tokenizer, max_length=max_length)

    at_once = run()
    monkeypatch.setattr(corpus_module, "FILTERED_AT_A_TIME", 2)
    folder = Path(at_once[1]["train"].cache_files[0]["filename"]).parent
    for found in folder.glob("filter-*"):
        found.unlink()
    text, tokens, report = run()
    assert as_pairs(text["train"]) == as_pairs(at_once[0]["train"]) == expected
    assert report == at_once[2] == {"train": {"total": 9, "empty": 3, "too_long": 1, "kept": 5}}
    assert tokens["train"]["labels"][:] == at_once[1]["train"]["labels"][:]
    assert any("indices-" in entry["filename"] for entry in tokens["train"].cache_files)

    def no_text_read(_):
        raise AssertionError("the texts were read to filter them")

    monkeypatch.setattr(corpus_module, "_blank", no_text_read)
    with caplog.at_level(logging.WARNING, logger="modeling.data.corpus"):
        again = run()
    assert as_pairs(again[0]["train"]) == expected and again[2] == report
    assert "train: removed 4 of 9 pairs: 3 empty, 1 too long (longer than 8 tokens)" in caplog.text
    with pytest.raises(AssertionError, match="the texts were read"):
        run(max_length=9)
    monkeypatch.undo()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    for indices in folder.glob("filter-*.npy"):
        np.save(indices, np.load(indices)[:2])  # cut short, as by a full disk
    assert as_pairs(run()[0]["train"]) == expected


# What the package reads of `datasets` beyond its public API ----------------------------------------------------------


def test_the_private_attributes_read_of_a_dataset_still_hold_what_they_held(tmp_path):
    """`Dataset._fingerprint` keys the tokens', the filter's and the batches' caches, and `Dataset._indices` gives the
    token lengths of selected rows (`modeling.data.datasets_internals`): a `datasets` release that renames either,
    or changes what it holds, fails here, naming the attribute."""
    Dataset.from_dict({"row": list(range(10))}).save_to_disk(tmp_path / "rows")
    stored = load_from_disk(tmp_path / "rows")
    for attribute in ("_fingerprint", "_indices"):
        assert hasattr(stored, attribute), f"datasets {datasets.__version__} has no Dataset.{attribute}"
    selected, shuffled = stored.select([7, 2, 5]), stored.shuffle(seed=0)
    assert fingerprint(load_from_disk(tmp_path / "rows")) == fingerprint(stored), "Dataset._fingerprint: not the saved"
    assert len({fingerprint(stored), fingerprint(selected), fingerprint(shuffled)}) == 3, (
        "Dataset._fingerprint: the same for other rows")
    assert fingerprint(stored.map(lambda row: row, new_fingerprint="chosen")) == "chosen", (
        "Dataset._fingerprint: not what a transform's new_fingerprint sets")
    assert indices_mapping(stored) is None, "Dataset._indices: a mapping on rows never selected"
    for dataset in (selected, shuffled, shuffled.select([3, 1])):
        assert indices_mapping(dataset).tolist() == dataset["row"][:], (
            "Dataset._indices: no longer the stored row of each row")
    assert cache_folder(stored) == tmp_path / "rows" and cache_folder(Dataset.from_dict({"row": [0]})) is None
