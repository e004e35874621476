"""Translate with a model folder written by scripts/train.py (or a Hub id), through the Auto classes.

    python scripts/translate.py "Ein Hund läuft über die Wiese."      # the repository's German->English model
    python scripts/translate.py outputs/copy-tiny "5 3 9 7 0 1 5"
    python scripts/translate.py MODEL --input source.txt --output hypotheses.txt --num_beams 4 --max_tokens 4096
    echo "Ein Hund läuft." | python scripts/translate.py
    python scripts/translate.py --engine ctranslate2 --quantization int8 CT2_MODEL --input source.txt

MODEL, the first word, is a folder, or a Hub id (owner/name); without one, the German->English model committed with
the repository translates (models/multi30k-de-en-cpu: the CPU recipe's, its card says how it was made and scored).

Texts come from the arguments, else from --input (UTF-8, one sentence per line), else from standard input; one
line comes out per line in, in input order (sentences are batched by length). Empty lines stay empty. A sentence
longer than the model's positions is truncated, with a warning naming its line (an error with CTranslate2).

--engine ctranslate2 translates with a folder written by scripts/export_ctranslate2.py (pip install ctranslate2);
--quantization picks its compute type. It takes --batch_size but not --max_tokens, and shows no progress bar.
"""

import argparse
import logging
import sys
from pathlib import Path

import transformers

from modeling.common.command_line import (
    OneLineErrorParser,
    check_output_file,
    check_utf8_arguments,
    positive_int,
    read_stdin_lines,
    same_file,
    write_lines,
)
from modeling.inference.translation import (
    ENGINES,
    SHIPPED_MODEL,
    check_compute_type,
    check_ctranslate2_folder,
    check_model_folder,
    load_translation_model,
    model_and_texts,
    resolve_device,
    translate,
    translate_with_ctranslate2,
)
from modeling.tokenization import read_lines

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / SHIPPED_MODEL


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="translate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("words", nargs="*", metavar="[MODEL] TEXT",
                        help="MODEL: a model folder (the output_dir of scripts/train.py) or a Hub id (owner/name); "
                        "with --engine ctranslate2, a folder written by scripts/export_ctranslate2.py (default: "
                        f"{SHIPPED_MODEL}, the German->English model in the repository); then the sentences to "
                        "translate")
    parser.add_argument("--input", type=Path, help="a UTF-8 text file, one sentence per line")
    parser.add_argument("--output", type=Path, help="write the translations here (default: standard output)")
    parser.add_argument("--num_beams", type=positive_int, help="beam size (default: the model's, from training)")
    parser.add_argument("--max_new_tokens", type=positive_int, help="longest translation in tokens")
    parser.add_argument("--batch_size", type=positive_int, help="cap on sentences per batch (default 32 without "
                        "--max_tokens)")
    parser.add_argument("--max_tokens", type=positive_int, help="cap on padded source tokens per batch")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    parser.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                        help="pytorch (the model through transformers) or ctranslate2 (its export); default pytorch")
    parser.add_argument("--quantization", help="CTranslate2 compute type: int8, int8_float32, int8_float16, int16, "
                        "float16, bfloat16, float32, auto (default: the exported weights' type)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # options may stand between the model and the sentences
    args.model, args.texts = model_and_texts(args.words, DEFAULT_MODEL)
    try:  # everything that can be checked is checked before the model loads
        if args.texts and args.input:
            raise ValueError("give sentences as arguments or --input, not both")
        if args.input is not None and not args.input.is_file():
            raise ValueError(f"--input {args.input} does not exist or is not a file")
        if args.output is not None:
            if args.input is not None and same_file(args.output, args.input):
                raise ValueError(f"--output {args.output} is the --input file: its sentences would be overwritten")
            check_output_file(args.output)
        ctranslate2 = args.engine == "ctranslate2"
        if ctranslate2:
            if args.max_tokens is not None:
                raise ValueError("--max_tokens is not supported with --engine ctranslate2: cap sentences per batch "
                                 "with --batch_size")
            check_ctranslate2_folder(args.model)
            compute_type = args.quantization or "default"
            check_compute_type(compute_type)
        else:
            if args.quantization is not None:
                raise ValueError("--quantization is a CTranslate2 compute type: it needs --engine ctranslate2")
            check_model_folder(args.model)
            device = resolve_device(args.device)
        if args.texts:
            check_utf8_arguments(args.texts, "sentence")
            texts = args.texts
        elif args.input is not None:
            texts = list(read_lines(args.input))
        else:
            texts = read_stdin_lines()
        logging.basicConfig(format="translate.py: warning: %(message)s", level=logging.WARNING)
        if ctranslate2:
            translations = translate_with_ctranslate2(
                texts, args.model, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
                batch_size=args.batch_size, device=args.device, compute_type=compute_type,
            )
        else:
            progress = args.input is not None and not args.quiet and sys.stderr.isatty()
            if not progress:
                transformers.utils.logging.disable_progress_bar()  # its weight-loading bar
            model, tokenizer, target_tokenizer = load_translation_model(args.model, device=device)
            translations = translate(
                texts, model, tokenizer, target_tokenizer, num_beams=args.num_beams,
                max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, max_tokens=args.max_tokens,
                progress=progress,
            )
        write_lines(translations, args.output)
    # ImportError: CTranslate2 is not installed; OSError: also weights that changed on disk (CorruptWeightsError)
    except (ImportError, OSError, ValueError) as error:
        parser.error(str(error).splitlines()[0] if str(error) else repr(error))


if __name__ == "__main__":
    main()
