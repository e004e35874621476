"""Example sentences for a model folder, as its model card names them: the sentence the card's "How to use"
translates, then the first sources of the validation split the model was trained with (the synthetic task's, or a
local corpus folder's when it exists from the current directory). A corpus on the Hub is not downloaded: its
examples are the card's one sentence.

The card is the one `model_card.py` renders (and `average_checkpoints.py` keeps): its "How to use" calls
`tokenizer([<the sentence as JSON>], ...)` and its "Data" section begins "The embedded synthetic <task> task" or
"Parallel corpus `<corpus>`, <source> -> <target>.".
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from .model_card import MODEL_CARD_NAME

logger = logging.getLogger(__name__)

DEFAULT_COUNT = 5
CARD_EXAMPLE = re.compile(r'tokenizer\(\[("(?:[^"\\]|\\.)*")\], return_tensors')
SYNTHETIC_DATA = re.compile(r"^The embedded synthetic (\w+) task", re.MULTILINE)
CORPUS_DATA = re.compile(r"^Parallel corpus `(.+?)`, (\S+) -> (\S+)\.$", re.MULTILINE)
UNNAMED_LANGUAGES = ("source", "target")  # what the card says when --source_lang or --target_lang was not given


def card_example(card_text: str) -> str | None:
    """The sentence the card's "How to use" translates (None when the card has no such call)."""
    match = CARD_EXAMPLE.search(card_text)
    if match is None:
        return None
    try:
        return json.loads(match[1])
    except ValueError:
        return None


def validation_sources(card_text: str, count: int = DEFAULT_COUNT) -> list[str]:
    """The first `count` sources of the validation split the card names, [] when it names none that is here (a
    Hub dataset, a folder that does not exist from the current directory, a corpus without a validation split)."""
    if match := SYNTHETIC_DATA.search(card_text):
        data, source_lang, target_lang = match[1], None, None
    elif (match := CORPUS_DATA.search(card_text)) and Path(match[1]).exists():
        data = match[1]
        source_lang, target_lang = (None if lang in UNNAMED_LANGUAGES else lang for lang in match.group(2, 3))
    else:
        return []
    from ..data.corpus import load_parallel_corpus  # `datasets`: imported only when a card names data

    try:
        corpus = load_parallel_corpus(data, source_lang, target_lang, splits=["validation"])
    except (OSError, ValueError) as error:
        logger.warning("no validation examples from %s: %s", data, str(error).splitlines()[0] if str(error) else error)
        return []
    return list(corpus["validation"]["source"][:count])


def example_sentences(model_dir: str | os.PathLike, count: int = DEFAULT_COUNT) -> list[str]:
    """At most `count` different example sentences for the model in `model_dir` (see the module's doc): the card's,
    then the validation split's first sources; [] without a readable card."""
    card = Path(model_dir) / MODEL_CARD_NAME
    try:
        text = card.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    examples = []
    for sentence in [card_example(text), *validation_sources(text, count)]:
        if sentence and sentence.strip() and sentence not in examples:
            examples.append(sentence)
    return examples[:count]


__all__ = ["card_example", "example_sentences", "validation_sources"]
