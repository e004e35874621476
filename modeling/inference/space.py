"""A Gradio Space for a model folder: what the Hub's Spaces run to serve the demo page (`demo.py`) of one model.

    app.py            starts the page over model/, with the model's example sentences
    requirements.txt  the libraries the page imports besides gradio, as this package requires them
    README.md         the Space's card: front matter with `sdk: gradio` (the version installed here), the model's name
    model/            the model folder's files that load it: config, weights, checksums, tokenizer, code, card
    modeling/         this package's modules that the page imports, and only those: the Space runs where the package
                      is not installed

`space_files` says what goes where, `write_space` writes it to a folder (`cd FOLDER && python app.py` serves it
locally), `push_space_to_hub` uploads it as a Space in one commit (huggingface_hub's `create_repo` with
`space_sdk="gradio"` + `create_commit`).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
from pathlib import Path

from huggingface_hub import CommitOperationAdd, SpaceCard, SpaceCardData
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .. import __file__ as PACKAGE_INIT
from ..pipeline_annotated_transformer import TARGET_TOKENIZER_SUBDIR
from .example_sentences import example_sentences
from .hub import commit_to_hub, hub_upload_files, upload_problem
from .model_card import MODEL_CARD_NAME, load_card

PACKAGE_DIR = Path(PACKAGE_INIT).resolve().parent  # modeling/
DEMO_MODULE = Path(__file__).resolve().parent / "demo.py"
DISTRIBUTION = "annotated-transformer-hf"
# What the page's code imports besides gradio (which the Space's sdk_version installs) and their own dependencies.
SPACE_REQUIREMENTS = ("torch", "transformers", "tokenizers", "safetensors", "matplotlib")
MODEL_SUBDIR, APP_FILE, REQUIREMENTS_FILE = "model", "app.py", "requirements.txt"
SPACE_COMMIT_MESSAGE = "Upload the demo page of a model trained with annotated-transformer-hf"

APP_TEMPLATE = '''"""The page of {name}: type a sentence, see its translation and where each word looked.

Run it here: pip install gradio=={gradio_version} -r requirements.txt && python app.py, then open
http://127.0.0.1:7860. A Hugging Face Space runs this file too. The model is in model/; the page's code in
modeling/ (from annotated-transformer-hf).
"""

from pathlib import Path

from modeling.inference.demo import serve

MODEL = Path(__file__).resolve().parent / "{model_subdir}"
EXAMPLES = {examples}

if __name__ == "__main__":
    serve(MODEL, host=None, examples=EXAMPLES)  # host None: gradio's default, or GRADIO_SERVER_NAME as Spaces set it
'''

README_BODY = """
# {name}: translation and attention

A page over `{model_name}`, an encoder-decoder Transformer (*Attention Is All You Need*, Vaswani et al., 2017)
trained with annotated-transformer-hf: type a sentence, see its translation, and see which words each word
attended to (encoder-decoder, encoder and decoder self-attention), layer by layer and head by head.

The model is in `model/` (its card: `model/README.md`), the page's code in `modeling/`, and `app.py` starts it.
To run it on your computer:

```bash
pip install gradio=={gradio_version} -r requirements.txt
python app.py     # then open http://127.0.0.1:7860
```
"""


def _module_path(module: str) -> Path | None:
    """The file of a `modeling...` module or package, None when there is none."""
    path = PACKAGE_DIR.parent.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_imports(path: Path) -> set[Path]:
    """The files of this package that `path` imports, at its top level or inside functions."""
    module = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(filter(None, [base, node.module]))
            names = [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            target, names = "", [alias.name for alias in node.names]
        else:
            continue
        for name in [target, *names]:
            if name.split(".")[0] == PACKAGE_DIR.name and (file := _module_path(name)) is not None:
                found.add(file)
    return found


def demo_code_files() -> dict[str, Path]:
    """{path in the Space: file} of the package's modules that the demo page imports, followed through their
    imports, with the `__init__.py` of every package on the way (Python runs them on import)."""
    todo, found = [DEMO_MODULE], set()
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        todo += _package_imports(path)
        todo += [parent / "__init__.py" for parent in path.parents
                 if parent.is_relative_to(PACKAGE_DIR) and (parent / "__init__.py").is_file()]
    return {path.relative_to(PACKAGE_DIR.parent).as_posix(): path for path in sorted(found)}


def model_files(model_dir: str | os.PathLike) -> list[str]:
    """What of a model folder the Space carries: its top-level files as the Hub upload takes them (no checkpoints,
    training state or hidden files) and a separate target tokenizer; not its logs or evaluation outputs."""
    return [name for name in hub_upload_files(model_dir)
            if "/" not in name or name.startswith(f"{TARGET_TOKENIZER_SUBDIR}/")]


def requirements_text() -> str:
    """requirements.txt: SPACE_REQUIREMENTS with the version ranges this package's installed metadata gives them (the
    demo extra's where it names one), bare names where the package is not installed."""
    try:
        required = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        required = []
    specifiers = {}
    for requirement in map(Requirement, required):
        name = canonicalize_name(requirement.name)
        if requirement.marker is None or "demo" in str(requirement.marker) or name not in specifiers:
            specifiers[name] = f"{requirement.name}{requirement.specifier}"
    return "".join(f"{specifiers.get(name, name)}\n" for name in SPACE_REQUIREMENTS)


