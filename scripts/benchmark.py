"""Benchmark our Transformer against a transformers MarianMTModel of identical dimensions, and the data pipeline.

`python scripts/benchmark.py --quick`; `--help` lists the options. Prints a table
and writes every figure, with the environment, to JSON (default outputs/benchmarks/results-<device>[-quick]-<UTC
time>.json, a new file each run), after each section: Ctrl-C keeps what was measured.
What each figure means and how it is measured: tools/benchmarking/ (each module's doc).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tools/, which is not installed
from tools.benchmarking import (  # noqa: E402
    build_parser,
    format_table,
    run_benchmark,
    settings_from_arguments,
    write_results,
)

TRAIN_SCRIPT = Path(__file__).resolve().parent / "train.py"


def main(argv=None) -> None:
    parser = build_parser()
    try:
        settings = settings_from_arguments(parser.parse_args(argv))
    except ValueError as error:
        parser.error(str(error))
    saves = []

    def save(results):
        write_results(results, settings.output)
        saves.append(settings.output)

    try:
        results = run_benchmark(
            settings, train_script=TRAIN_SCRIPT, log=lambda message: print(message, file=sys.stderr), save=save
        )
    except ValueError as error:  # a corpus that gives no lengths, found before any measuring
        parser.error(str(error))
    except KeyboardInterrupt:
        sys.exit(f"benchmark.py: interrupted; the sections measured until then are in {settings.output}" if saves
                 else "benchmark.py: interrupted before anything was measured; nothing written")
    print(format_table(results))
    print(f"\nwrote {settings.output}")
    if results.get("errors"):
        sys.exit("benchmark.py: failed: " + "; ".join(f"{part}: {error}" for part, error in results["errors"].items()))


if __name__ == "__main__":
    main()
