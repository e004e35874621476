"""Data pipeline speed: from line-aligned text files to token-budget batches, and from launch to the first step.

A synthetic parallel corpus of N pairs (default 4.5M, WMT14's size) is written as `train.de` / `train.en` into a
temporary folder: pseudo-words drawn from two 30,000-word Zipf lexicons, 12.5 +- 4.5 words per sentence (Multi30k
has 12.4-13.0), target lengths correlated with the source; an 8000-token BPE makes about 21 tokens of a sentence
(Multi30k: about 16), as the pseudo-words split more than real ones. A BPE tokenizer (`train_tokenizer`,
`vocab_size`) is trained on the first 50,000 pairs (not part of the pipeline's time: training uses a given
tokenizer here).

- pipeline: in a fresh process (clean peak RSS), the stages `modeling.training.run.setup_training` runs, each timed:
  load (`load_parallel_corpus` + the tokenizer), prepare (`prepare_pairs`: tokenize once, with
  `--preprocessing_num_workers` processes, then drop empty pairs and pairs over `max_length` tokens), index
  (`cached_token_budget_sampler`: `token_lengths` + `TokenBudgetBatchSampler`, kept in the cache; read back from it
  on the cache), and their seconds per million pairs.
  Memory: the private (anonymous) memory of the process and its workers (`PrivateMemoryWatch`: its peak in each
  stage, what is left after each, and what the batches' index holds per pair), which is what a corpus larger than
  memory must keep small; and, as before, peak RSS (`MemoryWatch`: reset after the imports), which also counts the
  memory-mapped Arrow files' pages as they are read (the kernel drops those as memory runs short). `pipeline` runs on
  an empty `datasets` cache (a folder of the benchmark's own), `pipeline_cached` runs again on the cache the first
  run left (the text read back as Arrow, the tokens found by the map's fingerprint).
- first step: `accelerate launch scripts/train.py` on that corpus with the tokenizer given, the first benchmark size,
  `--max_steps 1 --logging_steps 1`, on the cache the pipeline left (as a run's second launch finds it: the first
  launch on an empty cache spends the pipeline's seconds first); seconds from starting the launcher to its "Model:"
  line (setup done: data, model, Trainer) and to the first logged loss (the first optimizer step done), the training
  process's peak private memory until then, whether it found every tokenized split in the cache (no Arrow file
  added to it) and whether it found the pipeline's batches there (no batches added). The run is stopped there
  (`first_step_cached`).
"""

from __future__ import annotations

import collections
import itertools
import os
import shlex
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import datasets
import numpy as np
import torch

from tools.processes import as_typed
from modeling.data.batch_cache import cached_token_budget_sampler
from modeling.data.corpus import FILTERED_AT_A_TIME, load_parallel_corpus, prepare_pairs
from modeling.tokenization import load_tokenizers, read_lines, train_tokenizer
from . import measure
from .models import SIZES
from .settings import BenchmarkSettings

TOKENIZER_TRAINING_PAIRS = 50_000
_LEXICON_SIZE = 30_000
_CHUNK_PAIRS = 100_000


def _lexicon(rng: np.random.Generator) -> tuple[list[bytes], np.ndarray]:
    """Pseudo-words with a trailing space, the sentence end ".\\n" last, and Zipf probabilities for the words."""
    letters = np.array(list(string.ascii_lowercase))
    word_lengths = np.minimum(1 + rng.geometric(0.22, _LEXICON_SIZE), 14)
    words = [("".join(rng.choice(letters, length)) + " ").encode() for length in word_lengths]
    probabilities = 1.0 / np.arange(1, _LEXICON_SIZE + 1)
    return words + [b".\n"], probabilities / probabilities.sum()


def _sentences(rng, words: list[bytes], probabilities: np.ndarray, lengths: np.ndarray) -> bytes:
    ids = rng.choice(len(probabilities), size=int(lengths.sum() + len(lengths)), p=probabilities)
    ids[np.cumsum(lengths + 1) - 1] = len(words) - 1  # each sentence ends with ".\n"
    return b"".join([words[i] for i in ids.tolist()])


def write_synthetic_corpus(
    directory: str | os.PathLike, num_pairs: int, source_lang: str = "de", target_lang: str = "en", seed: int = 0
) -> dict:
    """Write `train.{source_lang}` and `train.{target_lang}` (see the module doc); returns their size in bytes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 40])
    source_lexicon, target_lexicon = _lexicon(rng), _lexicon(rng)
    paths = directory / f"train.{source_lang}", directory / f"train.{target_lang}"
    with open(paths[0], "wb") as source_file, open(paths[1], "wb") as target_file:
        for start in range(0, num_pairs, _CHUNK_PAIRS):
            count = min(_CHUNK_PAIRS, num_pairs - start)
            source_words = np.clip(np.rint(rng.normal(12.5, 4.5, count)), 1, 60).astype(np.int64)
            target_words = np.clip(np.rint(source_words * rng.normal(1.0, 0.15, count)), 1, 60).astype(np.int64)
            source_file.write(_sentences(rng, *source_lexicon, source_words))
            target_file.write(_sentences(rng, *target_lexicon, target_words))
    return {"pairs": num_pairs, "bytes": sum(path.stat().st_size for path in paths)}


def train_corpus_tokenizer(corpus_dir: Path, output_dir: Path, settings: BenchmarkSettings) -> dict:
    """Train the BPE tokenizer on the corpus's first pairs and save it to `output_dir`."""
    pairs = min(settings.data_pairs, TOKENIZER_TRAINING_PAIRS)
    texts = [
        line for lang in (settings.source_lang, settings.target_lang)
        for line in itertools.islice(read_lines(corpus_dir / f"train.{lang}"), pairs)
    ]
    seconds, tokenizer = measure.timed(lambda: train_tokenizer(texts, vocab_size=settings.vocab_size))
    tokenizer.save_pretrained(output_dir)
    return {"pairs": pairs, "vocab_size": len(tokenizer), "seconds": seconds}


