"""Translation metrics as `evaluate` modules that live in this package and load from an absolute local path.

`evaluate.load("sacrebleu")` needs the Hub; `evaluate.load(<absolute directory>)` does not, and a relative path
would be resolved against the current directory, so callers go through `load_metric`.
"""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def _import_evaluate_library():
    """`import evaluate`, the library. Running a script in scripts/ puts that folder first on the import path, where
    our command `scripts/evaluate.py` would shadow the library: look for it on the path without such folders."""
    if "evaluate" in sys.modules:
        return sys.modules["evaluate"]
    path = [entry for entry in sys.path if not Path(entry or ".", "evaluate.py").is_file()]
    spec = importlib.machinery.PathFinder.find_spec("evaluate", path)
    if spec is None:
        raise ModuleNotFoundError("the `evaluate` library is not installed: pip install evaluate", name="evaluate")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluate"] = module
    spec.loader.exec_module(module)
    return module


evaluate = _import_evaluate_library()

METRICS_DIR = Path(__file__).resolve().parent
LOCAL_METRICS = ("sacrebleu_local", "chrf_local")


def metric_path(name: str) -> str:
    """Absolute path of a local metric module directory (its script has the directory's name)."""
    if name not in LOCAL_METRICS:
        raise ValueError(f"Unknown local metric {name!r}; choose one of {list(LOCAL_METRICS)}.")
    return str(METRICS_DIR / name)


def load_metric(name: str) -> "evaluate.EvaluationModule":
    """Load a local metric; kept in memory so several processes never share its cache files."""
    return evaluate.load(metric_path(name), keep_in_memory=True)


__all__ = ["LOCAL_METRICS", "METRICS_DIR", "load_metric", "metric_path"]
