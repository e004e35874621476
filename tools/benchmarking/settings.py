"""Every option of the benchmark, its defaults (per device, and for `--quick`), and their checks: one place."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from modeling.common.command_line import check_output_file
from modeling.packed_batches import PACKED_ATTENTION
from .lengths import FIRST_ORDINARY_ID
from .measure import DTYPES
from .models import SIZES

SECTIONS = ("train", "generate", "ctranslate2", "data", "compile")
# "compile" (each model eager and compiled, side by side) is asked for by name: it trains every setting twice.
DEFAULT_SECTIONS = ("train", "generate", "ctranslate2", "data")
DEVICES = ("cpu", "cuda")
CACHES = ("dynamic", "static")  # generate()'s cache: a static one lets it compile the decoding step on a GPU
# SDPA's kernels by the names --sdpa_backends takes, each with its switch in torch (torch.backends.cuda's
# enable_<switch>_sdp, which the CPU's SDPA obeys too)
SDPA_BACKENDS = {"math": "math", "flash": "flash", "efficient": "mem_efficient", "cudnn": "cudnn"}
# The training runs by the names --compiled_runs takes: the two models on padded batches, ours on packed ones
TRAINING_RUNS = ("ours", "marian", "packed")
DEFAULT_DATA_DIR = "data/multi30k"  # from the project root, where docs/data.md puts Multi30k
WMT14_PAIRS = 4_500_000
DEFAULT_OUTPUT_DIR = "outputs/benchmarks"  # git-ignored, from the project root

# A default is taken from the first of: the command line, QUICK_DEFAULTS (with --quick), DEVICE_DEFAULTS, DEFAULTS.
DEFAULTS = dict(
    sections=list(DEFAULT_SECTIONS), repetitions=3, fresh_runs=2, label_smoothing=[0.0, 0.1], num_beams=[1, 4],
    max_new_tokens=32, data_pairs=WMT14_PAIRS, preprocessing_num_workers=None, data_dir=DEFAULT_DATA_DIR,
    source_lang="de", target_lang="en",
    vocab_size=8000, max_length=128, seed=0, compile=False, compile_backend="inductor", compile_regions=False,
    profile=False, sdpa_backends=None, packing=False, packed_attention="sdpa", compiled_runs=None,
)
DEVICE_DEFAULTS = {
    "cpu": dict(
        sizes=["small", "base"], dtype="fp32", max_tokens=2048, steps=10, generate_batch_sizes=[32],
        caches=["dynamic"], pad_to_multiple_of=None, peak_matmul_size=2048,
    ),
    "cuda": dict(
        sizes=["small", "base", "big"], dtype="bf16", max_tokens=32768, steps=50, generate_batch_sizes=[128, 512],
        caches=["dynamic", "static"], pad_to_multiple_of=8, peak_matmul_size=8192,
    ),
}
QUICK_DEFAULTS = dict(sizes=["small"], steps=3, repetitions=2, fresh_runs=1, max_new_tokens=16, data_pairs=20_000)


@dataclass
class BenchmarkSettings:
    sizes: list[str]
    sections: list[str]
    device: str
    dtype: str
    max_tokens: int
    steps: int
    repetitions: int
    fresh_runs: int
    label_smoothing: list[float]
    generate_batch_sizes: list[int]
    num_beams: list[int]
    caches: list[str]
    max_new_tokens: int
    data_pairs: int
    preprocessing_num_workers: int | None
    data_dir: str | None
    source_lang: str
    target_lang: str
    vocab_size: int
    max_length: int
    pad_to_multiple_of: int | None
    peak_matmul_size: int
    threads: int
    seed: int
    compile: bool
    compile_backend: str
    compile_regions: bool
    profile: bool
    sdpa_backends: list[str] | None
    packing: bool
    packed_attention: str
    compiled_runs: list[str] | None
    quick: bool
    output: str

    def __post_init__(self):
        for name, choices, optional in (
            ("sizes", SIZES, False), ("sections", SECTIONS, False), ("caches", CACHES, False),
            ("sdpa_backends", SDPA_BACKENDS, True), ("compiled_runs", TRAINING_RUNS, True),
        ):
            value = getattr(self, name)
            if optional and value is None:
                continue
            if not value or any(item not in choices for item in value):
                raise ValueError(f"{flag(name)} {_shown(value)}: choose one or more of {list(choices)}.")
        if self.device not in DEVICES:
            raise ValueError(f"--device {self.device!r}: choose one of {list(DEVICES)}.")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda, but torch sees no CUDA GPU; use --device cpu.")
        if self.packed_attention not in PACKED_ATTENTION:
            raise ValueError(f"--packed_attention {self.packed_attention!r}: choose one of {list(PACKED_ATTENTION)}.")
        if self.compiled_runs is not None and "packed" in self.compiled_runs and not self.packing:
            raise ValueError("--compiled_runs packed needs --packing (ours on packed batches).")
        if self.packing and self.packed_attention == "flex_attention" and self.device == "cpu":
            raise ValueError("--packed_attention flex_attention trains on CUDA only (FlexAttention has no backward on "
                             "a CPU); on a CPU use sdpa or eager.")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: choose one of {list(DTYPES)}.")
        positive = ("max_tokens", "steps", "repetitions", "fresh_runs", "max_new_tokens", "data_pairs", "vocab_size",
                    "max_length", "peak_matmul_size", "threads")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be at least 1, got {getattr(self, name)}.")
        for name in ("generate_batch_sizes", "num_beams"):
            if not getattr(self, name) or min(getattr(self, name)) < 1:
                raise ValueError(f"{flag(name)} needs one or more positive numbers, got {_shown(getattr(self, name))}.")
        if not self.label_smoothing or not all(0 <= value < 1 for value in self.label_smoothing):
            raise ValueError(
                f"--label_smoothing needs one or more values in [0, 1), got {_shown(self.label_smoothing)}."
            )
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise ValueError(f"--pad_to_multiple_of must be at least 1 (or left out), got {self.pad_to_multiple_of}.")
        if self.preprocessing_num_workers is not None and self.preprocessing_num_workers < 1:
            raise ValueError("--preprocessing_num_workers must be at least 1 (or left out), got "
                             f"{self.preprocessing_num_workers}.")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"--seed must be in [0, 2**32), got {self.seed}.")
        if self.vocab_size <= FIRST_ORDINARY_ID:  # the batches' random tokens are drawn from the ordinary ids
            raise ValueError(
                f"--vocab_size must be above the {FIRST_ORDINARY_ID} special tokens, got {self.vocab_size}."
            )
        check_output(Path(self.output))  # before any measuring: a run's figures must not be lost at the end

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def configure_torch(settings: BenchmarkSettings) -> None:
    """What a measuring process sets in torch: its threads, and with --sdpa_backends SDPA's kernels (those named on,
    the others off; without it torch's own settings stay)."""
    torch.set_num_threads(settings.threads)
    if settings.sdpa_backends is not None:
        for name, switch in SDPA_BACKENDS.items():
            getattr(torch.backends.cuda, f"enable_{switch}_sdp")(name in settings.sdpa_backends)


