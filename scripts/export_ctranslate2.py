"""Convert a trained model folder to a CTranslate2 model (with its tokenizer and generation settings beside it).

    python scripts/export_ctranslate2.py outputs/multi30k-de-en-cpu-avg5 outputs/multi30k-de-en-cpu-ct2
    python scripts/export_ctranslate2.py outputs/multi30k-de-en-cpu-avg5 outputs/multi30k-de-en-cpu-ct2-int8 \
        --quantization int8 --force

Needs `pip install ctranslate2` (or the `ctranslate2` extra). Translate with the result through
`python scripts/translate.py --engine ctranslate2 OUTPUT_DIR ...` (or
`modeling.inference.ctranslate2_runtime.translate_ctranslate2`).
"""

import argparse

from modeling.common.command_line import OneLineErrorParser
from modeling.inference.ctranslate2_export import export_ctranslate2


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder (the output_dir of scripts/train.py)")
    parser.add_argument("output_dir", help="the CTranslate2 model folder to write")
    parser.add_argument(
        "--quantization", default=None,
        help="weight type: int8, int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32 "
        "(default: the model's float32)",
    )
    parser.add_argument("--force", action="store_true", help="replace output_dir if it is empty or an earlier export")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        output_dir = export_ctranslate2(args.model, args.output_dir, quantization=args.quantization, force=args.force)
    except (ImportError, OSError, ValueError) as error:
        parser.error(str(error).splitlines()[0])
    print(output_dir)


if __name__ == "__main__":
    main()
