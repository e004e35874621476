"""Translation metrics as `evaluate` modules that live in this package and load from an absolute local path.

`evaluate.load("sacrebleu")` needs the Hub; `evaluate.load(<absolute directory>)` does not, and a relative path
would be resolved against the current directory, so callers go through `load_metric`.
"""

from pathlib import Path

import evaluate

METRICS_DIR = Path(__file__).resolve().parent
LOCAL_METRICS = ("sacrebleu_local", "chrf_local")


def metric_path(name: str) -> str:
    """Absolute path of a local metric module directory (its script has the directory's name)."""
    if name not in LOCAL_METRICS:
        raise ValueError(f"Unknown local metric {name!r}; choose one of {list(LOCAL_METRICS)}.")
    return str(METRICS_DIR / name)


def load_metric(name: str) -> evaluate.EvaluationModule:
    """Load a local metric; kept in memory so several processes never share its cache files."""
    return evaluate.load(metric_path(name), keep_in_memory=True)


__all__ = ["LOCAL_METRICS", "METRICS_DIR", "load_metric", "metric_path"]
