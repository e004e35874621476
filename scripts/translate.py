"""Translate with a model folder written by scripts/train.py (or a Hub id), through the Auto classes.

    python scripts/translate.py outputs/copy-tiny "5 3 9 7 0 1 5"
    python scripts/translate.py MODEL --input source.txt --output hypotheses.txt --num_beams 4
    echo "Ein Hund läuft." | python scripts/translate.py MODEL

Texts come from the arguments, else from --input (one sentence per line), else from standard input.
"""

import argparse
import sys
from pathlib import Path

from modeling.translation import load_translation_model, translate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder (the output_dir of scripts/train.py) or a Hub id")
    parser.add_argument("texts", nargs="*", help="sentences to translate")
    parser.add_argument("--input", type=Path, help="a text file, one sentence per line")
    parser.add_argument("--output", type=Path, help="write the translations here (default: standard output)")
    parser.add_argument("--num_beams", type=int, default=None, help="beam size (default: the model's, from training)")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="longest translation in tokens")
    parser.add_argument("--batch_size", type=int, default=32, help="sentences per generate() call")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    if args.texts and args.input:
        sys.exit("translate.py: error: give sentences as arguments or --input, not both")
    if args.input is not None and not args.input.is_file():
        sys.exit(f"translate.py: error: --input {args.input} does not exist")
    if args.texts:
        texts = args.texts
    elif args.input is not None:
        texts = args.input.read_text(encoding="utf-8").splitlines()
    else:
        texts = sys.stdin.read().splitlines()
    try:
        model, tokenizer, target_tokenizer = load_translation_model(args.model, device=args.device)
    except FileNotFoundError as error:
        sys.exit(f"translate.py: error: {error}")
    translations = translate(
        texts, model, tokenizer, target_tokenizer, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )
    output = "".join(f"{line}\n" for line in translations)
    if args.output is not None:
        args.output.write_text(output, encoding="utf-8")
    else:
        sys.stdout.write(output)


if __name__ == "__main__":
    main()
