"""Translation metrics: `corpus_scores` for any hypotheses, `compute_metrics` for `Seq2SeqTrainer` (with
`predict_with_generate=True`), and `evaluate_model` for a saved model on a test set (scripts/evaluate.py).

sacreBLEU and chrF are computed by the local `evaluate` modules in `modeling/inference/metrics/` on detokenized text,
against the raw reference strings (not the references decoded back from token ids), plus exact match.

Under multi-process evaluation `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the
duplicate samples that pad the last batches to equal size on every process; the first `len(references)` gathered
rows are the evaluation set in order, so the rest are dropped here and every score covers exactly that set.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common.command_line import check_output_file, same_file, write_lines
from ..data.corpus import canonical_split_names, find_text_pairs, load_parallel_corpus
from ..tokenization import read_lines
from .metrics import load_metric
from .translation import corpus_perplexity, load_translation_model, single_line, translate

HYPOTHESES_FILE, RESULTS_FILE = "hypotheses.txt", "results.json"


def stored_score(score: float) -> float:
    """A score as results, logs and cards keep it: to 8 places, which drops float noise (100.00000000000004) and
    leaves the 2 places shown as sacreBLEU shows them (rounded to 4 places first, 38.37496 would show as 38.38)."""
    return round(score, 8)


def normalize_whitespace(text: str) -> str:
    return " ".join(text.split())


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Percentage of predictions equal to their reference (whitespace-normalized)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not references:
        return 0.0
    matches = sum(normalize_whitespace(p) == normalize_whitespace(r) for p, r in zip(predictions, references))
    return 100.0 * matches / len(references)


@functools.cache
def _metric(name: str):
    return load_metric(name)  # once per process: a metric module is reusable across compute() calls


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], *, lowercase_bleu: bool = False
) -> tuple[dict[str, float], dict[str, str]]:
    """(scores, signatures) of detokenized hypotheses against one reference each, unrounded: sacreBLEU `bleu`
    (13a, mixed case) and `chrf`, and with `lowercase_bleu` also `bleu_lowercase` (13a BLEU of lowercased text, to
    compare with published lowercased numbers). The signatures say how each score was computed (Post, 2018)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    hypotheses, references = list(hypotheses), [[reference] for reference in references]
    results = {
        "bleu": _metric("sacrebleu_local").compute(predictions=hypotheses, references=references),
        "chrf": _metric("chrf_local").compute(predictions=hypotheses, references=references),
    }
    if lowercase_bleu:
        results["bleu_lowercase"] = _metric("sacrebleu_local").compute(
            predictions=hypotheses, references=references, lowercase=True
        )
    return (
        {name: result["score"] for name, result in results.items()},
        {name: result["signature"] for name, result in results.items()},
    )


# What TranslationMetrics returns (the Trainer adds the loss): names --metric_for_best_model may choose from.
METRIC_NAMES = ("bleu", "chrf", "exact_match", "gen_len", "sentences")


class TranslationMetrics:
    """`compute_metrics` for one evaluation set: BLEU, chrF, exact match (percentages), mean generated length and the
    number of sentences scored. The sacreBLEU signatures of the last call are kept in `signatures`.

    Args:
        tokenizer: decodes the generated ids (special tokens skipped).
        references: the evaluation set's raw target strings, in dataset order.
        target_tokenizer: decodes instead of `tokenizer` when the target vocabulary is separate.
    """

    def __init__(self, tokenizer, references: Sequence[str], target_tokenizer=None):
        self.tokenizer = target_tokenizer or tokenizer
        self.references = list(references)
        self.signatures: dict[str, str] = {}
        self.last_predictions: list[str] = []

    def decode(self, token_ids) -> list[str]:
        token_ids = np.asarray(token_ids)
        # Generated rows are padded with the pad id, gathered rows of different lengths with -100.
        token_ids = np.where(token_ids < 0, self.tokenizer.pad_token_id, token_ids)
        # as translate() gives them to evaluate.py: a generated line break scores as the space it becomes there
        return [single_line(text) for text in self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)]

    def __call__(self, eval_prediction) -> dict[str, float]:
        predictions = eval_prediction.predictions
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        size = len(self.references)
        if len(predictions) < size:
            raise ValueError(
                f"got {len(predictions)} predictions for an evaluation set of {size} sentences: compute_metrics was "
                "built for another evaluation set"
            )
        hypotheses = self.decode(predictions[:size])  # drop the duplicates that padded the last batches
        self.last_predictions = hypotheses
        scores, self.signatures = corpus_scores(hypotheses, self.references)
        pad = self.tokenizer.pad_token_id
        generated = np.asarray(predictions[:size])
        generated_lengths = (np.where(generated < 0, pad, generated) != pad).sum(-1)
        return {
            "bleu": stored_score(scores["bleu"]),
            "chrf": stored_score(scores["chrf"]),
            "exact_match": stored_score(exact_match(hypotheses, self.references)),
            "gen_len": stored_score(float(np.mean(generated_lengths)) if size else 0.0),
            "sentences": size,
        }


