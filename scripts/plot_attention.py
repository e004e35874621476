"""Draw attention heatmaps for one sentence: encoder self-attention, decoder self-attention and encoder-decoder
attention, one PNG per (kind, layer) with a grid of the chosen heads, subwords on the axes.

    python scripts/plot_attention.py outputs/multi30k-de-en-cpu-avg5 "Ein Hund läuft über die Wiese." --output_dir plots
    python scripts/plot_attention.py MODEL "Ein Hund läuft." --target "A dog runs." --layers 0 5 --heads 0 1 2 3 \\
        --kinds cross --output_dir plots

Without --target the decoder side is the model's greedy translation. Needs matplotlib (`pip install matplotlib`).
"""

import argparse

from modeling.common.command_line import OneLineErrorParser, check_utf8_arguments, positive_int
from modeling.inference.attention_plots import ATTENTION_KINDS, plot_attention


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder (the output_dir of scripts/train.py)")
    parser.add_argument("source", help="the source sentence")
    parser.add_argument("--target", default=None, help="the target sentence (default: the greedy translation)")
    parser.add_argument("--output_dir", required=True, help="folder for the PNG files (created if needed)")
    parser.add_argument("--layers", type=int, nargs="+", default=None, help="layer indices, from 0 (default: all)")
    parser.add_argument("--heads", type=int, nargs="+", default=None, help="head indices, from 0 (default: all)")
    parser.add_argument(
        "--kinds", nargs="+", choices=list(ATTENTION_KINDS), default=list(ATTENTION_KINDS),
        help="encoder (self-attention), decoder (masked self-attention), cross (encoder-decoder); default: all",
    )
    parser.add_argument("--max_new_tokens", type=positive_int, default=None,
                        help="longest greedy translation in tokens")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_utf8_arguments([args.source], "the source sentence")
        check_utf8_arguments([args.target] if args.target is not None else [], "--target")
        paths = plot_attention(
            args.model, args.source, args.output_dir, target=args.target, kinds=args.kinds, layers=args.layers,
            heads=args.heads, max_new_tokens=args.max_new_tokens,
        )
    except (ImportError, OSError, ValueError) as error:
        parser.error(str(error).splitlines()[0])
    print("\n".join(map(str, paths)))


if __name__ == "__main__":
    main()
