"""Shared fixtures: the Multi30k corpus (skipped when absent) and a tokenizer trained on it once per session."""

import os
import time
from pathlib import Path
from typing import NamedTuple

import datasets
import pytest

# The test data's Multi30k (docs/data.md, "The tests' data"): $MULTI30K_DIR, else the checkout's data/multi30k (where
# the README's download puts it), else the copy beside the checkout that CI provides. Without it, the tests that need
# it skip, and the run's summary says how many.
_CHECKOUT = Path(__file__).resolve().parents[1]
MULTI30K_DIR = Path(os.environ.get("MULTI30K_DIR") or next(
    (folder for folder in (_CHECKOUT / "data" / "multi30k", _CHECKOUT.parent / "shared" / "data" / "multi30k")
     if (folder / "train.de.gz").is_file()), _CHECKOUT / "data" / "multi30k"))
NO_MULTI30K = "Multi30k not found at"

datasets.disable_progress_bars()


def pytest_configure(config):
    """In each of pytest-xdist's test processes (`-n`), one thread for torch and for the processes tests start: the
    test processes share the cores, and two torch pools on the same cores slow each other down several times."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


class TrainedTokenizer(NamedTuple):
    tokenizer: object
    seconds: float


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and leave the other cores to whatever else runs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    if not (MULTI30K_DIR / "train.de.gz").is_file():
        pytest.skip(f"{NO_MULTI30K} {MULTI30K_DIR} (set MULTI30K_DIR, or download it into data/multi30k)")
    return MULTI30K_DIR


def pytest_terminal_summary(terminalreporter):
    """One line for the tests that skipped for want of Multi30k, so that a run without it says what it did not
    check."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if NO_MULTI30K in str(getattr(report, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: {NO_MULTI30K} {MULTI30K_DIR}; set MULTI30K_DIR to a folder with "
            "Multi30k's files, or download them into data/multi30k (docs/data.md)", yellow=True)


@pytest.fixture(scope="session")
def multi30k_de_en(multi30k_dir):
    from modeling.data.corpus import load_parallel_corpus

    return load_parallel_corpus(multi30k_dir, "de", "en")


@pytest.fixture(scope="session")
def multi30k_tokenizer(multi30k_de_en) -> TrainedTokenizer:
    """The joint de+en tokenizer (8000 tokens) trained on the 29,000 training pairs, and how long training took."""
    from modeling.tokenization import dataset_texts, train_translation_tokenizers

    train = multi30k_de_en["train"]
    start = time.perf_counter()
    tokenizer = train_translation_tokenizers(
        dataset_texts(train, "source"), dataset_texts(train, "target"), vocab_size=8000
    )
    return TrainedTokenizer(tokenizer, time.perf_counter() - start)
