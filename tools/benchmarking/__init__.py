"""Speed of our Transformer against transformers' `MarianMTModel` of identical dimensions, and of the data pipeline.

Sections (each module's doc says how its figures are measured):
- `models`: the two models, built identical (dimensions, post-norm, tied embeddings, dropout, weights);
- `training_speed`: target tokens/s, FLOP/s and its fraction of the measured matmul peak, peak memory, for the
  first epoch (unseen batch shapes, fresh processes) and the steady state; ratios ours/Marian; with `--packing`
  ours on packed batches too;
- `generation_speed`: generated tokens/s, greedy and beam search, with the KV cache; ratios ours/Marian;
- `data_speed`: text files to token-budget batches (time, peak RSS) and launch to the first training step;
- `measure`: clocks, FLOP counting, memory, fresh processes; `settings`: every option; `report`: table and JSON.

`scripts/benchmark.py` is the command line: `python scripts/benchmark.py --quick`.
"""

from .models import SIZES, benchmark_config, build_models, copy_weights_to_marian, marian_config
from .report import comparison, format_table, write_results
from .run import run_benchmark
from .settings import BenchmarkSettings, build_parser, settings_from_arguments

__all__ = [
    "SIZES",
    "BenchmarkSettings",
    "benchmark_config",
    "build_models",
    "build_parser",
    "comparison",
    "copy_weights_to_marian",
    "format_table",
    "marian_config",
    "run_benchmark",
    "settings_from_arguments",
    "write_results",
]
