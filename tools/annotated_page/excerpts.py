"""Code excerpts for the walk, pulled from the live source by object, so that the page shows the code as it is.

An excerpt is named by its dotted path: a module, then a class, function or method inside it, e.g.
`modeling.modeling_annotated_transformer.SinusoidalPositionalEncoding` or
`modeling.modeling_annotated_transformer.AnnotatedTransformerEncoder.forward`. Its text is the object's source
(decorators included, indentation removed) under a comment naming the file it comes from.
"""

from __future__ import annotations

import importlib
import inspect
import textwrap
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def resolve(name: str):
    """The module, class, function or method that the dotted `name` names (ValueError naming what is missing)."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for position, attribute in enumerate(parts[split:], start=split):
            if not hasattr(found, attribute):
                raise ValueError(f"{'.'.join(parts[:position])} has no {attribute!r}: cannot excerpt {name}")
            found = getattr(found, attribute)
        return found
    raise ValueError(f"no module of {name!r} can be imported: name an object as package.module.Object[.method]")


def source_file(obj) -> str:
    """The file that defines `obj`, relative to the repository (as the page names it)."""
    path = Path(inspect.getsourcefile(inspect.unwrap(obj))).resolve()
    try:
        return path.relative_to(REPOSITORY).as_posix()
    except ValueError:
        return path.name


def excerpt(name: str) -> str:
    """The source of the object `name` names, dedented, under a `# <file>` comment, ending in a newline."""
    obj = resolve(name)
    source = textwrap.dedent(inspect.getsource(obj))
    return f"# {source_file(obj)}\n{source.rstrip()}\n"


def definition_line(name: str) -> tuple[str, int]:
    """(file, first line) of the object `name` names: where it is defined, for ordering the page's excerpts."""
    obj = resolve(name)
    return source_file(obj), inspect.getsourcelines(obj)[1]


__all__ = ["definition_line", "excerpt", "resolve", "source_file"]
