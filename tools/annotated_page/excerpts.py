"""Code excerpts for the walk, pulled from the live source by object, so that the page shows the code as it is.

An excerpt is named by its dotted path: a module, then a class, function or method inside it, e.g.
`modeling.modeling_annotated_transformer.SinusoidalPositionalEncoding` or
`modeling.modeling_annotated_transformer.AnnotatedTransformerEncoder.forward`. Its text is the object's source
(decorators included, indentation removed) under a comment naming the file it comes from.

An abridged excerpt keeps only the statements that carry the paper's idea: `excerpt(name, keep=("self.embeddings(",
"for layer in"))` keeps each statement in which one of the `keep` strings occurs (a whole statement, however many
lines it spans; a compound statement such as a loop whole when its own first line holds the string; the docstring
when it holds one, e.g. '§3'), the comments right above them, the headers of the blocks around them (the `def`, with
the lines of a long signature that hold a `keep` string, an `if`, an `else:`), and writes `# …` where it leaves
lines out. A `keep` string that occurs nowhere is an error: an abridged excerpt cannot silently lose what it was
kept for when the code changes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Sequence
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
ELISION = "# …"


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


def _back_to_code(lines: list[str], number: int) -> int:
    """`number`, or the nearest line above it that is neither blank nor a comment."""
    while number > 1 and (not lines[number - 1].strip() or lines[number - 1].lstrip().startswith("#")):
        number -= 1
    return number


def _blocks(node: ast.AST, lines: list[str]) -> list[tuple[list[ast.stmt], int | None]]:
    """The statement lists directly inside a compound statement, each with the line of its own header when it has
    one apart from the statement's first line (an `else:`, an `except ...:`, a `finally:`), else None."""
    blocks = []
    for field in ("body", "handlers", "orelse", "finalbody"):
        statements = getattr(node, field, None)
        if not statements:
            continue
        if field == "handlers":
            blocks += [(handler.body, handler.lineno) for handler in statements]
        elif field == "body":
            blocks.append((statements, None))
        elif field == "orelse" and isinstance(node, ast.If) and len(statements) == 1 and isinstance(
                statements[0], ast.If) and statements[0].col_offset == node.col_offset:
            blocks.append((statements, None))  # an `elif`: its own If statement, whose first line is its header
        else:  # `else:` or `finally:`, the code line before the block's first statement
            blocks.append((statements, _back_to_code(lines, _first_line(statements[0]) - 1)))
    return blocks


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", []))])


def _header_end(node: ast.stmt, lines: list[str]) -> int:
    """The last line of a compound statement's header (`def f(...) -> X:` may span lines), comments after it aside."""
    return _back_to_code(lines, _first_line(node.body[0]) - 1)


def _statement_lines(node: ast.stmt) -> set[int]:
    return set(range(_first_line(node), node.end_lineno + 1))


def _select(node: ast.stmt, lines: list[str], keep: Sequence[str], found: set[str], top: bool) -> set[int]:
    """The lines (1-based) of `node` to keep: all of it when a simple statement (or a compound one's first line)
    holds a `keep` string, else its header and what its blocks keep, or nothing."""
    compound = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
                                 ast.While, ast.With, ast.AsyncWith, ast.Try))
    own = lines[node.lineno - 1] if compound else "\n".join(lines[_first_line(node) - 1 : node.end_lineno])
    if not top and any(string in own for string in keep):
        whole = "\n".join(lines[_first_line(node) - 1 : node.end_lineno])
        found.update(string for string in keep if string in whole)
        return _statement_lines(node)
    kept = set()
    for statements, header in _blocks(node, lines):
        inside = set()
        for statement in statements:
            inside |= _select(statement, lines, keep, found, False)
        if inside and header is not None:
            inside.add(header)
        kept |= inside
    if not kept and not top:
        return set()
    header = list(range(node.lineno, _header_end(node, lines) + 1))  # decorators left out: the header itself
    if top and len(header) > 2:  # a long signature: its first and last lines, and those that hold a `keep` string
        middle = {number for number in header[1:-1] if any(string in lines[number - 1] for string in keep)}
        found.update(string for number in middle for string in keep if string in lines[number - 1])
        header = [header[0], *sorted(middle), header[-1]]
    return kept | set(header)


def _with_comments_above(kept: set[int], lines: list[str]) -> set[int]:
    """`kept` and the comment lines right above each kept line at its indentation (what they explain)."""
    result = set(kept)
    for number in sorted(kept):
        indentation = len(lines[number - 1]) - len(lines[number - 1].lstrip())
        above = number - 1
        while above >= 1 and above not in result and lines[above - 1].lstrip().startswith("#") and (
                len(lines[above - 1]) - len(lines[above - 1].lstrip()) == indentation):
            result.add(above)
            above -= 1
    return result


def abridge(source: str, keep: Sequence[str]) -> str:
    """`source` (one dedented function or class) with only the statements that hold a `keep` string, the comments
    right above them and the headers around them; each run of left-out lines becomes one `# …` line at its
    indentation."""
    lines = source.splitlines()
    tree = ast.parse(source)
    if len(tree.body) != 1:
        raise ValueError("abridge one function or class at a time")
    found: set[str] = set()
    kept = _with_comments_above(_select(tree.body[0], lines, keep, found, top=True), lines)
    missing = [string for string in keep if string not in found]
    if missing:
        raise ValueError(f"no statement holds {missing[0]!r}: keep strings that occur in the code")
    output, skipped, blank = [], None, False
    for number, line in enumerate(lines, start=1):
        if number in kept:
            output += [skipped] if skipped is not None else [""] if blank else []
            output.append(line)
            skipped, blank = None, False
        elif not line.strip():
            blank = bool(output) and skipped is None
        else:
            skipped = skipped or line[: len(line) - len(line.lstrip())] + ELISION
            blank = False
    if skipped is not None:
        output.append(skipped)
    return "\n".join(output)


def excerpt(name: str, keep: Sequence[str] = ()) -> str:
    """The source of the object `name` names, dedented, under a `# <file>` comment, ending in a newline; with `keep`,
    abridged to the statements that hold those strings (`abridge`)."""
    obj = resolve(name)
    source = textwrap.dedent(inspect.getsource(obj)).rstrip()
    if keep:
        return f"# {source_file(obj)}, abridged\n{abridge(source, keep)}\n"
    return f"# {source_file(obj)}\n{source}\n"


def definition_line(name: str) -> tuple[str, int]:
    """(file, first line) of the object `name` names: where it is defined, for ordering the page's excerpts."""
    obj = resolve(name)
    return source_file(obj), inspect.getsourcelines(obj)[1]


__all__ = ["ELISION", "abridge", "definition_line", "excerpt", "resolve", "source_file"]
