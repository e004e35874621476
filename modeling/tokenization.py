"""Byte-level BPE tokenizer for the Transformer: trained with `tokenizers`, used as a transformers fast tokenizer.

The paper (§5.1) encodes WMT 2014 English-German with byte-pair encoding and a shared source-target vocabulary
of about 37000 tokens; the shared vocabulary is what lets the model tie its embedding matrices (§3.4).
`train_tokenizer` builds such a vocabulary; `train_translation_tokenizers` also offers separate source and target
vocabularies.

Pipeline, and why each piece is there:

- normalizer: NFKC, then one space prepended. NFKC folds compatibility forms (full-width letters, ligatures like
  "ﬁ", the no-break space) so the same word gets the same tokens. The prepended space gives a sentence's first
  word the tokens it has inside a sentence ("Hund" in "Hund bellt" and in "Der Hund" is the token " Hund").
- pre-tokenizer: byte-level (GPT-2's regex split, then bytes mapped to 256 printable symbols). Every string is
  representable from the 256 byte symbols, so no character is ever `<unk>`: emoji, CJK, combining marks, tabs.
- decoder: byte-level, then strip the one prepended space.
- post-processor: `</s>` appended to every sequence (source and target). `<s>` is never added here: the model
  prepends it to the decoder input (`decoder_start_token_id`).

Round-trip policy: `decode(encode(text), skip_special_tokens=True)` is the NFKC of `text` as tokenizers computes it
(`tokenizer.backend_tokenizer.normalizer`), which is `unicodedata.normalize("NFKC", text)` except on characters newer
than tokenizers' Unicode tables: under Python 3.11's Unicode 14.0, 170 of them, compatibility characters (U+32FF "㋿",
U+1FBF0-9 segmented digits) that keep their form and combining marks that keep their place (Python reorders them by
their combining class). Whitespace is data: leading, trailing and repeated spaces, tabs and newlines all come back as
they were (strip or collapse them in the data if you want that). So the round trip is the identity on NFKC-normalized
text (Multi30k is, except 45 German lines whose no-break spaces NFKC turns into plain spaces). Text that spells a
special token ("</s>", "<unk>") is ordinary text (`split_special_tokens=True`): special tokens come only from the
post-processor and the model, so such text round-trips too.

Separate source/target tokenizers are saved as `directory/` (source) and `directory/target_tokenizer/`;
`load_tokenizers(directory)` returns whichever was saved.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import os
import shutil
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR

logger = logging.getLogger(__name__)

# Ids 0..3, in this order; the model config defaults (pad 0, bos/decoder_start 1, eos 2) match them.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = SPECIAL_TOKENS
PAD_TOKEN_ID, BOS_TOKEN_ID, EOS_TOKEN_ID, UNK_TOKEN_ID = range(len(SPECIAL_TOKENS))

BYTE_ALPHABET_SIZE = 256
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE
_TEXT_BATCH_SIZE = 1000
# Tokenizer training cuts a word (as its pre-tokenizer splits text) longer than this many characters into pieces of
# this length: the BPE trainer spends time quadratic in a word's length (a 400,000-letter word took 105 s, in these
# pieces 5 s; 200,000 spaces 38 s, in pieces 5 s), and no merge learned beyond it would be a token of real text. Only
# texts longer than this are looked at; sentences, and their words, are trained on as they are.
TRAINING_WORD_LENGTH = 1024

TextSource = str | os.PathLike | Iterable[str | os.PathLike]


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (`.gz` read as gzip), without their line terminator.

    Only "\\n" (and a "\\r" before it) ends a line, as for `wc -l`: characters that `str.splitlines` would also
    split on (U+2028, form feed, ...) stay inside the line. A UTF-8 byte order mark at the start is dropped.
    Undecodable bytes, and a `.gz` file that is not gzip or is cut short, raise `ValueError` naming the file. A
    "\\r" inside a line (a file with old Mac line endings reads as one line) is warned of, once per file.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    number, warned = 0, False
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                raw = raw[:-1] if raw.endswith(b"\r") else raw
                if not warned and b"\r" in raw:
                    warned = True
                    logger.warning("%s: line %d holds a carriage return (\\r) inside it; only \\n ends a line, so a "
                                   "file with \\r line endings (old Mac) reads as one line: convert it with "
                                   "tr '\\r' '\\n'", path, number)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(
                        f"{path}: line {number} is not valid UTF-8 ({error.reason} at byte {error.start} of the "
                        f"line: {raw[max(0, error.start - 10):error.start + 10]!r}); re-encode the file as UTF-8"
                    ) from None
                yield line.removeprefix("\ufeff") if number == 1 else line
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:  # not gzip, or cut short
        raise ValueError(f"{path}: cannot be read as gzip after line {number} ({error})") from None


def dataset_texts(dataset, columns: str | Iterable[str] = ("source", "target"), batch_size: int = _TEXT_BATCH_SIZE):
    """Yield lists of strings from the given column(s) of a `datasets.Dataset`, for `train_tokenizer`.

    Takes one split (e.g. `corpus["train"]`): training a tokenizer on validation or test text would leak them.
    """
    from datasets import Dataset  # local: keep `import modeling.tokenization` light

    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"dataset_texts expects one datasets.Dataset split (e.g. corpus['train']), got {type(dataset).__name__}"
        )
    columns = [columns] if isinstance(columns, str) else list(columns)
    missing = [column for column in columns if column not in dataset.column_names]
    if missing:
        raise KeyError(f"column(s) {missing} not in the dataset; it has {dataset.column_names}")
    for column in columns:
        for start in range(0, len(dataset), batch_size):
            yield dataset[start : start + batch_size][column]


def _text_batches(texts_or_files: TextSource) -> Iterator[list[str]]:
    """Turn the accepted inputs into batches of strings: a path (str or PathLike) is one file; inside an iterable,
    PathLike items are files and str items are texts (lists of str from `dataset_texts` are batches of texts)."""
    if isinstance(texts_or_files, (str, os.PathLike)):
        texts_or_files = [Path(texts_or_files)]
    pending: list[str] = []
    for item in texts_or_files:
        if isinstance(item, os.PathLike):
            if not Path(item).is_file():
                raise FileNotFoundError(f"tokenizer training file {item} does not exist")
            lines = read_lines(item)
            while batch := list(itertools.islice(lines, _TEXT_BATCH_SIZE)):
                yield batch
        elif isinstance(item, str):
            pending.append(item)
            if len(pending) == _TEXT_BATCH_SIZE:
                yield pending
                pending = []
        elif isinstance(item, (list, tuple)) and all(isinstance(text, str) for text in item):
            yield list(item)
        else:
            raise TypeError(
                f"cannot train a tokenizer on a {type(item).__name__}: give strings, lists of strings, "
                "or file paths as pathlib.Path"
            )
    if pending:
        yield pending


def _cut_long_words(batch: list[str], tokenizer: Tokenizer) -> list[str]:
    """The texts of `batch`, each word longer than TRAINING_WORD_LENGTH characters (after `tokenizer`'s normalizer and
    pre-tokenizer) cut into pieces of that length. A text that is cut is given normalized, in pieces, without the
    space the normalizer prepends, which training prepends to each piece again; no other character is added or lost."""
    prepended = len(tokenizer.normalizer.normalize_str("x")) - 1
    pieces = []
    for text in batch:
        normalized = tokenizer.normalizer.normalize_str(text) if len(text) > TRAINING_WORD_LENGTH else ""
        cuts = [cut for _, (start, end) in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)
                for cut in range(start + TRAINING_WORD_LENGTH, end, TRAINING_WORD_LENGTH)]
        if not cuts:
            pieces.append(text)
            continue
        bounds = [prepended, *cuts, len(normalized)]
        pieces.extend(normalized[start:end] for start, end in zip(bounds, bounds[1:]))
    return pieces


def _build_backend_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Prepend(" ")])
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(content=" ", left=1, right=0)])
    return tokenizer


def check_vocab_size(vocab_size: int, name: str = "vocab_size") -> None:
    """Raise ValueError, naming `name`, unless a vocabulary of `vocab_size` entries can hold the special tokens and
    the 256 byte symbols that every byte-level BPE vocabulary starts with."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"{name} {vocab_size} is too small: the vocabulary holds {len(SPECIAL_TOKENS)} special tokens and "
            f"{BYTE_ALPHABET_SIZE} byte symbols, so it must be at least {MIN_VOCAB_SIZE}"
        )