def _gradio_version() -> str:
    from .demo import require_gradio

    return require_gradio().__version__


def space_readme(model_dir: str | os.PathLike, repo_id: str, gradio_version: str) -> str:
    """The Space's card: Spaces front matter (sdk: gradio, its version, app.py, the model's license) and a page
    that names the model and says how to run it locally."""
    name = repo_id.split("/")[-1]
    model_name, license = Path(model_dir).resolve().name, None
    if (Path(model_dir) / MODEL_CARD_NAME).is_file():
        card = load_card(Path(model_dir) / MODEL_CARD_NAME)
        model_name = getattr(card.data, "model_name", None) or model_name
        license = card.data.license
    data = SpaceCardData(title=name, sdk="gradio", sdk_version=gradio_version, app_file=APP_FILE,
                         license=license or "apache-2.0", emoji="🔍", colorFrom="indigo", colorTo="blue",
                         pinned=False)
    text = f"---\n{data.to_yaml()}\n---\n" + README_BODY.format(name=name, model_name=model_name,
                                                                   gradio_version=gradio_version)
    return SpaceCard(text).content  # parses: the Hub reads the same front matter


def space_problem(model_dir: str | os.PathLike) -> str | None:
    """Why `model_dir` cannot become a Space (None if it can): as `hub.upload_problem`, except that files a model
    folder does not hold are no problem (the Space copies only the model's own, `model_files`)."""
    return upload_problem(model_dir, allow_other_files=True)


def space_files(model_dir: str | os.PathLike, repo_id: str) -> dict[str, Path | str]:
    """{path in the Space: a file to copy, or the text of a file} for the Space `repo_id` of `model_dir`."""
    gradio_version = _gradio_version()
    examples = json.dumps(example_sentences(model_dir), ensure_ascii=False, indent=4)  # a JSON list is Python too
    app = APP_TEMPLATE.format(name=repo_id.split("/")[-1], gradio_version=gradio_version, model_subdir=MODEL_SUBDIR,
                              examples=examples)
    files: dict[str, Path | str] = {
        APP_FILE: app, REQUIREMENTS_FILE: requirements_text(),
        MODEL_CARD_NAME: space_readme(model_dir, repo_id, gradio_version),
    }
    files.update({f"{MODEL_SUBDIR}/{name}": Path(model_dir) / name for name in model_files(model_dir)})
    files.update(demo_code_files())
    return dict(sorted(files.items()))


def check_space_dir(space_dir: str | os.PathLike) -> None:
    """ValueError unless `space_dir` is a new or empty folder (a Space folder is written whole, never merged)."""
    path = Path(space_dir)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"--space_dir {space_dir} {'is a file' if not path.is_dir() else 'is not empty'}: give a "
                         "new or empty folder")


def write_space(space_dir: str | os.PathLike, files: dict[str, Path | str]) -> None:
    """Write a Space's `files` (as `space_files` gives them) into `space_dir`, a new or empty folder."""
    check_space_dir(space_dir)
    for name, content in files.items():
        target = Path(space_dir) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            target.write_bytes(content.read_bytes())
        else:
            target.write_text(content, encoding="utf-8")


def push_space_to_hub(
    model_dir: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = SPACE_COMMIT_MESSAGE,
    endpoint: str | None = None,
    files: dict[str, Path | str] | None = None,
):
    """Create (if needed) the Gradio Space `repo_id` and upload the Space of `model_dir` (its `files`, when
    `space_files` gave them already) to it in one commit; returns the commit info. ValueError before any network
    access when the folder is no complete model, `HubUploadError` with the reason when the upload fails."""
    problem = space_problem(model_dir)
    if problem is not None:
        raise ValueError(problem)
    files = files if files is not None else space_files(model_dir, repo_id)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(content) if isinstance(content, Path)
                                     else content.encode("utf-8")) for name, content in files.items()]
    return commit_to_hub(
        repo_id, operations, what=f"the Space of {model_dir}", repo_type="space", space_sdk="gradio", token=token,
        endpoint=endpoint, private=private, commit_message=commit_message,
        advice=f"The model folder is unchanged. Write the Space to a folder with `python scripts/push_to_hub.py "
               f"{model_dir} {repo_id} --space --dry_run --space_dir FOLDER`, or push again once the Hub is reachable "
               "and you are logged in (`hf auth login`).",
    )


__all__ = [
    "SPACE_COMMIT_MESSAGE", "check_space_dir", "demo_code_files", "model_files", "push_space_to_hub",
    "requirements_text", "space_files", "space_problem", "space_readme", "write_space",
]
