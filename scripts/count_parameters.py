"""Print the parameter count of each model preset (the paper's base model is ~65M with a 37k shared vocabulary)."""

from modeling.common.command_line import OneLineErrorParser, positive_int
from modeling.inference.parameters import preset_parameter_counts


def main(argv=None):
    parser = OneLineErrorParser(description=__doc__)
    parser.add_argument("--vocab_size", type=positive_int, default=37000, help="shared vocabulary size (WMT EN-DE: 37000)")
    parser.add_argument("--untied", action="store_true", help="separate source/target embeddings and output matrix")
    args = parser.parse_args(argv)
    counts = preset_parameter_counts(args.vocab_size, tie_word_embeddings=not args.untied)
    ties = "untied" if args.untied else "tied three ways"
    for name, count in counts.items():
        print(f"{name:>5}: {count:>12,} parameters ({count / 1e6:.1f}M; vocabulary {args.vocab_size:,}, {ties})")


if __name__ == "__main__":
    main()
