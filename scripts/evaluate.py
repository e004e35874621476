"""Score a model folder on a test set: sacreBLEU, lowercased BLEU and chrF, each with its signature.

    python scripts/evaluate.py MODEL --data_dir data/multi30k --split test --source_lang de --target_lang en
    python scripts/evaluate.py MODEL --source newstest2014.de --reference newstest2014.en --max_tokens 4096

The test set is --source/--reference (line-aligned UTF-8 files, .gz allowed), or a split of --data_dir as
modeling.data.corpus.load_parallel_corpus reads it (train, validation, test, or a file name such as Multi30k's
test_2016_flickr). Sentences are translated in length-sorted batches with beam search (--num_beams, default 4).

Writes, in --output_dir (default: MODEL/eval-<split>, or MODEL/eval-<source file name>; an earlier evaluation of
the same test set there is overwritten, one of another test set of the same name is refused, before translating):
  hypotheses.txt  one translation per source line
  results.json    scores, signatures, model, test set, beam size, sentences, seconds spent translating
and prints one summary line. When MODEL is a folder, the scores, their signatures and this command also go into
its model card (MODEL/README.md) as a section "Evaluation: <test set name>, beam <n>", replacing an earlier one of
that name and beam (two test sets of one name, kept apart with --output_dir, share that section: the last one
scored is the one it shows); --keep_card leaves the card alone.

    python scripts/evaluate.py models/multi30k-de-en-cpu --data_dir data/multi30k --split test_2016_flickr \
        --source_lang de --target_lang en --num_beams 4 --max_tokens 4096 --output_dir outputs/eval-test --keep_card
"""

import argparse
import logging
import shlex
import sys
from pathlib import Path

import transformers

from modeling.common.command_line import OneLineErrorParser, finite_float, positive_int
from modeling.inference.evaluation import (
    default_output_dir,
    evaluate_model,
    read_test_set_files,
    read_test_set_split,
    summary_line,
)
from modeling.inference.model_card import check_card_writable, record_evaluation
from modeling.inference.translation import check_model_folder, resolve_device


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="evaluate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="a model folder (the output_dir of scripts/train.py) or a Hub id")
    parser.add_argument("--source", type=Path, help="source sentences, one per line")
    parser.add_argument("--reference", type=Path, help="their reference translations, line by line")
    parser.add_argument("--data_dir", help="a corpus for modeling.data.corpus.load_parallel_corpus (instead of files)")
    parser.add_argument("--split", help="the --data_dir split to score (default: test)")
    parser.add_argument("--source_lang", help="with --data_dir: the source language (e.g. de)")
    parser.add_argument("--target_lang", help="with --data_dir: the target language (e.g. en)")
    parser.add_argument("--output_dir", type=Path, help="where to write hypotheses.txt and results.json")
    parser.add_argument("--num_beams", type=positive_int, default=4, help="beam size (default 4)")
    parser.add_argument("--length_penalty", type=finite_float, help="beam search divides a hypothesis's log-probability by "
                        "its length to this power (default: the model's generate() settings, as trained: 1.0)")
    parser.add_argument("--max_new_tokens", type=positive_int, help="longest translation in tokens")
    parser.add_argument("--batch_size", type=positive_int, help="cap on sentences per batch (default 32 without "
                        "--max_tokens)")
    parser.add_argument("--max_tokens", type=positive_int, help="cap on padded source tokens per batch")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--keep_card", action="store_true",
                        help="leave MODEL's card as it is (the scores go to --output_dir only): for a folder that "
                        "is not yours to change, such as the repository's models/multi30k-de-en-cpu")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(format="evaluate.py: warning: %(message)s", level=logging.WARNING)
    files, corpus = (args.source, args.reference), (args.split, args.source_lang, args.target_lang)
    try:  # everything that can be checked is checked before the model loads
        if args.data_dir is not None and any(files):
            raise ValueError("give --source/--reference or --data_dir, not both")
        if args.data_dir is None and not all(files):
            raise ValueError("give --source and --reference (files), or --data_dir (with --split)")
        if args.data_dir is None and any(corpus):
            raise ValueError("--split, --source_lang and --target_lang apply to --data_dir only")
        if args.data_dir is not None:
            test_set = read_test_set_split(args.data_dir, args.split or "test", args.source_lang, args.target_lang)
        else:
            test_set = read_test_set_files(args.source, args.reference)
        check_model_folder(args.model)
        if not args.keep_card:
            check_card_writable(args.model)
        device = resolve_device(args.device)
        output_dir = args.output_dir or default_output_dir(args.model, test_set.name)
        progress = not args.quiet and sys.stderr.isatty()
        if not progress:
            transformers.utils.logging.disable_progress_bar()  # its weight-loading bar
        results = evaluate_model(
            args.model, test_set, output_dir, num_beams=args.num_beams, length_penalty=args.length_penalty,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens, max_new_tokens=args.max_new_tokens, device=device, progress=progress,
        )
        if not args.keep_card:
            record_evaluation(args.model, results,
                              shlex.join(["python", "scripts/evaluate.py", *(argv or sys.argv[1:])]))
    except (OSError, ValueError) as error:  # OSError: also weights that changed on disk (CorruptWeightsError)
        parser.error(str(error))
    print(f"{summary_line(results)} -> {output_dir}")


if __name__ == "__main__":
    main()