def train_tokenizer(
    texts_or_files: TextSource,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    *,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer and wrap it as a transformers fast tokenizer.

    Args:
        texts_or_files: a file path, or an iterable of texts (str), batches of texts (lists of str, as
            `dataset_texts` yields) and file paths (`pathlib.Path`; `.gz` allowed; one sentence per line).
        vocab_size: size of the vocabulary including the 4 special tokens and the 256 byte symbols. It is an upper
            bound: a corpus with fewer distinct merges gives a smaller vocabulary.
        min_frequency: a merge must occur at least this often to be learned.
        model_max_length: the longest sequence (in tokens, `</s>` included) the model will accept.
    """
    check_vocab_size(vocab_size)
    if min_frequency < 1:
        raise ValueError(f"min_frequency={min_frequency} must be >= 1")
    tokenizer = _build_backend_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    splitter = _build_backend_tokenizer()  # not the one in training, which holds it while it reads the batches
    batches = (_cut_long_words(batch, splitter) for batch in _text_batches(texts_or_files))
    tokenizer.train_from_iterator(batches, trainer=trainer)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == expected_id, f"{token} got id {tokenizer.token_to_id(token)}"
    if tokenizer.get_vocab_size() == MIN_VOCAB_SIZE < vocab_size:  # room for merges, but none learned
        logger.warning("the tokenizer learned no merges: the training text was empty or too small")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, EOS_TOKEN_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        split_special_tokens=True,  # a literal "</s>" in a sentence is text, not the end of the sentence
        clean_up_tokenization_spaces=False,  # its punctuation rules would break the exact round trip
    )


def train_translation_tokenizers(
    source_texts: TextSource,
    target_texts: TextSource,
    *,
    joint: bool = True,
    vocab_size: int = 8000,
    target_vocab_size: int | None = None,
    min_frequency: int = 2,
    model_max_length: int = 1024,
) -> PreTrainedTokenizerFast | tuple[PreTrainedTokenizerFast, PreTrainedTokenizerFast]:
    """Train one tokenizer on source and target text together (`joint=True`, the paper's shared vocabulary that
    tied embeddings need), or a (source, target) pair of tokenizers (`joint=False`; the target one gets
    `target_vocab_size`, default `vocab_size`)."""
    settings = dict(min_frequency=min_frequency, model_max_length=model_max_length)
    if joint:
        if target_vocab_size is not None and target_vocab_size != vocab_size:
            raise ValueError(
                f"target_vocab_size={target_vocab_size} differs from vocab_size={vocab_size}, but a joint tokenizer "
                "has one vocabulary: pass joint=False for separate vocabularies"
            )
        both = itertools.chain(_text_batches(source_texts), _text_batches(target_texts))
        return train_tokenizer(both, vocab_size, **settings)
    source = train_tokenizer(source_texts, vocab_size, **settings)
    target = train_tokenizer(target_texts, target_vocab_size or vocab_size, **settings)
    return source, target


def save_tokenizers(
    tokenizers: PreTrainedTokenizerFast | tuple[PreTrainedTokenizerFast, PreTrainedTokenizerFast],
    directory: str | os.PathLike,
) -> None:
    """Save one tokenizer to `directory`, or a (source, target) pair to `directory` and
    `directory/target_tokenizer`. One tokenizer saved over a pair removes the pair's target tokenizer: left there,
    it would be loaded with the new one as its target half."""
    directory = Path(directory)
    if isinstance(tokenizers, tuple):
        source, target = tokenizers
        source.save_pretrained(directory)
        target.save_pretrained(directory / TARGET_TOKENIZER_SUBDIR)
    else:
        tokenizers.save_pretrained(directory)
        if (directory / TARGET_TOKENIZER_SUBDIR).is_dir():
            shutil.rmtree(directory / TARGET_TOKENIZER_SUBDIR)


def same_vocabulary(tokenizers, others) -> bool:
    """Whether two tokenizers (or source/target pairs of them) map the same tokens to the same ids."""
    tokenizers, others = (t if isinstance(t, tuple) else (t,) for t in (tokenizers, others))
    return len(tokenizers) == len(others) and all(a.get_vocab() == b.get_vocab() for a, b in zip(tokenizers, others))


def load_tokenizers(
    directory: str | os.PathLike,
) -> PreTrainedTokenizerFast | tuple[PreTrainedTokenizerFast, PreTrainedTokenizerFast]:
    """Load what `save_tokenizers` wrote: one tokenizer, or a (source, target) pair when
    `directory/target_tokenizer` exists."""
    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in {directory}: train one with scripts/train_tokenizer.py")
    source = AutoTokenizer.from_pretrained(directory)
    if (directory / TARGET_TOKENIZER_SUBDIR).is_dir():
        return source, AutoTokenizer.from_pretrained(directory / TARGET_TOKENIZER_SUBDIR)
    return source
