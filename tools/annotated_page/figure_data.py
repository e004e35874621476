"""What each picture of the walk plots, saved beside its PNG as JSON, so that a stale picture is found without
comparing pixels (which differ between matplotlib versions and fonts).

The JSON also records the SHA-256 of the PNG written with it (`png_sha256`), so that `check_figures` finds a picture
that is not the one drawn from its data (replaced, or drawn again without its data) as well as stale data.

`figure_data(figure)` reads a matplotlib figure's artists: per axes its titles and labels, fixed tick labels, lines,
images, patches (bars, rectangles), collections (scatter points, colour bars), texts and legend. Numbers are kept to
4 significant digits; an array of more than `FULL` values is kept as its shape, `SAMPLES` evenly spaced values and
its mean, standard deviation, minimum and maximum. `differences(expected, actual)` compares two such records: text
and shapes exactly, numbers each within a tolerance, or, for the pictures of trained models, on average over the
picture (see TRAINED_MEAN).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from modeling.learning.figures import DPI, FIGURES, TRAINED

from .page import same_printout

FULL, SAMPLES = 1024, 256
TOLERANCE = (1e-3, 1e-3)  # each number's (relative, absolute as a share of its array's range): last-digit noise
# A trained model's weights differ in the last digits from one CPU's kernels (and thread count) to another's, and its
# training carries that into every number the picture plots: measured on the copy task's attention, two kernel sets
# differ by 0.013 to 0.020 on average, by up to 0.05 over one head's map, and one query in six attends most to another
# key; two seeds differ by 0.08 and an untrained model by 0.10. So a trained picture's numbers are compared on
# average: the mean absolute difference over all its arrays, as a share of their largest magnitude, at most this.
TRAINED_MEAN = 0.04
TRAINED_TEXT = 0.05  # the relative tolerance of a number in a trained picture's text (the copy task's accuracy)


def _round(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) else float(f"{value:.4g}")


def _array(values) -> dict:
    """A plotted array: its values, or a summary when it is long."""
    array = np.ma.filled(np.ma.asarray(values, dtype=np.float64), np.nan)
    flat = array.ravel()
    if flat.size <= FULL:
        return {"shape": list(array.shape), "values": [_round(value) for value in flat]}
    finite = flat[np.isfinite(flat)]
    picked = flat[np.linspace(0, flat.size - 1, SAMPLES).round().astype(int)]
    return {"shape": list(array.shape), "samples": [_round(value) for value in picked],
            "summary": [_round(value) for value in (finite.mean(), finite.std(), finite.min(), finite.max())]}


def _fixed_ticks(axis) -> list[str]:
    """The labels of ticks the figure places itself (automatic ones depend on the matplotlib version, so they are
    left out)."""
    from matplotlib.ticker import FixedLocator

    if not isinstance(axis.get_major_locator(), FixedLocator):
        return []
    return [label.get_text() for label in axis.get_ticklabels()]


def _patch(patch) -> dict:
    from matplotlib.patches import Rectangle

    if isinstance(patch, Rectangle):
        return {"rectangle": _array([*patch.get_xy(), patch.get_width(), patch.get_height()])}
    return {"patch": type(patch).__name__}


def _collection(collection) -> dict:
    data = {"type": type(collection).__name__, "offsets": _array(collection.get_offsets())}
    if collection.get_array() is not None:
        data["array"] = _array(collection.get_array())
    return data


def figure_data(figure) -> dict:
    """What `figure` plots, as JSON-ready data."""
    axes_data = []
    for axes in figure.get_axes():
        legend = axes.get_legend()
        axes_data.append({
            "title": axes.get_title(), "xlabel": axes.get_xlabel(), "ylabel": axes.get_ylabel(),
            "scales": [axes.get_xscale(), axes.get_yscale()],
            "xticks": _fixed_ticks(axes.xaxis), "yticks": _fixed_ticks(axes.yaxis),
            "lines": [{"label": line.get_label(), "x": _array(line.get_xdata()), "y": _array(line.get_ydata())}
                      for line in axes.get_lines()],
            "images": [_array(image.get_array()) for image in axes.get_images()],
            "patches": [_patch(patch) for patch in axes.patches],
            "collections": [_collection(collection) for collection in axes.collections],
            "texts": [text.get_text() for text in axes.texts],
            "legend": [text.get_text() for text in legend.get_texts()] if legend is not None else [],
        })
    suptitle = figure._suptitle.get_text() if figure._suptitle is not None else ""  # get_suptitle: matplotlib 3.8+
    return {"suptitle": suptitle, "axes": axes_data}


def to_json(data: dict) -> str:
    """`data` as indented JSON, each list of numbers on one line."""
    text = json.dumps(data, indent=1, ensure_ascii=False)
    return re.sub(r"\[[^\[\]{}\"]*\]", lambda match: "[" + " ".join(match.group(0)[1:-1].split()) + "]", text) + "\n"


def differences(expected, actual, path: str = "", trained: bool = False) -> list[str]:
    """Where `actual` differs from `expected` (two `figure_data` records), each as `path: what`; with `trained`, the
    numbers are compared on average over the whole record (TRAINED_MEAN), the rest as always."""
    numbers = [] if trained else None
    found = _differences(expected, actual, path, numbers)
    if found or not numbers:
        return found
    old, new = (np.concatenate([pair[side] for pair in numbers]) for side in (0, 1))
    if not np.array_equal(np.isnan(old), np.isnan(new)):
        index = int(np.flatnonzero(np.isnan(old) != np.isnan(new))[0])
        return [f"{path}: its plotted number {index} was {old[index]:.4g} and became {new[index]:.4g}"]
    finite = ~np.isnan(old)
    scale = max(np.abs(old[finite]).max(initial=0.0), 1e-12)
    mean = np.abs(new[finite] - old[finite]).mean() / scale if finite.any() else 0.0
    if mean > TRAINED_MEAN:
        return [f"{path}: its plotted numbers differ by {mean:.3f} of their largest magnitude on average (a trained "
                f"model's, at most {TRAINED_MEAN})"]
    return []


def _differences(expected, actual, path: str, numbers: list | None) -> list[str]:
    """`differences`, with each pair of numeric arrays appended to `numbers` instead of compared, unless it is None."""
    if isinstance(expected, dict) and "shape" in expected and isinstance(actual, dict) and "shape" in actual:
        return _array_differences(expected, actual, path, numbers)
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return [f"{path}: keys {sorted(expected)} became {sorted(actual)}"]
        return [found for key in expected for found in _differences(expected[key], actual[key], f"{path}.{key}",
                                                                    numbers)]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items became {len(actual)}"]
        return [found for index, (a, b) in enumerate(zip(expected, actual))
                for found in _differences(a, b, f"{path}[{index}]", numbers)]
    if isinstance(expected, str) and isinstance(actual, str):
        return [] if same_printout(expected, actual, rel_tol=TOLERANCE[0] if numbers is None else TRAINED_TEXT) else [
            f"{path}: {expected!r} became {actual!r}"]
    return [] if expected == actual else [f"{path}: {expected!r} became {actual!r}"]


def _array_differences(expected: dict, actual: dict, path: str, numbers: list | None) -> list[str]:
    if expected["shape"] != actual["shape"] or set(expected) != set(actual):
        return [f"{path}: an array of shape {expected['shape']} became one of shape {actual['shape']}"]
    relative, absolute = TOLERANCE
    for key in ("values", "samples", "summary"):
        if key not in expected:
            continue
        old = np.array([np.nan if value is None else value for value in expected[key]], dtype=np.float64)
        new = np.array([np.nan if value is None else value for value in actual[key]], dtype=np.float64)
        if numbers is not None:
            numbers.append((old, new))
            continue
        scale = np.nanmax(np.abs(old[np.isfinite(old)]), initial=0.0)
        close = np.isclose(new, old, rtol=relative, atol=absolute * max(scale, 1e-12), equal_nan=True)
        if not close.all():
            index = int(np.flatnonzero(~close)[0])
            return [f"{path}.{key}[{index}]: {old[index]:.4g} became {new[index]:.4g}"]
    return []


def data_path(folder: str | Path, name: str) -> Path:
    return Path(folder) / f"{name}.json"


def write_figures(output_dir: str | Path, names: Sequence[str] | None = None, dpi: int = DPI) -> list[Path]:
    """Draw each of `names` (default: every figure) once, writing `<name>.png` and what it plots, `<name>.json`,
    into `output_dir`; return the PNG paths."""
    names = list(FIGURES) if names is None else list(names)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    paths = []
    with torch.random.fork_rng():  # figures that train leave the caller's random state as it was
        for name in names:
            figure = FIGURES[name]()
            paths.append(Path(output_dir) / f"{name}.png")
            figure.savefig(paths[-1], dpi=dpi)
            data = {**figure_data(figure), DIGEST: png_digest(paths[-1])}
            data_path(output_dir, name).write_text(to_json(data), encoding="utf-8")
    return paths


DIGEST = "png_sha256"  # the key of the PNG's digest in its data


def png_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_figures(folder: str | Path, names: Sequence[str] | None = None) -> list[str]:
    """Each of `names` (default: every figure) whose PNG or data is missing from `folder`, or whose data is not what
    the figure plots now; [] when every one is current."""
    problems = []
    with torch.random.fork_rng():
        for name in list(FIGURES) if names is None else names:
            png, data = Path(folder) / f"{name}.png", data_path(folder, name)
            if not png.is_file() or not data.is_file():
                missing = " and ".join(path.name for path in (png, data) if not path.is_file())
                problems.append(f"{folder}/{missing} missing: run `python scripts/make_figures.py --only {name}`")
                continue
            recorded = json.loads(data.read_text(encoding="utf-8"))
            digest = recorded.pop(DIGEST, None)
            if digest != png_digest(png):
                why = "its data records no digest of it" if digest is None else "its digest is not the one its data records"
                problems.append(f"{png} is not the picture drawn with {data.name} ({why}): run "
                                f"`python scripts/make_figures.py --only {name}`")
                continue
            found = differences(recorded, figure_data(FIGURES[name]()), name, trained=name in TRAINED)
            if found:
                more = f", and {len(found) - 1} more" if len(found) > 1 else ""
                problems.append(f"{png} is stale ({found[0]}{more}): run `python scripts/make_figures.py --only {name}`")
    return problems


__all__ = ["DIGEST", "check_figures", "data_path", "differences", "figure_data", "png_digest", "to_json",
           "write_figures"]
