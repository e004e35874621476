"""Train, average and score every row of the paper's Table 3 at Multi30k scale, resumably, into one results JSON.

    python scripts/table3.py --data_dir data/multi30k                       # every row, on the CPU
    python scripts/table3.py --data_dir data/multi30k --only base A-heads-1  # some rows
    python scripts/table3.py --data_dir data/multi30k --device cuda --results benchmarks/results-table3-gpu.json

Each row of --rows (configs/table3/rows.yaml) is trained by scripts/train.py from the base config with the row's
settings and the device's step budget, its last checkpoints averaged and scored with beam search: validation BLEU
and perplexity per target token, test_2016_flickr BLEU. Runs already in --results are skipped; a run stopped at any
point (killed, Ctrl-C) resumes from its last checkpoint when the command is given again. Without --data_dir the rows
train on the embedded copy task. docs/results.md renders the table beside the paper's.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tools/, which is not installed
from modeling.common.command_line import OneLineErrorParser  # noqa: E402
from tools.benchmarking.table3_runner import DEVICES, run_table  # noqa: E402

TRAIN_SCRIPT = Path(__file__).resolve().parent / "train.py"


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(prog="table3.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="configs/table3/rows.yaml", help="the rows file (default %(default)s)")
    parser.add_argument("--data_dir", help="the corpus (Multi30k's files); default: the embedded copy task")
    parser.add_argument("--output_dir", default="outputs/table3",
                        help="the runs' folders, and the shared tokenizer (default %(default)s)")
    parser.add_argument("--results", default="benchmarks/results-table3-cpu.json",
                        help="the results JSON, read to skip finished runs and rewritten after each (default "
                        "%(default)s)")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cpu (fp32) or cuda (bf16), each with its budget from the rows file (default cpu)")
    parser.add_argument("--only", nargs="+", metavar="ROW", help="run these rows only (by name)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        run_table(args.rows, args.output_dir, args.results, train_script=TRAIN_SCRIPT, data_dir=args.data_dir,
                  device=args.device, only=args.only, log=lambda line: print(line, flush=True))
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
