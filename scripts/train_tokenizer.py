"""Train the byte-level BPE tokenizer on a parallel corpus (or on text files) and save it for `from_pretrained`.

Examples:
    python scripts/train_tokenizer.py --data data/multi30k --source_lang de --target_lang en \\
        --vocab_size 8000 --output_dir outputs/tokenizer-multi30k
    python scripts/train_tokenizer.py --files train.de.gz train.en.gz --output_dir outputs/tok
    python scripts/train_tokenizer.py --data data/multi30k --source_lang de --target_lang en \\
        --separate --output_dir outputs/tok-separate   # target tokenizer in outputs/tok-separate/target_tokenizer

A bad argument or unreadable data stops it before anything is written: one line `train_tokenizer.py: error: ...`,
exit status 2.
"""

import argparse
import time
from pathlib import Path

import datasets

from modeling.common.command_line import OneLineErrorParser, positive_int
from modeling.data.corpus import load_parallel_corpus
from modeling.tokenization import (
    MIN_VOCAB_SIZE,
    check_vocab_size,
    dataset_texts,
    save_tokenizers,
    train_tokenizer,
    train_translation_tokenizers,
)
from modeling.training.argument_checks import check_output_dir
from modeling.training.checkpoints import holds_model


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="train_tokenizer.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="what load_parallel_corpus accepts: a directory, file or dataset name "
                        "(default: the synthetic copy task)")
    source.add_argument("--files", nargs="+", type=Path, help="plain text files (.gz allowed), one sentence a line")
    parser.add_argument("--source_lang")
    parser.add_argument("--target_lang")
    parser.add_argument("--dataset_config", help="the datasets.load_dataset configuration, e.g. de-en")
    parser.add_argument("--source_column")
    parser.add_argument("--target_column")
    parser.add_argument("--split", default="train", help="the split to train on (default: train)")
    parser.add_argument("--separate", action="store_true", help="separate source and target vocabularies")
    parser.add_argument("--vocab_size", type=positive_int, default=8000)
    parser.add_argument("--target_vocab_size", type=positive_int, help="with --separate (default: --vocab_size)")
    parser.add_argument("--min_frequency", type=positive_int, default=2)
    parser.add_argument("--model_max_length", type=positive_int, default=1024)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in --output_dir")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # everything that can be checked is checked before training; nothing is written before saving
        if args.files and args.separate:
            raise ValueError("--separate needs --data (which text is source and which is target)")
        if args.target_vocab_size not in (None, args.vocab_size) and not args.separate:
            raise ValueError(
                f"--target_vocab_size {args.target_vocab_size} differs from --vocab_size {args.vocab_size}, but a "
                "joint tokenizer has one vocabulary; add --separate for separate vocabularies"
            )
        for name in ("vocab_size", "target_vocab_size"):
            if getattr(args, name) is not None:
                check_vocab_size(getattr(args, name), f"--{name}")
        for path in args.files or []:
            if not path.is_file():
                raise ValueError(f"--files: {path} does not exist or is not a file")
        check_output_dir(args.output_dir)
        output_dir = Path(args.output_dir)
        if holds_model(output_dir):
            raise ValueError(
                f"--output_dir {output_dir} holds a model, whose embeddings belong to its own tokenizer: save the new "
                "tokenizer in another folder"
            )
        if (output_dir / "tokenizer.json").exists() and not args.overwrite:
            raise ValueError(f"--output_dir {output_dir} already holds a tokenizer; replace it with --overwrite")
        settings = dict(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                        model_max_length=args.model_max_length)
        start = time.perf_counter()
        if args.files:
            tokenizers = train_tokenizer(args.files, **settings)
        else:
            try:
                corpus = load_parallel_corpus(
                    args.data, args.source_lang, args.target_lang, dataset_config=args.dataset_config,
                    source_column=args.source_column, target_column=args.target_column, splits=[args.split],
                )
            except (ValueError, KeyError, OSError, datasets.exceptions.DatasetsError) as error:
                cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
                raise ValueError(f"--data {args.data}: cannot load the corpus: {error}{cause}") from None
            split = corpus[args.split]
            tokenizers = train_translation_tokenizers(
                dataset_texts(split, "source"), dataset_texts(split, "target"), joint=not args.separate,
                target_vocab_size=args.target_vocab_size, **settings,
            )
        asked = (args.vocab_size, args.target_vocab_size or args.vocab_size)
        for side, tokenizer, size in zip(("source", "target"),
                                         tokenizers if isinstance(tokenizers, tuple) else [tokenizers], asked):
            if len(tokenizer) == MIN_VOCAB_SIZE < size:  # only the special tokens and the bytes, where more fit
                what = f"--files {' '.join(map(str, args.files))}" if args.files else f"--data {args.data}"
                raise ValueError(
                    f"{what}: the {side + ' ' if isinstance(tokenizers, tuple) else ''}text is empty or too small to "
                    f"learn any merge (each must occur --min_frequency {args.min_frequency} times); nothing saved"
                )
    except ValueError as error:  # also check_output_dir's ConfigurationError and a file that is not UTF-8
        parser.error(" ".join(line.strip() for line in str(error).splitlines()))
    seconds = time.perf_counter() - start
    save_tokenizers(tokenizers, args.output_dir)
    sizes = [len(tokenizer) for tokenizer in (tokenizers if isinstance(tokenizers, tuple) else [tokenizers])]
    print(f"trained in {seconds:.1f}s; vocabulary size(s) {sizes}; saved to {args.output_dir}")


if __name__ == "__main__":
    main()
