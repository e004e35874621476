"""Write the pictures of docs/annotated.md, the guided walk through the model, and keep its generated parts current.

    python scripts/make_figures.py                          # every picture into docs/figures/ (needs the [plot] extra)
    python scripts/make_figures.py --output_dir plots --only masks noam_schedule
    python scripts/make_figures.py --page                   # refresh the page's code excerpts and printed results
    python scripts/make_figures.py --check                  # change nothing; exit 1 naming each stale block

Every picture is drawn by the package's own code (modeling/learning/figures.py); the one of the copy task trains its
tiny model first (about 10 s on a CPU core). The page's code blocks between `<!-- excerpt: NAME -->` and
`<!-- /excerpt -->` are the live source of NAME, and those between `<!-- output: NAME -->` and `<!-- /output -->`
what tools/annotated_page/printouts.py prints (tools/annotated_page/page.py: repository tools, not installed).
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tools/, which is not installed
from modeling.common.command_line import OneLineErrorParser, positive_int  # noqa: E402
from modeling.learning.figures import FIGURES, write_figures  # noqa: E402
from tools.annotated_page.page import FIGURES_DIR, PAGE, check_page, update_page  # noqa: E402


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", type=Path, default=FIGURES_DIR, help="folder for the PNG files "
                        "(default: docs/figures, the page's)")
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=None, metavar="NAME",
                        help="write only these pictures (default: all; --list names them)")
    parser.add_argument("--page", action="store_true",
                        help="refresh the page's excerpt and output blocks instead of writing pictures")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each stale block and each picture missing from "
                             "--output_dir")
    parser.add_argument("--list", action="store_true", help="print the pictures' names and exit")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch threads (default 1: the small models run fastest on one)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(FIGURES))
        return 0
    torch.set_num_threads(args.threads)
    if args.check or args.page:
        if args.page:
            changed, problems = update_page(PAGE)
            print(f"{'rewrote' if changed else 'unchanged:'} {PAGE}")
        else:
            problems = check_page(PAGE, args.output_dir)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    start = time.perf_counter()
    try:
        paths = write_figures(args.output_dir, args.only)
    except (ImportError, OSError) as error:
        parser.error(str(error).splitlines()[0])
    print("\n".join(map(str, paths)))
    print(f"{len(paths)} pictures in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
