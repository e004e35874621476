"""`run_benchmark`: the environment, the matmul peak, then each chosen section for each size."""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import datasets
import torch
import transformers

from tools.processes import as_typed
from modeling.common.hardware import device_name
from .ctranslate2_speed import benchmark_ctranslate2
from .data_speed import benchmark_data
from .generation_speed import benchmark_generation
from .lengths import corpus_lengths, synthetic_lengths
from .measure import MemoryWatch, matmul_peak
from .settings import BenchmarkSettings, configure_torch, enabled_sdpa_backends
from .training_speed import benchmark_eager_or_compiled, benchmark_training_loss, loss_name, side_by_side

CTRANSLATE2_MISSING = "ctranslate2 is not installed (pip install -e '.[ctranslate2]')"


def _git_commit() -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(settings: BenchmarkSettings) -> dict:
    device = torch.device(settings.device)
    return {
        "device": settings.device,
        "device_name": device_name(device),
        "cpu": device_name(torch.device("cpu")),
        "cpu_count": os.cpu_count(),
        # Other work on the machine disturbs the timings: the 1-minute load average says how busy it was.
        "load_average_at_start": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
        "dtype": settings.dtype,
        "compiled_training": settings.compile,
        "compile_backend": settings.compile_backend if settings.compile or "compile" in settings.sections else None,
        "compile_regions": settings.compile_regions if settings.compile or "compile" in settings.sections else None,
        "sdpa_backends": enabled_sdpa_backends(),  # those SDPA may choose from (see --sdpa_backends)
        "memory_method": MemoryWatch(device).method,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "ctranslate2": _version("ctranslate2"),
        "cuda": torch.version.cuda if settings.device == "cuda" else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "package_version": _version("annotated-transformer-hf"),
        "command": as_typed(["python", *sys.argv]),
    }


def run_benchmark(settings: BenchmarkSettings, train_script: Path | None = None, log=print, save=None) -> dict:
    """Every figure the settings ask for, as one JSON-ready dict; `train_script` (scripts/train.py) is launched for
    the data section's time to the first step. `save(results)` is called after each section and size, so a run
    stopped midway keeps what it measured. A corpus that gives no lengths raises ValueError before any measuring."""
    start = time.perf_counter()
    datasets.disable_progress_bars()
    configure_torch(settings)
    device = torch.device(settings.device)
    results = {"environment": environment(settings), "settings": settings.to_dict()}
    save = save or (lambda results: None)
    log = _with_elapsed_time(log, start)
    if settings.data_dir and Path(settings.data_dir).is_dir():
        log(f"tokenizing {settings.data_dir} for its lengths")
        try:
            lengths = corpus_lengths(settings.data_dir, settings.source_lang, settings.target_lang,
                                     settings.vocab_size, settings.max_length)
        except (ValueError, KeyError, OSError, datasets.exceptions.DatasetsError) as error:
            raise ValueError(f"--data_dir {settings.data_dir}: {error}") from None
    else:
        log(f"{settings.data_dir} not found: synthetic Multi30k-like lengths")
        lengths = synthetic_lengths(seed=settings.seed)
    results["lengths"] = lengths.summary()
    log("measuring the matmul peak")
    results["matmul_peak"] = matmul_peak(device, settings.dtype, settings.peak_matmul_size)
    save(results)
    peak = results["matmul_peak"]["flops_per_s"]
    # Each part (its path below section/size: a loss, or the whole size) is measured, kept or recorded as failed on
    # its own: a failing loss keeps the other's figures; generation records each failing setting itself.
    per_size = {
        "train": lambda size: {
            (loss_name(smoothing),): functools.partial(
                benchmark_training_loss, size, settings, lengths, peak, smoothing
            )
            for smoothing in settings.label_smoothing
        },
        "compile": lambda size: {  # eager first, saved before compiling starts
            (loss_name(smoothing), kind): functools.partial(
                benchmark_eager_or_compiled, kind, size, settings, lengths, peak, smoothing
            )
            for smoothing in settings.label_smoothing for kind in ("eager", "compiled")
        },
        "generate": lambda size: {(): lambda: benchmark_generation(
            size, settings, lengths,
            failed=lambda name, error: _record_failure(results, ("generate", size, name), error, log),
        )},
        "ctranslate2": lambda size: {(): lambda: benchmark_ctranslate2(size, settings, lengths)},
    }
    if "ctranslate2" in settings.sections and importlib.util.find_spec("ctranslate2") is None:
        results["ctranslate2"] = {"skipped": CTRANSLATE2_MISSING}
        log(f"ctranslate2: skipped, {CTRANSLATE2_MISSING}")
        per_size.pop("ctranslate2")
    for section, parts in per_size.items():
        if section in settings.sections:
            results[section] = {}
            for size in settings.sizes:
                for part, benchmark in parts(size).items():
                    log(", ".join((f"{section}: {size}", *part)))
                    _keep_going(results, (section, size, *part), benchmark, log)
                    save(results)
                if section == "compile":  # each loss measured both ways: set them side by side
                    for runs in results[section].get(size, {}).values():
                        if "eager" in runs and "compiled" in runs:
                            runs["side_by_side"] = side_by_side(runs)
                    save(results)
    if "data" in settings.sections:
        log(f"data: {settings.data_pairs:,} pairs")
        _keep_going(results, ("data",), lambda: benchmark_data(settings, train_script), log)
    results["environment"]["load_average_at_end"] = os.getloadavg()[0]
    results["environment"]["benchmark_seconds"] = time.perf_counter() - start
    save(results)
    log("done")
    return results


def _keep_going(results: dict, path: tuple[str, ...], benchmark, log) -> None:
    """results[path] = benchmark(); a failure is recorded under results["errors"] and the other figures still come:
    a full run takes long, and its last section (4.5M pairs of data) can run out of memory."""
    try:
        value = benchmark()
    except Exception as error:  # noqa: BLE001 - reported, then raised as the exit status by the caller
        _record_failure(results, path, error, log)
        return
    node = results
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _record_failure(results: dict, path: tuple[str, ...], error: Exception, log) -> None:
    message = f"{type(error).__name__}: {error}"
    log(f"{'/'.join(path)} failed: {message}")
    results.setdefault("errors", {})["/".join(path)] = message


def _with_elapsed_time(log, start: float):
    return lambda message: log(f"[{time.perf_counter() - start:6.0f} s] {message}")
