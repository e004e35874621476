"""Every BLEU and speed figure of the README, docs/ and model_card.md, rendered from the measured JSON in benchmarks/.

A document holds each table of figures in a marker block, which only this module writes:

    <!-- figures: NAME -->
    (the table NAME, rendered from benchmarks/*.json)
    <!-- /figures -->

`render_table(NAME)` renders one table (`TABLES` lists them); `update_text` rewrites every block of a document, and
`check_text` names each block whose content is not what its JSON renders (stale), each unknown NAME, each broken
marker and each `benchmarks/....json` the document names that does not exist. `reference_model_card` renders the card
of the project's reference model (the de->en CPU recipe) from the same template as every trained model's card.
`scripts/render_figures.py` runs them over README.md, docs/*.md and model_card.md.
"""

# their tables register themselves in TABLES
from . import packed_training, performance, recipes, table3_table  # noqa: F401
from .blocks import (
    Block,
    check_documents,
    check_text,
    documents,
    find_blocks,
    missing_benchmark_files,
    update_documents,
    update_text,
)
from .formats import REPOSITORY, TABLES, Benchmarks, FiguresError, load, render_table, table
from .reference_card import reference_model_card, reference_model_card_context

__all__ = [
    "REPOSITORY", "TABLES", "Benchmarks", "Block", "FiguresError", "check_documents", "check_text", "documents",
    "find_blocks", "load", "missing_benchmark_files", "reference_model_card", "reference_model_card_context",
    "render_table", "table", "update_documents", "update_text",
]