def enabled_sdpa_backends() -> list[str]:
    """The SDPA kernels torch may choose from now (torch.backends.cuda's switches)."""
    return [name for name, switch in SDPA_BACKENDS.items()
            if getattr(torch.backends.cuda, f"{switch}_sdp_enabled")()]


def check_output(path: Path) -> None:
    """Raise ValueError unless the JSON can be written at `path`: not a folder, and its missing folders (made when
    the results are written) under a folder, not a file, that takes new entries."""
    if path.parent.is_dir():
        check_output_file(path)
        return
    existing = next(parent for parent in path.parents if parent.exists() or parent.is_symlink())
    if not existing.is_dir():
        what = "a link to a missing path" if existing.is_symlink() and not existing.exists() else "a file"
        raise ValueError(f"--output {path}: {existing} is {what}, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--output {path}: the folder {existing} cannot be written")


def flag(name: str) -> str:
    """The command-line flag of the setting `name` (`--only` for sections), for error messages."""
    return next(action.option_strings[0] for action in build_parser()._actions if action.dest == name)


def _shown(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Speed of our Transformer against a transformers MarianMTModel of identical dimensions "
        "(training, generation) and of the data pipeline; prints a table and writes JSON.",
    )
    add = parser.add_argument
    add("--quick", action="store_true",
        help=f"A short run: {', '.join(f'{key} {_shown(value)}' for key, value in QUICK_DEFAULTS.items())} "
             "(under 5 minutes on 2 CPU cores); explicit flags still win.")
    add("--only", dest="sections", nargs="+", metavar="SECTION",
        help=f"Sections to run: {' '.join(SECTIONS)} ({' '.join(DEFAULT_SECTIONS)}); compile trains each model eager "
             "and through torch.compile in one run, side by side: steady and first-epoch speed, compile seconds, "
             "FLOP/s, share of the measured peak, peak memory.")
    add("--sizes", nargs="+", metavar="SIZE",
        help=f"Model sizes: {' '.join(SIZES)} (CPU: small base; GPU: small base big).")
    add("--device", choices=DEVICES, help="cuda when available, else cpu.")
    add("--dtype", choices=list(DTYPES), help="fp32, or bf16 autocast (CPU: fp32; GPU: bf16).")
    add("--max_tokens", type=int, help="Token budget per training batch (CPU: 2048; GPU: 32768).")
    add("--steps", type=int, help="Training steps (batches) per timed pass (CPU: 10; GPU: 50).")
    add("--repetitions", type=int, help="Timed, interleaved passes per model for steady training and generation (3).")
    add("--fresh_runs", type=int, help="Fresh processes per model for first-epoch speed and peak memory (2).")
    add("--label_smoothing", type=float, nargs="+",
        help="Training losses: 0 is plain cross-entropy, each model's own; otherwise ours smooths as configured and "
             "Marian's logits go through the Trainer's LabelSmoother, as label_smoothing_factor does (0 0.1).")
    add("--batch_sizes", dest="generate_batch_sizes", type=int, nargs="+",
        help="Generation batch sizes (CPU: 32; GPU: 128 512).")
    add("--num_beams", type=int, nargs="+", help="Generation beams: 1 is greedy (1 4).")
    add("--caches", nargs="+", metavar="CACHE",
        help=f"generate()'s cache: {' '.join(CACHES)}; with a static cache generate() compiles the decoding step on "
             "a GPU (CPU: dynamic; GPU: dynamic static).")
    add("--max_new_tokens", type=int, help="Tokens generated per source (32).")
    add("--data_pairs", type=int,
        help=f"Pairs in the synthetic corpus of the data section ({WMT14_PAIRS:,}, WMT14's size).")
    add("--preprocessing_num_workers", type=int,
        help="Processes that tokenize the data section's corpus, as train.py's flag (default: this one).")
    add("--data_dir", help=f"Corpus whose training-split lengths shape the batches ({DEFAULT_DATA_DIR}); when the "
                           "folder does not exist, a synthetic Multi30k-like length distribution.")
    add("--source_lang", help="Source language of --data_dir (de).")
    add("--target_lang", help="Target language of --data_dir (en).")
    add("--vocab_size", type=int, help="Model and tokenizer vocabulary (8000).")
    add("--max_length", type=int, help="Pairs longer than this many tokens are filtered out, as in training (128).")
    add("--pad_to_multiple_of", type=int, help="Pad batch lengths to a multiple of this (CPU: none; GPU: 8).")
    add("--peak_matmul_size", type=int, help="n of the n x n matmul that measures the peak (CPU: 2048; GPU: 8192).")
    add("--threads", type=int, help=f"torch threads (this machine's default: {torch.get_num_threads()}).")
    add("--seed", type=int, help="Seed of the lengths, batches and weights (0).")
    add("--compile", action="store_true", default=None,
        help="Train both models through torch.compile (as the Trainer's --torch_compile does); the first epoch then "
             "includes the compilation (off).")
    add("--compile_backend", help="torch.compile's backend for --compile and the compile section (inductor; "
                                  "aot_eager compiles in seconds, for checks).")
    add("--compile_regions", action="store_true", default=None,
        help="With --compile or the compile section: compile each layer on its own and reuse the graph for the layers "
             "of its kind (accelerate's regional compilation, `accelerate launch --dynamo_use_regional_compilation`), "
             "for less compiling (off: the whole model).")
    add("--profile", action="store_true", default=None,
        help="After the steady passes, one more per model under torch.profiler, and after each generation "
             "setting's timed calls one more call: its time by kind of work (matrix products, attention, the loss, "
             "the optimizer, ...) and, on a GPU, the fraction of it kernels ran (off).")
    add("--sdpa_backends", nargs="+", metavar="BACKEND",
        help=f"The kernels both models' SDPA may choose from: {' '.join(SDPA_BACKENDS)} (torch.backends.cuda's "
             "switches; on a GPU flash takes no padding mask: a training step falls back to another or fails where "
             "it is alone; cuDNN's build a plan for each new shape). The training section records the kernel SDPA "
             "chose for each attention call (default: torch's own settings).")
    add("--packing", action="store_true", default=None,
        help="The training and compile sections also train ours on packed batches: whole pairs end to end in rows "
             "of one fixed grid per side under the same --max_tokens (modeling/data/packing.py), set against Marian "
             "on its padded batches (off).")
    add("--packed_attention", choices=list(PACKED_ATTENTION),
        help="Ours' attention on packed batches: dense masks through sdpa or eager, or flex_attention's block masks "
             "(CUDA only) (sdpa).")
    add("--compiled_runs", nargs="+", metavar="RUN",
        help=f"The runs compiled, in the compile section or with --compile: {' '.join(TRAINING_RUNS)} (packed: ours "
             "on packed batches, with --packing); in the compile section the others are measured eager only, with "
             "--compile not at all, for less compiling (every run).")
    add("--output", help="JSON file to write, replaced if it exists; written after each section, so an interrupted "
                         "run keeps what it measured (outputs/benchmarks/results-<device>[-quick]-<UTC time>.json, "
                         "a new file each run).")
    return parser


def settings_from_arguments(arguments: argparse.Namespace) -> BenchmarkSettings:
    """Fill every option the command line left out (see the order above DEFAULTS) and check them all."""
    given = {key: value for key, value in vars(arguments).items() if value is not None}
    quick = given.pop("quick", False)
    device = given.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in DEVICES:
        raise ValueError(f"--device {device!r}: choose one of {list(DEVICES)}.")
    values = {**DEFAULTS, **DEVICE_DEFAULTS[device], **(QUICK_DEFAULTS if quick else {}), **given}
    values.setdefault("threads", torch.get_num_threads())
    if "output" not in values:  # never an earlier run's file (nor a committed one): to the microsecond
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        values["output"] = f"{DEFAULT_OUTPUT_DIR}/results-{device}{'-quick' if quick else ''}-{now}.json"
    return BenchmarkSettings(**{**values, "device": device, "quick": quick})
