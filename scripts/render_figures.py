"""Render every BLEU and speed figure of README.md, docs/*.md and model_card.md from the JSON in benchmarks/.

`python scripts/render_figures.py` regenerates model_card.md (the reference model's card) and rewrites the content of
every marker block (`<!-- figures: NAME -->` ... `<!-- /figures -->`); `--check` changes nothing and exits 1 naming
each stale block, unknown table, broken marker and missing `benchmarks/....json` a document names. `--list` prints the
table names. How each table is rendered: tools/figures/ (recipes.py, performance.py), a repository tool that the
installed package does not hold.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tools/, which is not installed
from tools.figures import REPOSITORY, TABLES, check_documents, update_documents  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each stale block")
    parser.add_argument("--no_model_card", action="store_true",
                        help="leave model_card.md as a whole alone (its marker block is still rendered or checked)")
    parser.add_argument("--list", action="store_true", help="print the table names and exit")
    parser.add_argument("--root", type=Path, default=REPOSITORY, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(sorted(TABLES)))
        return 0
    if args.check:
        problems = check_documents(args.root, model_card=not args.no_model_card)
    else:
        changed, problems = update_documents(args.root, model_card=not args.no_model_card)
        for path in changed:
            print(f"rewrote {path.relative_to(args.root)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
