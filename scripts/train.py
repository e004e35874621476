"""Train the Transformer with Seq2SeqTrainer: `accelerate launch scripts/train.py [--config FILE] [--flag value ...]`.

With no arguments it trains a tiny model on the embedded copy task (configs/copy_tiny.yaml, whose values are the
defaults of every run on a synthetic task without --config; a run on a corpus takes the flags' own). `--help` lists
every argument; a YAML/JSON `--config` supplies defaults that command-line flags override. How a run ends, and the
one line it prints: modeling/training/entry.py.
"""

import sys
from pathlib import Path

from modeling.training import entry

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "copy_tiny.yaml"


def main(argv=None) -> None:
    entry.main(argv, copy_task_config=DEFAULT_CONFIG)


if __name__ == "__main__":
    main(sys.argv[1:])
