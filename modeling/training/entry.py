"""The training command, `train.py` (`accelerate launch scripts/train.py` in a checkout; `annotated-transformer-train`
where the package is installed): arguments in, a trained model folder out, and one line and an exit status for every
way it can end.

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

import os
import sys

from ..inference.hub import HubUploadError
from .argument_parsing import parse_arguments
from .arguments import ConfigurationError
from .run import STOPPED_STATUS, RefusedByAnotherProcess, TrainingStopped, train
from .trainer import CheckpointSaveError, NonFiniteLossError
from .world import ProcessLost

PROG = "train.py"  # the name its lines start with, wherever it is run from


def report(line: str) -> None:
    """`line` to standard error in one write, so that the lines of a run's processes, which share it, never run into
    each other (a pipe keeps a write of up to 4 KiB whole)."""
    sys.stderr.flush()
    sys.stderr.write(f"{PROG}: {line}\n")
    sys.stderr.flush()


def fail(error: Exception, status: int) -> None:
    message = " ".join(line.strip() for line in str(error).splitlines())
    report(f"error: {message}")
    sys.exit(status)


def main(argv=None, copy_task_config: str | os.PathLike | None = None) -> None:
    """Train as `argv` (default: the command line) asks. `copy_task_config`: the defaults of a run on the embedded
    copy task without --config (a checkout's configs/copy_tiny.yaml; without it, the arguments' own defaults)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        model_args, data_args, training_args, config_path = parse_arguments(argv, copy_task_config=copy_task_config)
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


__all__ = ["main", "report"]
