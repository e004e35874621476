"""chrF / chrF++ (Popović, 2015/2017) computed by sacreBLEU, as an `evaluate` metric module loaded from a local path.

Same inputs as the Hub's `chrf` module; returns score, char_order, word_order, beta and the sacreBLEU `signature`.
Load it with an absolute path: `evaluate.load("/abs/path/to/chrf_local")`.
"""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = "Corpus-level chrF (character n-gram F-score; chrF++ with word_order=2) computed by sacreBLEU."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings (detokenized).
    references: list of reference lists (the same number per prediction), or one reference string per prediction.
    char_order: character n-gram order (6).
    word_order: word n-gram order (0 = chrF, 2 = chrF++).
    beta: recall weight (2).
    lowercase: case-insensitive.
    whitespace: include whitespace in character n-grams.
    eps_smoothing: the smoothing of chrF.py / Moses (True) instead of sacreBLEU's default (False).
Returns:
    score, char_order, word_order, beta, signature.
"""

_CITATION = """@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}"""


def reference_streams(references) -> list[list[str]]:
    """sacreBLEU wants one stream per reference position, i.e. the transpose of one list per prediction."""
    references = [[reference] if isinstance(reference, str) else list(reference) for reference in references]
    counts = {len(reference_list) for reference_list in references}
    if len(counts) > 1:
        raise ValueError(f"chrF needs the same number of references for every prediction, got counts {sorted(counts)}.")
    return [list(stream) for stream in zip(*references)]


class ChrfLocal(evaluate.Metric):
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

    def _compute(self, predictions, references, char_order=6, word_order=0, beta=2, lowercase=False,
                 whitespace=False, eps_smoothing=False):
        chrf = sacrebleu.metrics.CHRF(
            char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase,
            whitespace=whitespace, eps_smoothing=eps_smoothing,
        )
        output = chrf.corpus_score(list(predictions), reference_streams(references))
        return {
            "score": output.score,
            "char_order": output.char_order,
            "word_order": output.word_order,
            "beta": output.beta,
            "signature": str(chrf.get_signature()),
        }
