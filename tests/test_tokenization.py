"""The byte-level BPE tokenizer: exact round trip, special-token ids, save/load, vocabulary size, training speed."""

import gzip
import json
import random
import re
import unicodedata
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from modeling.data.corpus import synthetic_task_dataset
from modeling.tokenization import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    TARGET_TOKENIZER_SUBDIR,
    TRAINING_WORD_LENGTH,
    _build_backend_tokenizer,
    _cut_long_words,
    dataset_texts,
    load_tokenizers,
    read_lines,
    save_tokenizers,
    train_tokenizer,
    train_translation_tokenizers,
)

CORPUS = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "A man rides his bicycle through the city.",
    "Zwei Hunde spielen im Schnee.",
    "Two dogs are playing in the snow.",
    "Une femme lit un livre dans le parc.",
    "Žena čte knihu v parku.",
] * 20

# NFKC-normalized strings (the test checks that), so the round trip must give them back unchanged.
WRITTEN = {
    "emoji": "Party 🎉 with 👩🏽‍🚀 and ❤️!",
    "cjk": "我爱北京天安门。日本語のテキスト、한국어 문장",
    "combining marks": "q\u0307 x\u0323\u0302 \u0915\u093f\u0924\u093e\u092c "
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "tabs": "column one\tcolumn two\t\tend",
    "leading and trailing spaces": "  two before, three after   ",
    "repeated spaces": "a  b   c    d",
    "newline inside": "line one\nline two",
    "other scripts": "Ελληνικά, русский, العربية, ไทยภาษา, Tiếng Việt",
    "zero-width and line separator": "a\u200bb\u2028c",
    "special-token strings as text": "<s> x </s> <pad> <unk> <pad > < /s>",
    "single space": " ",
    "empty": "",
}


@pytest.fixture(scope="module")
def small_tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400, min_frequency=1)


def test_special_tokens_have_the_fixed_ids(small_tokenizer):
    assert SPECIAL_TOKENS == ("<pad>", "<s>", "</s>", "<unk>")
    assert small_tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3]
    assert (small_tokenizer.pad_token_id, small_tokenizer.bos_token_id) == (0, 1)
    assert (small_tokenizer.eos_token_id, small_tokenizer.unk_token_id) == (2, 3)
    assert isinstance(small_tokenizer, PreTrainedTokenizerFast)


@pytest.mark.parametrize("name", WRITTEN)
def test_written_strings_round_trip_exactly_without_unk(small_tokenizer, name):
    text = WRITTEN[name]
    assert unicodedata.normalize("NFKC", text) == text, "the test string itself must be NFKC-normalized"
    ids = small_tokenizer(text)["input_ids"]
    assert ids[-1] == small_tokenizer.eos_token_id and not set(ids[:-1]) & {0, 1, 2, 3}
    assert small_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_nfkc_folds_compatibility_characters(small_tokenizer):
    # The round trip is exact for NFKC text; other text comes back NFKC-normalized.
    for text, normalized in [("ﬁne", "fine"), ("ＡＢＣ１２３", "ABC123"), ("120\u00a0cm", "120 cm"), ("e\u0301", "é")]:
        decoded = small_tokenizer.decode(small_tokenizer(text)["input_ids"], skip_special_tokens=True)
        assert decoded == normalized != text


def test_first_word_is_tokenized_as_inside_a_sentence(small_tokenizer):
    # The normalizer prepends a space, so "Hunde" at the start gets the same tokens as after a space.
    alone = small_tokenizer.tokenize("Hunde spielen")
    inside = small_tokenizer.tokenize("Zwei Hunde spielen")
    assert inside[-len(alone):] == alone


def test_text_target_gives_labels_and_batch_decode_is_clean(small_tokenizer):
    sources = ["Zwei Hunde spielen im Schnee.", "Ein Mann."]
    targets = ["Two dogs are playing in the snow.", "A man."]
    encoded = small_tokenizer(sources, text_target=targets)
    assert set(encoded) == {"input_ids", "attention_mask", "labels"}
    for ids in encoded["input_ids"] + encoded["labels"]:
        assert ids[-1] == 2 and 1 not in ids  # </s> appended, <s> left to the model's decoder start
    assert small_tokenizer.batch_decode(encoded["labels"], skip_special_tokens=True) == targets
    padded = small_tokenizer(sources, text_target=targets, padding=True)
    assert small_tokenizer.batch_decode(padded["input_ids"], skip_special_tokens=True) == sources
    assert padded["input_ids"][1][-1] == small_tokenizer.pad_token_id


