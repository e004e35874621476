"""What the package reads of a `datasets.Dataset` beyond its rows, each in one place: its fingerprint (what its cache
is found by) and its indices mapping (what `select`, `filter` and `shuffle` leave), both private attributes that
`datasets` offers no public equivalent of (`tests/test_data.py` fails naming the attribute should a release rename
one), and the folder of its cache files, where a file computed from its rows is kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def fingerprint(dataset) -> str:
    """The dataset's fingerprint: `datasets` finds a transform's cached result by it, so it keys what is computed from
    the dataset's rows."""
    return dataset._fingerprint  # private: `datasets` keeps it for its own cache and has no public accessor


def indices_mapping(dataset) -> np.ndarray | None:
    """The stored rows the dataset's rows are (row i is stored row `indices[i]` of `dataset.data`), or None when they
    are the stored rows in order (no `select`, `filter` or `shuffle` since it was last written)."""
    indices = dataset._indices  # private: `datasets` has no accessor; `flatten_indices` would write the rows anew
    return None if indices is None else indices.column(0).to_numpy()


def cache_folder(dataset) -> Path | None:
    """The folder of the dataset's cache files (the `datasets` cache, where the tokens' own Arrow files are), in which
    a file computed from its rows is kept beside them; None for a dataset held in memory (no cache file)."""
    if not getattr(dataset, "cache_files", None):
        return None
    return Path(dataset.cache_files[0]["filename"]).parent


__all__ = ["cache_folder", "fingerprint", "indices_mapping"]
