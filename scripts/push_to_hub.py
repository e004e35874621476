"""Upload a trained model folder (train.py's output_dir, an average, ...) to the Hugging Face Hub, in one commit.

    python scripts/push_to_hub.py outputs/multi30k-de-en-cpu-avg5 you/transformer-multi30k-de-en
    python scripts/push_to_hub.py outputs/multi30k-de-en-cpu-avg5 you/transformer-multi30k-de-en --dry_run

Log in first (`hf auth login`) or pass --token. The folder is checked before anything is sent: a config, weights
complete and matching their checksums, the tokenizer. Intermediate checkpoints and the state that resumes a run
(optimizer, scheduler, RNG) and hidden files stay local; other files a model folder does not hold are refused
(--allow_other_files sends them); the uploaded model card loads the repo id in its "How to use". The local folder
is not changed. --dry_run lists what would be sent, without a network.

--space uploads the model's demo page as a Gradio Space instead (scripts/demo.py's page, with the model and the
page's code in it, so it runs where this package is not installed); --space_dir also writes that Space to a folder,
where `python app.py` serves it:

    python scripts/push_to_hub.py MODEL you/transformer-multi30k-de-en-demo --space
    python scripts/push_to_hub.py MODEL you/transformer-multi30k-de-en-demo --space --dry_run --space_dir my-space
"""

import argparse
import sys

from huggingface_hub.utils import HFValidationError, validate_repo_id

from modeling.common.command_line import OneLineErrorParser
from modeling.inference.hub import HubUploadError, hub_model_card, hub_upload_files, push_folder_to_hub, upload_problem
from modeling.inference.space import (
    SPACE_COMMIT_MESSAGE,
    check_space_dir,
    push_space_to_hub,
    space_files,
    space_problem,
    write_space,
)

MODEL_COMMIT_MESSAGE = "Upload model trained with annotated-transformer-hf"


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(prog="push_to_hub.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a model folder written by scripts/train.py or average_checkpoints.py")
    parser.add_argument("repo_id", help="the Hub repo to create or update: you/name (or name, in your namespace)")
    parser.add_argument("--private", action="store_true", default=None, help="create the repo as private")
    parser.add_argument("--revision", default=None, help="the branch to commit to (created if missing; default main)")
    parser.add_argument("--commit_message", default=None,
                        help=f"default: {MODEL_COMMIT_MESSAGE!r} (with --space: {SPACE_COMMIT_MESSAGE!r})")
    parser.add_argument("--token", default=None, help="a Hub token (default: the one `hf auth login` stored)")
    parser.add_argument("--dry_run", action="store_true", help="list the files that would be uploaded; send nothing")
    parser.add_argument("--allow_other_files", action="store_true",
                        help="upload files a model folder does not hold too (refused by default: they may be private)")
    parser.add_argument("--space", action="store_true",
                        help="upload the model's demo page as a Gradio Space named repo_id (the model travels in it)")
    parser.add_argument("--space_dir", default=None,
                        help="with --space: also write the Space to this new or empty folder (python app.py there "
                        "serves it)")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as error:
        parser.error(f"repo_id {args.repo_id!r} is not a Hub repo id: {error}")
    if args.space:
        space(parser, args)
        return
    if args.space_dir is not None:
        parser.error("--space_dir writes a Space's folder: add --space")
    problem = upload_problem(args.model_dir, args.allow_other_files)
    if problem is not None:
        parser.error(problem)

    files = hub_upload_files(args.model_dir)
    if args.dry_run:
        card = "with its model card" if hub_model_card(args.model_dir, args.repo_id) else "without a model card"
        print(f"Would upload {len(files)} files of {args.model_dir} to {args.repo_id} ({card}):")
        for name in files:
            print(f"  {name}")
        return
    try:
        commit = push_folder_to_hub(
            args.model_dir, args.repo_id, token=args.token, private=args.private, revision=args.revision,
            commit_message=args.commit_message or MODEL_COMMIT_MESSAGE, allow_other_files=args.allow_other_files,
        )
    except HubUploadError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"Pushed {len(files)} files of {args.model_dir} to {commit.repo_url}: {commit.commit_url}")


def space(parser, args) -> None:
    """--space: list, write or upload the model's Gradio Space."""
    for flag, given in (("--revision", args.revision is not None), ("--allow_other_files", args.allow_other_files)):
        if given:
            parser.error(f"{flag} is for a model upload; a Space carries only the model's own files, on its main "
                         "branch")
    try:
        problem = space_problem(args.model_dir)
        if problem is not None:
            raise ValueError(problem)
        if args.space_dir is not None:
            check_space_dir(args.space_dir)
        files = space_files(args.model_dir, args.repo_id)
        if args.space_dir is not None:
            write_space(args.space_dir, files)
            print(f"Wrote the Space of {args.model_dir} to {args.space_dir}: cd {args.space_dir} && python app.py")
        if args.dry_run:
            print(f"Would upload {len(files)} files of the Gradio Space of {args.model_dir} to {args.repo_id}:")
            for name in files:
                print(f"  {name}")
            return
        commit = push_space_to_hub(args.model_dir, args.repo_id, token=args.token, private=args.private,
                                   commit_message=args.commit_message or SPACE_COMMIT_MESSAGE, files=files)
    except HubUploadError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(1)
    except (ImportError, OSError, ValueError) as error:  # ImportError: gradio, whose version the Space names
        parser.error(str(error).splitlines()[0])
    print(f"Pushed the Space of {args.model_dir} ({len(files)} files) to {commit.repo_url}: {commit.commit_url}")


if __name__ == "__main__":
    main()
