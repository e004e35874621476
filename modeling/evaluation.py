"""Translation metrics for `Seq2SeqTrainer(compute_metrics=...)` with `predict_with_generate=True`.

sacreBLEU and chrF are computed by the local `evaluate` modules in `modeling/metrics/` on detokenized text,
against the raw reference strings (not the references decoded back from token ids), plus exact match.

Under multi-process evaluation `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the
duplicate samples that pad the last batches to equal size on every process; the first `len(references)` gathered
rows are the evaluation set in order, so the rest are dropped here and every score covers exactly that set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .metrics import load_metric


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
        self.bleu = load_metric("sacrebleu_local")
        self.chrf = load_metric("chrf_local")
        self.signatures: dict[str, str] = {}
        self.last_predictions: list[str] = []

    def decode(self, token_ids) -> list[str]:
        token_ids = np.asarray(token_ids)
        # Generated rows are padded with the pad id, gathered rows of different lengths with -100.
        token_ids = np.where(token_ids < 0, self.tokenizer.pad_token_id, token_ids)
        return [text.strip() for text in self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)]

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
        bleu = self.bleu.compute(predictions=hypotheses, references=[[r] for r in self.references])
        chrf = self.chrf.compute(predictions=hypotheses, references=[[r] for r in self.references])
        self.signatures = {"bleu": bleu["signature"], "chrf": chrf["signature"]}
        pad = self.tokenizer.pad_token_id
        generated = np.asarray(predictions[:size])
        generated_lengths = (np.where(generated < 0, pad, generated) != pad).sum(-1)
        return {
            "bleu": round(bleu["score"], 4),
            "chrf": round(chrf["score"], 4),
            "exact_match": round(exact_match(hypotheses, self.references), 4),
            "gen_len": round(float(np.mean(generated_lengths)) if size else 0.0, 4),
            "sentences": size,
        }


def build_compute_metrics(tokenizer, references: Sequence[str], target_tokenizer=None) -> TranslationMetrics:
    """The `compute_metrics` for an evaluation set whose raw target strings are `references` (its size is theirs)."""
    return TranslationMetrics(tokenizer, references, target_tokenizer=target_tokenizer)


__all__ = ["TranslationMetrics", "build_compute_metrics", "exact_match", "normalize_whitespace"]
