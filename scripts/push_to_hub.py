"""Upload a trained model folder (train.py's output_dir, an average, ...) to the Hugging Face Hub, in one commit.

    python scripts/push_to_hub.py outputs/multi30k-de-en-cpu-avg5 you/transformer-multi30k-de-en
    python scripts/push_to_hub.py outputs/multi30k-de-en-cpu-avg5 you/transformer-multi30k-de-en --dry_run

Log in first (`hf auth login`) or pass --token. The folder is checked before anything is sent: a config, weights
complete and matching their checksums, the tokenizer. Intermediate checkpoints and the state that resumes a run
(optimizer, scheduler, RNG) and hidden files stay local; other files a model folder does not hold are refused
(--allow_other_files sends them); the uploaded model card loads the repo id in its "How to use". The local folder
is not changed. --dry_run lists what would be sent, without a network.
"""

import argparse
import sys

from huggingface_hub.utils import HFValidationError, validate_repo_id

from modeling.common.command_line import OneLineErrorParser
from modeling.inference.hub import HubUploadError, hub_model_card, hub_upload_files, push_folder_to_hub, upload_problem


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a model folder written by scripts/train.py or average_checkpoints.py")
    parser.add_argument("repo_id", help="the Hub repo to create or update: you/name (or name, in your namespace)")
    parser.add_argument("--private", action="store_true", default=None, help="create the repo as private")
    parser.add_argument("--revision", default=None, help="the branch to commit to (created if missing; default main)")
    parser.add_argument("--commit_message", default="Upload model trained with annotated-transformer-hf")
    parser.add_argument("--token", default=None, help="a Hub token (default: the one `hf auth login` stored)")
    parser.add_argument("--dry_run", action="store_true", help="list the files that would be uploaded; send nothing")
    parser.add_argument("--allow_other_files", action="store_true",
                        help="upload files a model folder does not hold too (refused by default: they may be private)")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as error:
        parser.error(f"repo_id {args.repo_id!r} is not a Hub repo id: {error}")
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
            commit_message=args.commit_message, allow_other_files=args.allow_other_files,
        )
    except HubUploadError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"Pushed {len(files)} files of {args.model_dir} to {commit.repo_url}: {commit.commit_url}")


if __name__ == "__main__":
    main()