def fresh_data_pipeline_run(spec: dict) -> dict:
    """The data stages of the training pipeline on the corpus, timed, in a fresh process (see the module doc)."""
    datasets.disable_progress_bars()
    datasets.config.HF_DATASETS_CACHE = Path(spec["cache_dir"])  # the benchmark's own cache, not the user's
    memory = measure.MemoryWatch(torch.device("cpu"))
    memory.start()  # after the imports: this module's imports are the pipeline's
    private = measure.PrivateMemoryWatch().start()
    stages, peaks, private_peaks, private_after = {}, {}, {}, {}

    def stage(name, function):
        private.mark()
        stages[name], result = measure.timed(function)
        peaks[name] = measure.peak_rss_bytes()
        private_peaks[name], private_after[name] = private.stage_peak(), private.sample()
        return result

    corpus, tokenizer = stage("load", lambda: (
        load_parallel_corpus(spec["corpus_dir"], spec["source_lang"], spec["target_lang"]),
        load_tokenizers(spec["tokenizer_dir"]),
    ))
    _, tokenized, report = stage("prepare", lambda: prepare_pairs(
        corpus, tokenizer, max_length=spec["max_length"], num_proc=spec.get("num_proc")))
    sampler = stage("index", lambda: cached_token_budget_sampler(  # as a training launch builds or reads them
        tokenized["train"], spec["max_tokens"], pad_to_multiple_of=spec["pad_to_multiple_of"], seed=spec["seed"]))
    index_bytes = sum(array.nbytes for array in (
        sampler.padded_source_lengths, sampler.padded_target_lengths, sampler.batches.indices, sampler.batches.starts,
        sampler.batches.ends))
    peak, delta = memory.read()
    pairs, kept = report["train"]["total"], report["train"]["kept"]
    return {
        "stage_seconds": stages,
        "seconds_per_million_pairs": {name: seconds / pairs * 1e6 for name, seconds in stages.items()},
        "peak_rss_bytes_after_stage": peaks,
        "seconds": sum(stages.values()),
        "pairs_per_s": pairs / sum(stages.values()),
        "kept_pairs": kept,
        "batches": len(sampler),
        "peak_rss_bytes": peak,
        "rss_delta_bytes": delta,
        "private_bytes_at_start": private.start_bytes,
        "stage_peak_private_bytes": private_peaks,
        "private_bytes_after_stage": private_after,
        "peak_private_bytes": private.stop(),
        "index_bytes": index_bytes,
        "index_bytes_per_pair": index_bytes / kept,
        "num_proc": spec.get("num_proc"),
        "filtered_at_a_time": FILTERED_AT_A_TIME,  # absent from results of the earlier whole-corpus filters
    }


def train_command(
    train_script: Path, corpus_dir: Path, tokenizer_dir: Path, output_dir: Path, settings: BenchmarkSettings
) -> list[str]:
    """`accelerate launch scripts/train.py ...` for one optimizer step on the corpus, with the first benchmark size."""
    preset, dimensions = SIZES[settings.sizes[0]]
    model_flags = {  # scripts/train.py's names for the size's dimensions
        "d_model": dimensions.get("d_model"),
        "encoder_layers": dimensions.get("encoder_layers"),
        "decoder_layers": dimensions.get("decoder_layers"),
        "attention_heads": dimensions.get("encoder_attention_heads"),
        "ffn_dim": dimensions.get("encoder_ffn_dim"),
        "pad_to_multiple_of": settings.pad_to_multiple_of,
    }
    flags = [(f"--{flag}", value) for flag, value in model_flags.items() if value is not None]
    launcher = [
        sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--num_processes", "1",
        "--dynamo_backend", "no", "--mixed_precision", "bf16" if settings.dtype == "bf16" else "no",
        *(["--cpu"] if settings.device == "cpu" else []),
    ]
    arguments = [
        "--data_dir", corpus_dir, "--source_lang", settings.source_lang, "--target_lang", settings.target_lang,
        "--tokenizer_name_or_path", tokenizer_dir, "--max_length", settings.max_length, "--preset", preset,
        *itertools.chain.from_iterable(flags),
        *(["--preprocessing_num_workers", settings.preprocessing_num_workers]
          if settings.preprocessing_num_workers else []),
        "--max_tokens", settings.max_tokens, "--max_steps", 1, "--logging_steps", 1, "--warmup_steps", 1,
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
        "--seed", settings.seed, "--output_dir", output_dir,
    ]
    return [*launcher, str(train_script), *map(str, arguments)]


