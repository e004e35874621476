r"""Average checkpoint weights into one model (§6.1; fairseq's scripts/average_checkpoints.py).

    python scripts/average_checkpoints.py outputs/run --last 5 --output_dir outputs/run-avg5
    python scripts/average_checkpoints.py --checkpoints outputs/run/checkpoint-900 outputs/run/checkpoint-1000 \
        --output_dir outputs/run-avg

The result loads like the training output: AutoModelForSeq2SeqLM.from_pretrained(dir, trust_remote_code=True).
"""

import argparse

from modeling.common.command_line import OneLineErrorParser
from modeling.training.checkpoints import average_checkpoints, last_checkpoints


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="a training output_dir holding checkpoint-<step> folders")
    parser.add_argument("--last", type=int, default=None, help="average the N newest checkpoints of run_dir")
    parser.add_argument("--checkpoints", nargs="+", default=None, help="explicit checkpoint folders to average")
    parser.add_argument("--output_dir", required=True, help="where to write the averaged model")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.checkpoints is None) == (args.run_dir is None):
        parser.error("give either run_dir (with --last N) or --checkpoints, not both")
    if args.checkpoints is not None and args.last is not None:
        parser.error("--last N picks checkpoints of run_dir; with --checkpoints, list the ones to average")
    try:
        if args.checkpoints is not None:
            checkpoints = args.checkpoints
        else:
            if args.last is None:
                parser.error("with run_dir, say how many checkpoints to average: --last N")
            checkpoints = last_checkpoints(args.run_dir, args.last)
        output_dir = average_checkpoints(checkpoints, args.output_dir)
    except (OSError, ValueError) as error:  # OSError: also a folder that cannot be written
        parser.error(str(error))
    print(f"Averaged {len(checkpoints)} checkpoints into {output_dir}:")
    for checkpoint in checkpoints:
        print(f"  {checkpoint}")


if __name__ == "__main__":
    main()
