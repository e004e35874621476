"""Train the byte-level BPE tokenizer on a parallel corpus (or on text files) and save it for `from_pretrained`.

Examples:
    python scripts/train_tokenizer.py --data ../shared/data/multi30k --source_lang de --target_lang en \\
        --vocab_size 8000 --output_dir outputs/tokenizer-multi30k
    python scripts/train_tokenizer.py --files train.de.gz train.en.gz --output_dir outputs/tok
    python scripts/train_tokenizer.py --data ../shared/data/multi30k --source_lang de --target_lang en \\
        --separate --output_dir outputs/tok-separate   # target tokenizer in outputs/tok-separate/target_tokenizer
"""

import argparse
import time
from pathlib import Path

from modeling.data import load_parallel_corpus
from modeling.tokenization import dataset_texts, save_tokenizers, train_tokenizer, train_translation_tokenizers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--target_vocab_size", type=int, help="with --separate (default: --vocab_size)")
    parser.add_argument("--min_frequency", type=int, default=2)
    parser.add_argument("--model_max_length", type=int, default=1024)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)

    settings = dict(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                    model_max_length=args.model_max_length)
    start = time.perf_counter()
    if args.files:
        if args.separate:
            parser.error("--separate needs --data (which text is source and which is target)")
        tokenizers = train_tokenizer(args.files, **settings)
    else:
        corpus = load_parallel_corpus(args.data, args.source_lang, args.target_lang, dataset_config=args.dataset_config,
                                      source_column=args.source_column, target_column=args.target_column,
                                      splits=[args.split])
        split = corpus[args.split]
        tokenizers = train_translation_tokenizers(dataset_texts(split, "source"), dataset_texts(split, "target"),
                                                  joint=not args.separate, target_vocab_size=args.target_vocab_size,
                                                  **settings)
    seconds = time.perf_counter() - start
    save_tokenizers(tokenizers, args.output_dir)
    sizes = [len(tokenizer) for tokenizer in (tokenizers if isinstance(tokenizers, tuple) else [tokenizers])]
    print(f"trained in {seconds:.1f}s; vocabulary size(s) {sizes}; saved to {args.output_dir}")


if __name__ == "__main__":
    main()