def test_save_pretrained_and_auto_tokenizer_give_the_same_tokenizer(small_tokenizer, tmp_path):
    small_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert loaded.get_vocab() == small_tokenizer.get_vocab()
    assert loaded.all_special_ids == small_tokenizer.all_special_ids
    assert loaded.model_max_length == small_tokenizer.model_max_length and loaded.split_special_tokens
    texts = list(WRITTEN.values()) + CORPUS[:6]
    assert loaded(texts)["input_ids"] == small_tokenizer(texts)["input_ids"]
    assert loaded.batch_decode(loaded(texts)["input_ids"], skip_special_tokens=True) == texts


def test_vocabulary_size_is_honoured(multi30k_de_en):
    train = multi30k_de_en["train"].select(range(3000))
    for vocab_size in (MIN_VOCAB_SIZE + 40, 2000):
        assert len(train_tokenizer(dataset_texts(train), vocab_size=vocab_size)) == vocab_size
    with pytest.raises(ValueError, match=f"at least {MIN_VOCAB_SIZE}"):
        train_tokenizer(CORPUS, vocab_size=MIN_VOCAB_SIZE - 1)


def _is_unusual(line: str) -> bool:
    return line != line.strip() or "  " in line or "\t" in line or unicodedata.normalize("NFKC", line) != line


def test_multi30k_lines_round_trip_in_all_four_languages(multi30k_dir, multi30k_tokenizer):
    tokenizer = multi30k_tokenizer.tokenizer  # trained on de+en: French and Czech characters are partly unseen
    for lang in ("de", "en", "fr", "cs"):
        # All validation and test lines, the first 500 training lines, and every training line with leading,
        # trailing, repeated or tab whitespace or with characters NFKC changes (no-break spaces in German).
        train = list(read_lines(multi30k_dir / f"train.{lang}.gz"))
        unusual = [line for line in train[500:] if _is_unusual(line)]
        lines = train[:500] + unusual
        for split in ("val", "test_2016_flickr"):
            lines += read_lines(multi30k_dir / f"{split}.{lang}.gz")
        ids = tokenizer(lines)["input_ids"]
        assert not any(tokenizer.unk_token_id in row for row in ids)
        decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
        mismatches = [(line, out) for line, out in zip(lines, decoded) if out != unicodedata.normalize("NFKC", line)]
        assert mismatches == [], f"{lang}: {len(mismatches)} lines do not round-trip, e.g. {mismatches[:2]}"
        changed = sum(line != out for line, out in zip(lines, decoded))
        print(f"{lang}: {len(lines)} lines ({len(unusual)} with unusual whitespace or non-NFKC characters) round-trip"
              f" exactly; {changed} changed by NFKC")


def test_a_joint_bpe_trained_on_the_29k_multi30k_pairs_has_the_asked_vocabulary(multi30k_tokenizer):
    """How long it takes is the data benchmark's to say (`scripts/benchmark.py --only data`), not a unit test's."""
    tokenizer = multi30k_tokenizer.tokenizer
    assert len(tokenizer) == 8000
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]


def test_training_from_plain_and_gzip_files_equals_training_from_strings(tmp_path):
    plain, packed = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    plain.write_text("\n".join(CORPUS[:60]) + "\n", encoding="utf-8")
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(CORPUS[60:]) + "\n")
    from_files = train_tokenizer([plain, packed], vocab_size=400, min_frequency=1)
    from_strings = train_tokenizer(CORPUS, vocab_size=400, min_frequency=1)
    assert from_files.get_vocab() == from_strings.get_vocab()
    assert len(train_tokenizer(str(plain), vocab_size=300)) > MIN_VOCAB_SIZE  # one path as a str
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_tokenizer([tmp_path / "missing.txt"])