def build_compute_metrics(tokenizer, references: Sequence[str], target_tokenizer=None) -> TranslationMetrics:
    """The `compute_metrics` for an evaluation set whose raw target strings are `references` (its size is theirs)."""
    return TranslationMetrics(tokenizer, references, target_tokenizer=target_tokenizer)


# --------------------------------------------------------------------------------------------------------------------
# A saved model on a test set (scripts/evaluate.py)


@dataclass
class EvaluationSet:
    """Source sentences and their references, with a `name` (for the output folder) and where they came from."""

    name: str
    sources: list[str]
    references: list[str]
    origin: dict[str, str | None]

    def __post_init__(self):
        if not self.sources:
            raise ValueError(f"the test set {self.name} ({self.origin}) has no sentences")


_PATH_KEYS = ("source_file", "reference_file", "data_dir")


def _resolved(path: str | os.PathLike) -> str:
    """A test set's file or corpus folder as results.json records it: absolute, so that an evaluation run from
    another folder is recognised; a dataset name (no such path here) as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def read_test_set_files(source_file: str | os.PathLike, reference_file: str | os.PathLike) -> EvaluationSet:
    """Line-aligned UTF-8 files (`.gz` allowed); named after the source file (`newstest2014.de.gz` ->
    `newstest2014.de`). Raises ValueError when their line counts differ, FileNotFoundError when one is missing."""
    for option, path in (("--source", source_file), ("--reference", reference_file)):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{option} {path} does not exist or is not a file")
    sources, references = list(read_lines(source_file)), list(read_lines(reference_file))
    if len(sources) != len(references):
        raise ValueError(
            f"--source {source_file} has {len(sources)} lines but --reference {reference_file} has "
            f"{len(references)}; line N of the reference must translate line N of the source"
        )
    name = Path(source_file).name.removesuffix(".gz")
    origin = {"source_file": _resolved(source_file), "reference_file": _resolved(reference_file)}
    return EvaluationSet(name, sources, references, origin)


def read_test_set_split(
    data_dir: str | os.PathLike, split: str = "test", source_lang: str | None = None, target_lang: str | None = None
) -> EvaluationSet:
    """One split of `modeling.data.corpus.load_parallel_corpus(data_dir, source_lang, target_lang)`, by its name there
    (train, validation, test) or by its file name (Multi30k's `test_2016_flickr` is the corpus's `test`)."""
    corpus = load_parallel_corpus(data_dir, source_lang, target_lang)
    resolved = split
    files = list(Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []
    if split not in corpus and any(path.name.startswith(f"{split}.") for path in files):
        languages = find_text_pairs(Path(data_dir)).get(split)  # line-aligned files: {lang: path}
        wanted = {source_lang, target_lang} - {None}
        if languages is not None and (len(languages) < 2 or not wanted <= set(languages)):
            raise ValueError(
                f"--split {split!r} in {data_dir} has files for {sorted(languages)} only, not a "
                f"{'-'.join(sorted(wanted)) or 'language'} pair"
            )
        resolved = canonical_split_names([split])[split]  # the name the loader gave that file's split
    if resolved not in corpus:
        raise ValueError(f"--split {split!r} not found in {data_dir}; it has {list(corpus)}")
    pairs = corpus[resolved][:]
    origin = {"data_dir": _resolved(data_dir), "split": resolved, "source_lang": source_lang,
              "target_lang": target_lang}
    return EvaluationSet(split, pairs["source"], pairs["target"], origin)


def default_output_dir(model: str | os.PathLike, test_set_name: str) -> Path:
    """`MODEL/eval-<test set name>/`: the model's own folder, so scores stay with the weights they measure."""
    if not Path(model).is_dir():
        raise ValueError(f"{model} is not a local folder (a Hub id?): give --output_dir")
    return Path(model) / f"eval-{test_set_name}"


def _same_test_set(earlier: dict, origin: dict) -> bool:
    """Whether an earlier results.json's `test_set` may name the same data as `origin`. Unknown counts as the same:
    a language left out (None, inferred by the loader) and a relative path (recorded by an older version, relative
    to a folder no longer known)."""
    if earlier.keys() != origin.keys():
        return False
    for key, value in origin.items():
        before = earlier[key]
        if before is None or value is None or (key in _PATH_KEYS and not Path(str(before)).is_absolute()):
            continue
        if before != value:
            return False
    return True


