"""The German->English model committed with the repository (`modeling.inference.translation.SHIPPED_MODEL`,
models/multi30k-de-en-cpu): made once from the CPU recipe's averaged model, and its copy of the model code kept equal
to the package's.

    python tools/shipped_model.py --check                       # exit 1 naming each code file that differs
    python tools/shipped_model.py --refresh                     # the package's code into the folder (weights kept)
    python tools/shipped_model.py --make outputs/multi30k-de-en-cpu-avg5   # the folder from an averaged model

`--make` copies what loads and what was measured: weights and their checksums, config, generation settings,
tokenizer, code, and the evaluations `scripts/evaluate.py` wrote (`eval-*/results.json`, `hypotheses.txt`), with
each test set's path recorded relative to the checkout (`data/multi30k/...`); its card is the reference model's,
model_card.md (rendered from benchmarks/results-recipes-cpu.json). Checkpoints, logs and training state stay behind.
A repository tool, not installed: the folder is not in the wheel.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))  # run as a script: the checkout's package and tools

from modeling.inference.translation import SHIPPED_MODEL  # noqa: E402

FOLDER = REPOSITORY / SHIPPED_MODEL
PACKAGE = REPOSITORY / "modeling"
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "checksums.sha256", "tokenizer.json",
               "tokenizer_config.json")
EVALUATIONS = ("eval-validation", "eval-test_2016_flickr")  # evaluate.py's folders of the scores the card shows
EVALUATION_FILES = ("results.json", "hypotheses.txt")
CARD = "README.md"


def code_files_written() -> set[str]:
    """The code files `save_pretrained` writes into a model folder now: the package's model code and what it
    imports (found by saving a tiny model)."""
    from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration

    model = AnnotatedTransformerForConditionalGeneration(
        AnnotatedTransformerConfig.from_preset("tiny", vocab_size=16, d_model=8, encoder_layers=1, decoder_layers=1,
                                               encoder_attention_heads=2, decoder_attention_heads=2,
                                               encoder_ffn_dim=8, decoder_ffn_dim=8))
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return {path.name for path in Path(folder).glob("*.py")}


def code_problems(folder: Path = FOLDER) -> list[str]:
    """Each way the folder's copy of the model code differs from the package's: a file that differs, one missing,
    one the package no longer writes."""
    if not folder.is_dir():
        return [f"{folder} does not exist: make it with `python tools/shipped_model.py --make AVERAGED_MODEL`"]
    written, held = code_files_written(), {path.name for path in folder.glob("*.py")}
    problems = [f"{folder.name}/{name} is missing" for name in sorted(written - held)]
    problems += [f"{folder.name}/{name} is not written by save_pretrained any more" for name in sorted(held - written)]
    problems += [f"{folder.name}/{name} differs from modeling/{name}" for name in sorted(written & held)
                 if not filecmp.cmp(folder / name, PACKAGE / name, shallow=False)]
    return problems


def refresh_code(folder: Path = FOLDER) -> list[str]:
    """Write the package's code files into `folder` (and remove those it no longer writes); the names changed."""
    written = code_files_written()
    changed = []
    for path in folder.glob("*.py"):
        if path.name not in written:
            path.unlink()
            changed.append(path.name)
    for name in sorted(written):
        if not (folder / name).is_file() or not filecmp.cmp(folder / name, PACKAGE / name, shallow=False):
            shutil.copyfile(PACKAGE / name, folder / name)
            changed.append(name)
    return changed


def relative_test_set(value, checkout: Path = REPOSITORY):
    """A results.json `test_set` entry with its paths relative to the checkout where they are inside it, or where a
    folder of the checkout's data/ (a link to the corpus, as data/multi30k may be) leads to them."""
    if isinstance(value, dict):
        return {key: relative_test_set(item, checkout) for key, item in value.items()}
    if isinstance(value, list):
        return [relative_test_set(item, checkout) for item in value]
    if isinstance(value, str) and value.startswith(str(checkout) + "/"):
        return value[len(str(checkout)) + 1:]
    if isinstance(value, str) and value.startswith("/") and (checkout / "data").is_dir():
        for linked in (checkout / "data").iterdir():
            if Path(value) == linked.resolve():
                return linked.relative_to(checkout).as_posix()
    return value


def make(source: Path, folder: Path = FOLDER) -> None:
    """The shipped folder from `source`, an averaged model folder that evaluate.py has scored (see the module doc)."""
    missing = [name for name in (*MODEL_FILES, *(f"{e}/{f}" for e in EVALUATIONS for f in EVALUATION_FILES))
               if not (source / name).is_file()]
    if missing:
        raise ValueError(f"{source} lacks {', '.join(missing)}: average the recipe's checkpoints and score the "
                         "average on validation and test_2016_flickr with scripts/evaluate.py first")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in MODEL_FILES:
        shutil.copyfile(source / name, folder / name)
    for evaluation in EVALUATIONS:
        (folder / evaluation).mkdir()
        shutil.copyfile(source / evaluation / "hypotheses.txt", folder / evaluation / "hypotheses.txt")
        results = json.loads((source / evaluation / "results.json").read_text(encoding="utf-8"))
        results = {key: relative_test_set(value) if key in ("test_set", "model") else value
                   for key, value in results.items()}
        (folder / evaluation / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n",
                                                          encoding="utf-8")
    refresh_code(folder)
    shutil.copyfile(REPOSITORY / "model_card.md", folder / CARD)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shipped_model.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 naming each code file that differs")
    action.add_argument("--refresh", action="store_true", help="write the package's code files into the folder")
    action.add_argument("--make", type=Path, metavar="AVERAGED_MODEL", help="make the folder from an averaged model")
    args = parser.parse_args(argv)
    if args.make is not None:
        try:
            make(args.make)
        except ValueError as error:
            parser.error(str(error))
        print(f"wrote {FOLDER.relative_to(REPOSITORY)}")
        return 0
    if args.refresh:
        changed = refresh_code()
        print(f"refreshed {', '.join(changed)}" if changed else "the code is current")
        return 0
    problems = code_problems()
    for problem in problems:
        print(f"shipped_model.py: {problem}: run `python tools/shipped_model.py --refresh`", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