def test_words_longer_than_any_real_word_are_trained_on_in_pieces():
    """The BPE trainer's time grows with the square of a word's length (one 400,000-letter word took 105 s to train
    on, 5 s in pieces): a word (as the pre-tokenizer splits text) of more than TRAINING_WORD_LENGTH characters is
    trained on in pieces of that length. Sentences, unspaced scripts' included, are trained on as they are, and the
    tokenizer still encodes the whole word."""
    backend = _build_backend_tokenizer()
    blob = "".join(random.Random(0).choice("abcdefghij") for _ in range(3000))
    chinese = "这一计划得到了各国政府和人民的普遍支持和积极响应，" * 50  # 1,250 characters, clauses of 24
    long_texts = [f"Ein Hund {blob} läuft, {blob[:TRAINING_WORD_LENGTH - 1]} bleibt.", "a" + " " * 1500 + "b",
                  "!\x1c" * 600]  # letters; spaces; punctuation and a control character Python counts as a space
    pieces = _cut_long_words([*CORPUS, chinese, *long_texts], backend)
    assert pieces[:len(CORPUS) + 1] == [*CORPUS, chinese]
    cut = pieces[len(CORPUS) + 1:]
    assert len(cut) == 3 + 2 + 2  # the second blob, with its space, is a word of TRAINING_WORD_LENGTH: not cut
    assert "".join(cut) == "".join(unicodedata.normalize("NFKC", text) for text in long_texts)
    words = [word for piece in cut for word, _ in backend.pre_tokenizer.pre_tokenize_str(" " + piece)]
    assert max(len(word) for word in words) <= TRAINING_WORD_LENGTH + 1  # + the space training prepends
    texts = [*CORPUS, *long_texts]
    tokenizer = train_tokenizer(texts, vocab_size=600, min_frequency=1)
    assert tokenizer.get_vocab() == train_tokenizer(_cut_long_words(texts, backend), vocab_size=600,
                                                    min_frequency=1).get_vocab()
    assert tokenizer.decode(tokenizer(long_texts[0]).input_ids, skip_special_tokens=True) == long_texts[0]


def test_separate_tokenizers_save_and_load_as_a_pair(tmp_path):
    sources, targets = CORPUS[0::2], CORPUS[1::2]
    source, target = train_translation_tokenizers(sources, targets, joint=False, vocab_size=350,
                                                  target_vocab_size=320, min_frequency=1)
    assert source.get_vocab() != target.get_vocab() and len(target) <= 320
    save_tokenizers((source, target), tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    assert (tmp_path / TARGET_TOKENIZER_SUBDIR / "tokenizer.json").is_file()
    loaded_source, loaded_target = load_tokenizers(tmp_path)
    assert loaded_source(sources)["input_ids"] == source(sources)["input_ids"]
    assert loaded_target(targets)["input_ids"] == target(targets)["input_ids"]

    joint = train_translation_tokenizers(sources, targets, vocab_size=350, min_frequency=1)
    save_tokenizers(joint, tmp_path / "joint")
    assert load_tokenizers(tmp_path / "joint").get_vocab() == joint.get_vocab()
    with pytest.raises(ValueError, match="joint=False"):
        train_translation_tokenizers(sources, targets, vocab_size=350, target_vocab_size=320)


def test_dataset_texts_reads_one_split_and_refuses_a_dataset_dict():
    corpus = synthetic_task_dataset(num_train=3, num_validation=1, num_test=1)
    batches = list(dataset_texts(corpus["train"], batch_size=2))
    assert sum(batches, []) == corpus["train"]["source"][:] + corpus["train"]["target"][:]
    with pytest.raises(TypeError, match=r"corpus\['train'\]"):
        list(dataset_texts(corpus))
    with pytest.raises(KeyError, match="nope"):
        list(dataset_texts(Dataset.from_dict({"source": ["a"]}), "nope"))
    assert isinstance(corpus, DatasetDict)


def test_read_lines_reports_undecodable_bytes_and_keeps_unusual_separators(tmp_path):
    path = tmp_path / "x.de"
    path.write_bytes("\ufeffeins\r\nzwei\u2028drei\x0cvier\n".encode() + b"bad \xff byte\n")
    lines = read_lines(path)
    assert [next(lines), next(lines)] == ["eins", "zwei\u2028drei\x0cvier"]
    with pytest.raises(ValueError, match=r"x\.de: line 3 is not valid UTF-8"):
        next(lines)


def test_cli_trains_and_saves_loadable_tokenizers(tmp_path):
    import runpy

    main = runpy.run_path(str(Path(__file__).parents[1] / "scripts" / "train_tokenizer.py"))["main"]
    main(["--output_dir", str(tmp_path / "copy"), "--vocab_size", "300"])  # default data: the copy task
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "copy")
    assert tokenizer.decode(tokenizer("7 3 9 2 5")["input_ids"], skip_special_tokens=True) == "7 3 9 2 5"

    text_file = tmp_path / "text.txt"
    text_file.write_text("\n".join(CORPUS), encoding="utf-8")
    main(["--files", str(text_file), "--output_dir", str(tmp_path / "files"), "--vocab_size", "320"])
    assert len(AutoTokenizer.from_pretrained(tmp_path / "files")) <= 320
    main(["--files", str(text_file), "--output_dir", str(tmp_path / "files"), "--vocab_size", "270", "--overwrite"])
    assert len(AutoTokenizer.from_pretrained(tmp_path / "files")) <= 270  # replaced

    main(["--data", "reverse", "--separate", "--output_dir", str(tmp_path / "pair"), "--vocab_size", "280"])
    assert isinstance(load_tokenizers(tmp_path / "pair"), tuple)
    # a joint tokenizer over a pair: the pair's target half goes too, or it would load as the new one's target
    main(["--data", "reverse", "--output_dir", str(tmp_path / "pair"), "--vocab_size", "270", "--overwrite"])
    joint = load_tokenizers(tmp_path / "pair")
    assert not isinstance(joint, tuple) and len(joint) <= 270


