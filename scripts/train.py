"""Train the Transformer with Seq2SeqTrainer: `accelerate launch scripts/train.py [--config FILE] [--flag value ...]`.

With no arguments it trains a tiny model on the embedded copy task (configs/copy_tiny.yaml, whose values are the
defaults of every run on a synthetic task without --config; a run on a corpus takes the flags' own). `--help` lists
every argument; a YAML/JSON `--config` supplies defaults that command-line flags override.

A bad argument, config file or corpus stops the run before anything is written, with one line
`train.py: error: ...` naming it and exit status 2 (in a multi-process run, by the process that found it; the others
end quietly); a failed Hub upload after training, a non-finite loss or a failed checkpoint save exits with status 1.

A stop signal (--stop_signals: SIGTERM, SIGUSR1 and Ctrl-C by default) ends training after the step under way with
that step's checkpoint saved and one line `train.py: stopped by SIGTERM after optimizer step N ...`, exit status 75
(EX_TEMPFAIL: resume with --resume_from_checkpoint last); a second Ctrl-C aborts at once with status 130.

On several machines each machine's log says why the run stopped: a refusal is printed by one process of each
machine; a process that another one's death or silence stopped prints one line naming the lost process and the
checkpoint to resume from, and exits with status 1.
"""

import sys
from pathlib import Path

from modeling.inference.hub import HubUploadError
from modeling.training.argument_parsing import parse_arguments
from modeling.training.arguments import ConfigurationError
from modeling.training.run import STOPPED_STATUS, RefusedByAnotherProcess, TrainingStopped, train
from modeling.training.trainer import CheckpointSaveError, NonFiniteLossError
from modeling.training.world import ProcessLost

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "copy_tiny.yaml"


def report(line: str) -> None:
    """`line` to standard error in one write, so that the lines of a run's processes, which share it, never run into
    each other (a pipe keeps a write of up to 4 KiB whole)."""
    sys.stderr.flush()
    sys.stderr.write(f"train.py: {line}\n")
    sys.stderr.flush()


def fail(error: Exception, status: int) -> None:
    message = " ".join(line.strip() for line in str(error).splitlines())
    report(f"error: {message}")
    sys.exit(status)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        model_args, data_args, training_args, config_path = parse_arguments(argv, copy_task_config=DEFAULT_CONFIG)
        train(model_args, data_args, training_args, config_path=config_path, argv=argv)
    except RefusedByAnotherProcess as error:
        if error.report_here:  # the first process of a machine on which no process refused: its log says why
            fail(error, status=2)
        # That process prints why and fails the run. This one ends quietly with status 0: the launcher (torch's
        # elastic agent) stops every process of its machine as soon as one fails, which could be before that one
        # has printed.
        sys.exit(0)
    except ConfigurationError as error:
        fail(error, status=2)
    except (HubUploadError, NonFiniteLossError, CheckpointSaveError, ProcessLost) as error:  # found while training
        fail(error, status=1)
    except TrainingStopped as error:
        report(str(error))
        sys.exit(STOPPED_STATUS)
    except KeyboardInterrupt:  # a second Ctrl-C (the first stops after the step under way, with its checkpoint)
        report("aborted by a second Ctrl-C; resume from the newest complete checkpoint with "
               "--resume_from_checkpoint last")
        sys.exit(130)


if __name__ == "__main__":
    main()
