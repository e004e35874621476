"""The walk's real-world example (docs/annotated.md, section 18), as The Annotated Transformer ends on one: the
German→English model the repository ships, Multi30k's validation pairs, and the BLEU of translations.

`SHIPPED_MODEL` is the model's folder in the clone (`modeling.inference.translation`'s: the CPU recipe,
configs/multi30k_de_en_cpu.yaml, its last 5 checkpoints averaged); `shipped_model()` finds the clone from the current
folder (the notebook's, notebooks/) or a folder above it, or takes the folder it is given: an installed package has no
clone of its own. `validation_pairs()` reads Multi30k's validation split from $MULTI30K_DIR, else the clone's
data/multi30k (where the README's download puts it), and falls back to the walk's written pairs, saying so, when
neither holds it. The walk scores translations with sacreBLEU, as the recipes do. `translation_attention` takes
the shipped model's attention weights for one validation sentence, which `figures.translation_attention_figure`
draws; the walk draws the same picture from the weights of the model built from scratch.
"""

from __future__ import annotations

import ast
import gzip
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..inference.translation import SHIPPED_MODEL, load_translation_model
from .demonstrations import EXAMPLE_PAIRS, attention_weights
from .greedy import greedy_decode

MULTI30K = "data/multi30k"  # in the clone, where the README's download puts Multi30k
MAX_NEW_TOKENS = 50  # the walk's longest translation: Multi30k's longest validation target is 44 tokens with </s>
# The validation pair whose attention the walk draws (line 165 of val.de.gz and val.en.gz), short enough to read in
# every panel; tests/test_annotated.py checks that Multi30k holds it.
ATTENTION_EXAMPLE = ("Drei Hunde spielen im Schnee.", "Three dogs playing in the snow.")


def checkout(start: str | os.PathLike | None = None) -> Path:
    """The clone the walk runs in: `start` (default: the current folder) or the first folder above it that holds
    `SHIPPED_MODEL`; `start` itself where none does."""
    here = Path(start or Path.cwd()).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / SHIPPED_MODEL).is_dir()), here)


def shipped_model(folder: str | os.PathLike | None = None) -> Path:
    """The shipped model's folder: `folder`, else `SHIPPED_MODEL` in the clone (`checkout()`); FileNotFoundError
    when it holds no model."""
    folder = Path(folder) if folder is not None else checkout() / SHIPPED_MODEL
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} holds no model (config.json): the walk's last section needs the model the "
                                f"repository ships in {SHIPPED_MODEL}: run the walk in a clone of the repository")
    return folder


def multi30k_folder() -> Path:
    """Where the walk reads Multi30k: $MULTI30K_DIR if set, else the clone's data/multi30k."""
    return Path(os.environ["MULTI30K_DIR"]) if os.environ.get("MULTI30K_DIR") else checkout() / MULTI30K


def download_command() -> str:
    """The command that downloads Multi30k into data/multi30k (`modeling.data.corpus.MULTI30K_DOWNLOAD`), read from
    that module's source: importing it needs `datasets`, which the walk's install (the `notebook` extra) leaves out."""
    source = (Path(__file__).resolve().parents[1] / "data" / "corpus.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "MULTI30K_DOWNLOAD"
                                                for target in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError("modeling/data/corpus.py defines no MULTI30K_DOWNLOAD")


def read_lines(path: str | os.PathLike) -> list[str]:
    """The sentences of one side of a split: gzip-compressed UTF-8 text, one sentence a line."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def validation_pairs(folder: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """Multi30k's validation pairs (German, English) from `folder` (default `multi30k_folder()`); where it does not
    hold val.de.gz and val.en.gz, one printed line that says so and how to download them, and the walk's written
    pairs (`EXAMPLE_PAIRS`, not Multi30k) instead."""
    folder = multi30k_folder() if folder is None else Path(folder)
    german, english = folder / "val.de.gz", folder / "val.en.gz"
    if not (german.is_file() and english.is_file()):
        print(f"Multi30k is not in {folder} (set MULTI30K_DIR, or download it into data/multi30k from the clone's "
              f"folder: {download_command()}); the walk's {len(EXAMPLE_PAIRS)} written pairs instead")
        return list(EXAMPLE_PAIRS)
    sources, targets = read_lines(german), read_lines(english)
    if len(sources) != len(targets):
        raise ValueError(f"{folder}: val.de.gz has {len(sources)} lines and val.en.gz {len(targets)}: one sentence a "
                         "line, the same number on both sides")
    return list(zip(sources, targets))


# ----------------------------------------------------------------------------------------------------------------------
# What the shipped model attends to
# ----------------------------------------------------------------------------------------------------------------------


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each id as the text it stands for (byte-level BPE's Ġ and bytes decoded), special tokens by name."""
    return [tokenizer.decode([i]).strip() or tokenizer.convert_ids_to_tokens(i) for i in ids]


@dataclass
class TranslationAttention:
    source: list[str]  # the source's tokens, </s> last
    decoder_input: list[str]  # <s>, then the greedy translation's tokens without </s>
    attentions: dict[str, list[torch.Tensor]]  # "encoder", "decoder", "cross" -> per layer (heads, queries, keys)


@torch.no_grad()
def translation_attention(sentence: str = ATTENTION_EXAMPLE[0]) -> TranslationAttention:
    """The shipped model's attention weights (every layer and head, eagerly) for `sentence` and its greedy
    translation, as the decoder reads it: <s>, then the translation without </s>."""
    model, tokenizer, target_tokenizer = load_translation_model(shipped_model(), device="cpu")
    source = tokenizer([sentence], return_tensors="pt")["input_ids"]
    translation = greedy_decode(model, source, torch.ones_like(source), MAX_NEW_TOKENS)[0].tolist()
    decoder_input = translation[:-1] if translation[-1] == model.config.eos_token_id else translation
    model.set_attn_implementation("eager")  # SDPA forms no weights
    attentions = attention_weights(model, source, torch.tensor([decoder_input]))
    return TranslationAttention(token_labels(tokenizer, source[0].tolist()),
                                token_labels(target_tokenizer, decoder_input), attentions)


__all__ = ["ATTENTION_EXAMPLE", "MAX_NEW_TOKENS", "MULTI30K", "SHIPPED_MODEL", "TranslationAttention", "checkout",
           "download_command", "multi30k_folder", "read_lines", "shipped_model", "token_labels", "translation_attention",
           "validation_pairs"]
