"""Write the pictures of docs/annotated.md, the guided walk through the model, and keep its generated parts and its
notebooks current.

    python scripts/make_figures.py                          # every picture, and what it plots, into docs/figures/
    python scripts/make_figures.py --output_dir plots --only masks noam_schedule
    python scripts/make_figures.py --page                   # refresh the page's excerpts and printed results, then
                                                            # run and write its notebooks (notebooks/)
    python scripts/make_figures.py --check                  # change nothing; exit 1 naming each stale part
    python scripts/make_figures.py --check --only masks     # only these pictures

Every picture is drawn by the package's own code (modeling/learning/figures.py) and saved with the data it plots
(`<name>.json`), which `--check` compares with what the code draws now; the one of the copy task trains its tiny
model first (seconds on a CPU core). The page's code blocks between `<!-- excerpt: NAME -->` and
`<!-- /excerpt -->` are the live source of NAME, and those between `<!-- output: NAME -->` and `<!-- /output -->`
what the cell above them prints; the notebooks are made from the page (tools/annotated_page/: repository tools, not
installed).
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tools/, which is not installed
from modeling.common.command_line import OneLineErrorParser, positive_int  # noqa: E402
from modeling.inference.attention_plots import require_matplotlib  # noqa: E402
from modeling.learning.figures import FIGURES  # noqa: E402
from tools.annotated_page.figure_data import check_figures, write_figures  # noqa: E402
from tools.annotated_page.notebook import NOTEBOOK, SOLUTIONS, source_problems, write_notebooks  # noqa: E402
from tools.annotated_page.checks import check_page  # noqa: E402
from tools.annotated_page.page import FIGURES_DIR, PAGE, update_page  # noqa: E402


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", type=Path, default=FIGURES_DIR, help="folder for the PNG and JSON files "
                        "(default: docs/figures, the page's)")
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=None, metavar="NAME",
                        help="write (or with --check, check) only these pictures (default: all; --list names them)")
    parser.add_argument("--page", action="store_true",
                        help="refresh the page's excerpt and output blocks and its notebooks instead of writing "
                             "pictures")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each stale block, notebook and picture (with --only: "
                             "only those pictures)")
    parser.add_argument("--list", action="store_true", help="print the pictures' names and exit")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch threads (default 1: the small models run fastest on one)")
    return parser


def check(args) -> list[str]:
    """Every stale part: with --only, of those pictures; otherwise of the page, its notebooks and every picture."""
    if args.only:
        return check_figures(args.output_dir, args.only)
    problems = check_page(PAGE, args.output_dir)
    text = PAGE.read_text(encoding="utf-8")
    for path, solutions in ((NOTEBOOK, False), (SOLUTIONS, True)):
        problems += source_problems(path, text, solutions)
    return problems + check_figures(args.output_dir)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(FIGURES))
        return 0
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    try:
        require_matplotlib()
        if args.check:
            problems = check(args)
        elif args.page:
            changed, problems = update_page(PAGE)
            print(f"{'rewrote' if changed else 'unchanged:'} {PAGE}")
            if not problems:
                try:
                    print("\n".join(map(str, write_notebooks(PAGE.read_text(encoding="utf-8")))))
                except ValueError as error:  # a cell that raised, or printed other than the page says
                    problems = [str(error).strip().splitlines()[-1]]
        else:
            problems = []
            print("\n".join(map(str, write_figures(args.output_dir, args.only))))
    except (ImportError, OSError) as error:
        parser.error(str(error).splitlines()[0])
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