def _cli_main():
    import runpy

    return runpy.run_path(str(Path(__file__).parents[1] / "scripts" / "train_tokenizer.py"))["main"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--data", "no/such/corpus"], r"--data no/such/corpus: cannot load the corpus: Couldn't find any data file"),
        (["--vocab_size", "10"], r"--vocab_size 10 is too small: .* it must be at least 260"),
        (["--vocab_size", "0"], r"argument --vocab_size: must be >= 1, got 0"),
        (["--data", "reverse", "--separate", "--target_vocab_size", "100"], r"--target_vocab_size 100 is too small"),
        (["--target_vocab_size", "300"], r"--target_vocab_size 300 differs from --vocab_size 8000.*add --separate"),
        (["--files", "no/such.txt"], r"--files: no/such.txt does not exist or is not a file"),
        (["--files", "no/such.txt", "--separate"], r"--separate needs --data"),
        (["--files", "{tmp}/file"], r"--files .*/file: the text is empty or too small to learn any merge \(each must "
                                    r"occur --min_frequency 2 times\); nothing saved"),
        (["--output_dir", "{tmp}/file/tok"], r"--output_dir .*/file/tok: .*/file is a file, not a folder"),
        (["--output_dir", "{tmp}/model"], r"--output_dir .*/model holds a model, whose embeddings belong to its own "
                                          "tokenizer"),
        (["--output_dir", "{tmp}/model", "--overwrite"], r"--output_dir .*/model holds a model"),
        (["--output_dir", "{tmp}/tokenizer"], r"--output_dir .*/tokenizer already holds a tokenizer; replace it with "
                                              "--overwrite"),
    ],
)
def test_cli_refuses_bad_arguments_on_one_line_before_writing(tmp_path, capsys, extra, message):
    (tmp_path / "file").write_text("")
    for folder, files in (("model", ("config.json", "tokenizer.json")), ("tokenizer", ("tokenizer.json",))):
        (tmp_path / folder).mkdir()
        for name in files:
            (tmp_path / folder / name).write_text("{}")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    extra = [argument.replace("{tmp}", str(tmp_path)) for argument in extra]
    with pytest.raises(SystemExit) as exit_info:
        _cli_main()(["--output_dir", str(tmp_path / "tok"), *extra])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("train_tokenizer.py: error: "), error
    assert re.search(message, error), error
    assert not (tmp_path / "tok").exists() and not (tmp_path / "file").is_dir()
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_cli_the_smallest_vocabulary_learns_no_merge_and_is_saved(tmp_path):
    """--vocab_size 260 holds the special tokens and the bytes only: no merge is expected (it is refused where
    merges were asked for but the text gave none)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ein Hund läuft\n" * 50)
    _cli_main()(["--files", str(corpus), "--vocab_size", "260", "--output_dir", str(tmp_path / "tok")])
    assert json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["merges"] == []


@pytest.mark.slow  # a fresh process (the same refusal in this one: test_cli_refuses_bad_arguments_on_one_line_...)
def test_cli_missing_data_dir_is_one_line_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys

    from launch_helpers import REPO_ROOT, SCRIPT_ENV

    result = subprocess.run(
        [sys.executable, "scripts/train_tokenizer.py", "--data", str(tmp_path / "corpus"), "--source_lang", "de",
         "--target_lang", "en", "--output_dir", str(tmp_path / "tok")],
        cwd=REPO_ROOT, env={**os.environ, **SCRIPT_ENV}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"train_tokenizer.py: error: --data {tmp_path / 'corpus'}: cannot load the corpus")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "tok").exists()