BENCHMARK_DIR = "$BENCHMARK_DIR"  # how a recorded command names the benchmark's own temporary folder
BENCHMARK_DIR_MEANS = ("the data benchmark's own temporary folder (its corpus, tokenizer, datasets cache and run), "
                       "made for the run and removed after it")


def time_to_first_step(command: list[str], timeout: float = 3600, environment: dict | None = None,
                       folder: Path | None = None) -> dict:
    """Run `command` (see `train_command`) until it logs its first loss; seconds to "Model:" and to that line.
    `environment`: variables to add (the `datasets` cache folder); `folder`: the benchmark's temporary folder, which
    the recorded command names BENCHMARK_DIR."""
    environment = {
        **os.environ, **(environment or {}), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
    }
    start = time.perf_counter()
    # A session of its own, so that stopping it stops the training process the launcher started too.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                               start_new_session=True)
    watchdog = threading.Timer(timeout, _stop_process_group, (process,))
    watchdog.start()
    private = measure.PrivateMemoryWatch(process.pid, only="train.py").start()  # the training process, not the launcher
    setup = first_step = None
    tail = collections.deque(maxlen=40)
    try:
        for line in process.stdout:
            tail.append(line)
            if setup is None and line.startswith("Model:"):
                setup = time.perf_counter() - start
            if "'loss'" in line:
                first_step = time.perf_counter() - start
                break
    finally:
        watchdog.cancel()
        peak_private = private.stop()
        _stop_process_group(process)  # the run has shown what is measured; its saving is not
    if first_step is None:
        raise RuntimeError(
            f"the training run logged no loss (exit code {process.returncode}); command:\n{shlex.join(command)}\n"
            f"last output:\n{''.join(tail)}"
        )
    named = {folder: BENCHMARK_DIR} if folder is not None else {}
    return {"setup_seconds": setup, "first_step_seconds": first_step, "peak_private_bytes": peak_private,
            "command": as_typed(command, named), **({"benchmark_dir": BENCHMARK_DIR_MEANS} if named else {})}


def _stop_process_group(process: subprocess.Popen) -> None:
    """Kill the launcher and every process it started (its process group), and wait until they are gone."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    for _ in range(200):  # the launcher's children are reaped by init: wait until none is left (at most 10 s)
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def benchmark_data(settings: BenchmarkSettings, train_script: Path | None) -> dict:
    """The data section (see the module doc); without `train_script` the launch is left out (None)."""
    with tempfile.TemporaryDirectory(prefix="benchmark-data-") as temporary:
        temporary = Path(temporary)
        corpus_dir, tokenizer_dir = temporary / "corpus", temporary / "tokenizer"
        corpus = write_synthetic_corpus(corpus_dir, settings.data_pairs, settings.source_lang, settings.target_lang,
                                        settings.seed)
        tokenizer = train_corpus_tokenizer(corpus_dir, tokenizer_dir, settings)
        spec = {
            "corpus_dir": str(corpus_dir), "tokenizer_dir": str(tokenizer_dir), "source_lang": settings.source_lang,
            "target_lang": settings.target_lang, "max_length": settings.max_length,
            "max_tokens": settings.max_tokens, "pad_to_multiple_of": settings.pad_to_multiple_of, "seed": settings.seed,
        }
        spec["num_proc"] = settings.preprocessing_num_workers
        spec["cache_dir"] = str(temporary / "cache")
        pipeline = measure.run_in_fresh_process(fresh_data_pipeline_run, spec)
        pipeline_cached = measure.run_in_fresh_process(fresh_data_pipeline_run, spec)
        first_step_cached = None
        if train_script is not None:
            cache_files, batch_files = _arrow_files(spec["cache_dir"]), _batch_files(spec["cache_dir"])
            first_step_cached = time_to_first_step(
                train_command(train_script, corpus_dir, tokenizer_dir, temporary / "run", settings),
                environment={"HF_DATASETS_CACHE": spec["cache_dir"]}, folder=temporary,
            )
            first_step_cached["found_in_cache"] = _arrow_files(spec["cache_dir"]) == cache_files
            first_step_cached["found_batches_in_cache"] = _batch_files(spec["cache_dir"]) == batch_files
    return {
        "corpus": corpus, "tokenizer": tokenizer, "pipeline": pipeline, "pipeline_cached": pipeline_cached,
        "first_step_cached": first_step_cached,
    }


def _arrow_files(folder: str) -> set[Path]:
    return set(Path(folder).rglob("*.arrow"))


def _batch_files(folder: str) -> set[Path]:
    """The token-budget batches kept in the cache (`modeling.data.batch_cache`): one manifest per settings."""
    return set(Path(folder).rglob("batches-*.json"))
