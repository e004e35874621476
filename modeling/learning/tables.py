"""Plain-text tables for the walk's printed results: the columns of `table` line up in any monospaced output."""

from collections.abc import Iterable, Sequence


def table(header: Sequence, rows: Iterable[Sequence]) -> str:
    """`header` and `rows` as lines of columns: the first column left-aligned, the others right-aligned."""
    rows = [[str(value) for value in row] for row in (header, *rows)]
    if len({len(row) for row in rows}) > 1:
        raise ValueError(f"rows of {sorted({len(row) for row in rows})} columns: give every row as many as the header")
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(value.ljust(width) if column == 0 else value.rjust(width)
                               for column, (value, width) in enumerate(zip(row, widths))).rstrip() for row in rows)


def grid(rows: Iterable[Sequence]) -> str:
    """Rows of values, every column right-aligned (a matrix)."""
    rows = [[str(value) for value in row] for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(value.rjust(width) for value, width in zip(row, widths)).rstrip() for row in rows)


__all__ = ["grid", "table"]
