"""Train the Transformer with Seq2SeqTrainer: `accelerate launch scripts/train.py [--config FILE] [--flag value ...]`.

With no arguments it trains a tiny model on the embedded copy task (configs/copy_tiny.yaml). `--help` lists every
argument; a YAML/JSON `--config` supplies defaults that command-line flags override.
"""

import sys
from pathlib import Path

from modeling.hub import HubUploadError
from modeling.training import ConfigurationError, parse_arguments, train

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "copy_tiny.yaml"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        model_args, data_args, training_args, config_path = parse_arguments(argv, default_config=DEFAULT_CONFIG)
        train(model_args, data_args, training_args, config_path=config_path, argv=argv)
    except (ConfigurationError, HubUploadError) as error:
        sys.exit(f"train.py: error: {error}")


if __name__ == "__main__":
    main()
