"""sacreBLEU as an `evaluate` metric module loaded from a local path (the Hub's `sacrebleu` module needs the network).

Same inputs and outputs as the Hub module (score, counts, totals, precisions, bp, sys_len, ref_len), plus the
sacreBLEU `signature` that a reported score must carry (Post, 2018). Load it with an absolute path:
`evaluate.load("/abs/path/to/sacrebleu_local")`.
"""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = "Corpus-level BLEU computed by sacreBLEU on detokenized text, with its reproducibility signature."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings (detokenized).
    references: list of reference lists (one list of strings per prediction, all of the same length),
        or one reference string per prediction.
    smooth_method: 'exp' (default), 'floor', 'add-k' or 'none'.
    smooth_value: the value for 'floor' and 'add-k'.
    tokenize: sacreBLEU tokenizer ('13a' by default, 'intl', 'zh', 'char', 'none', ...).
    lowercase: case-insensitive BLEU.
    force: allow already-tokenized input without a warning.
    use_effective_order: ignore n-gram orders with no match (for sentence-level BLEU).
Returns:
    score, counts, totals, precisions, bp, sys_len, ref_len, signature.
"""

_CITATION = """@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}"""


def reference_streams(references) -> list[list[str]]:
    """sacreBLEU wants one stream per reference position, i.e. the transpose of one list per prediction."""
    references = [[reference] if isinstance(reference, str) else list(reference) for reference in references]
    counts = {len(reference_list) for reference_list in references}
    if len(counts) > 1:
        raise ValueError(
            f"sacreBLEU needs the same number of references for every prediction, got counts {sorted(counts)}."
        )
    return [list(stream) for stream in zip(*references)]


class SacrebleuLocal(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            homepage="https://github.com/mjpost/sacrebleu",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references, smooth_method="exp", smooth_value=None, force=False,
                 lowercase=False, tokenize=None, use_effective_order=False):
        bleu = sacrebleu.metrics.BLEU(
            lowercase=lowercase, force=force, tokenize=tokenize, smooth_method=smooth_method,
            smooth_value=smooth_value, effective_order=use_effective_order,
        )
        output = bleu.corpus_score(list(predictions), reference_streams(references))
        return {
            "score": output.score,
            "counts": output.counts,
            "totals": output.totals,
            "precisions": output.precisions,
            "bp": output.bp,
            "sys_len": output.sys_len,
            "ref_len": output.ref_len,
            "signature": str(bleu.get_signature()),
        }