def check_output_dir(output_dir: str | os.PathLike, test_set: EvaluationSet) -> None:
    """Before anything is translated: raise ValueError unless `output_dir` can take hypotheses.txt and results.json
    without overwriting --source, --reference, or the scores of another test set. An earlier results.json there of
    other data (another file of the same name, another corpus's split of the same name, other languages) is kept:
    its scores cannot be told apart from these by the folder's name."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file; give a folder")
    if output_dir.is_symlink() and not output_dir.exists():
        raise ValueError(f"--output_dir {output_dir} is a link to {os.readlink(output_dir)}, which does not exist")
    if not output_dir.exists():  # made and removed again now, so that a folder that cannot be made is named early
        missing = [folder for folder in [output_dir, *output_dir.absolute().parents] if not folder.exists()]
        existing = missing[-1].parent
        if not existing.is_dir():
            raise ValueError(f"--output_dir {output_dir} cannot be made: {existing} is a file")
        try:
            output_dir.mkdir(parents=True)
        except OSError as error:
            raise ValueError(f"--output_dir {output_dir} cannot be made: {error.strerror or error}") from None
        for folder in missing:  # deepest first
            folder.rmdir()
    for name in (HYPOTHESES_FILE, RESULTS_FILE):
        for option, given in (("--source", test_set.origin.get("source_file")),
                              ("--reference", test_set.origin.get("reference_file"))):
            if given is not None and same_file(output_dir / name, given):
                raise ValueError(f"--output_dir {output_dir}: its {name} would overwrite {option} {given}")
        if output_dir.is_dir():
            check_output_file(output_dir / name, "--output_dir's")
    try:
        earlier = json.loads((output_dir / RESULTS_FILE).read_text(encoding="utf-8"))["test_set"]
    except (OSError, ValueError, TypeError, KeyError):  # none, or not ours: nothing to keep apart
        return
    if isinstance(earlier, dict) and not _same_test_set(earlier, test_set.origin):
        described = ", ".join(f"{key} {value}" for key, value in earlier.items() if value is not None)
        raise ValueError(
            f"{output_dir} holds the scores of another test set named {test_set.name!r} ({described}); "
            "give this one its own --output_dir"
        )


def evaluate_model(
    model: str | os.PathLike,
    test_set: EvaluationSet,
    output_dir: str | os.PathLike,
    *,
    num_beams: int = 4,
    length_penalty: float | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_new_tokens: int | None = None,
    device: str | None = None,
    progress: bool = False,
) -> dict:
    """Translate the test set's sources with the model folder (see `modeling.inference.translation.translate` for the
    options; `length_penalty`, when given, replaces the model's generate() settings' one), score against its references
    (`corpus_scores`, lowercased BLEU included) and write `output_dir/hypotheses.txt` (one line per source line) and
    `output_dir/results.json`. Returns the results: scores, signatures, model, test set, beam size, the length penalty
    given (None: the model's), number of sentences and the seconds spent translating."""
    check_output_dir(output_dir, test_set)
    loaded, tokenizer, target_tokenizer = load_translation_model(model, device=device)
    generate_kwargs = {} if length_penalty is None else {"length_penalty": length_penalty}
    start = time.perf_counter()
    hypotheses = translate(
        test_set.sources, loaded, tokenizer, target_tokenizer, num_beams=num_beams, batch_size=batch_size,
        max_tokens=max_tokens, max_new_tokens=max_new_tokens, progress=progress, **generate_kwargs,
    )
    seconds = time.perf_counter() - start
    scores, signatures = corpus_scores(hypotheses, test_set.references, lowercase_bleu=True)
    perplexity = corpus_perplexity(test_set.sources, test_set.references, loaded, tokenizer, target_tokenizer,
                                   max_tokens=max_tokens or 4096)
    results = {
        "model": str(Path(model).resolve()) if Path(model).exists() else str(model),
        "split": test_set.name,
        "test_set": test_set.origin,
        "sentences": len(test_set.sources),
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "max_new_tokens": max_new_tokens,
        "device": str(loaded.device),
        "seconds": round(seconds, 2),
        **{name: stored_score(score) for name, score in scores.items()},
        "exact_match": stored_score(exact_match(hypotheses, test_set.references)),
        "perplexity": round(perplexity, 4),  # per target token, teacher-forced (`corpus_perplexity`)
        "signatures": signatures,
        "hypotheses": HYPOTHESES_FILE,
    }
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_lines(hypotheses, output_dir / HYPOTHESES_FILE)
    (output_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return results


def summary_line(results: dict) -> str:
    signatures = results["signatures"]
    return (
        f"{results['split']}: BLEU {results['bleu']:.2f} ({signatures['bleu']}) | lowercased BLEU "
        f"{results['bleu_lowercase']:.2f} ({signatures['bleu_lowercase']}) | chrF {results['chrf']:.2f} "
        f"({signatures['chrf']}) | perplexity {results['perplexity']:.2f} | {results['sentences']} sentences, beam "
        f"{results['num_beams']}, "
        f"{results['seconds']:.1f} s"
    )


__all__ = [
    "HYPOTHESES_FILE",
    "METRIC_NAMES",
    "RESULTS_FILE",
    "EvaluationSet",
    "TranslationMetrics",
    "build_compute_metrics",
    "check_output_dir",
    "corpus_scores",
    "default_output_dir",
    "evaluate_model",
    "exact_match",
    "normalize_whitespace",
    "read_test_set_files",
    "read_test_set_split",
    "summary_line",
]
