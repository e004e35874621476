"""Training speed: full optimizer steps on token-budget batches, ours against Marian.

A step is what the Trainer does per batch: forward, the loss, backward, `AdamW.step()`, `zero_grad()`. Each
setting of `--label_smoothing` is measured on its own. With 0 both models compute their own loss from `labels`
(plain cross-entropy). Otherwise ours computes its label-smoothed loss (§5.4), and Marian, whose own loss has no
smoothing, is run as the Trainer runs it with `label_smoothing_factor`: forward without `labels`, then
transformers' `LabelSmoother` on the logits (a smoothing spread over all tokens, where ours skips padding: the same
work). Batches are the first `steps` batches of epoch 0 of
`TokenBudgetBatchSampler` over Multi30k-like lengths (see `lengths`), built once as tensors on the device, so
data loading is not in these timings (the data section times it).

- first epoch: each model runs the batches in a fresh process, where no batch shape has been seen before (no
  allocator or kernel cache warmed by the other model), one process per model and run, alternating which
  model goes first. One untimed step on a one-pair batch first starts what any run starts once (threads, CUDA
  libraries, optimizer state). Peak memory is measured there (see `MemoryWatch`), from before that step. With
  `--compile` (both models through `torch.compile`) the timed steps include compiling for the batches' shapes
  (`compile_seconds`), and the warm-up compiles a run's first graph (`warm_up_compile_seconds`).
  Each step's time is kept (`step_seconds`), with the median step whose padded shape comes for the first time in
  the pass against the median of those whose shape came before (`steps_by_shape`): what a new shape costs (the
  workload lists the shapes and the steps that bring a new one).
- steady: both models in this process, after one untimed pass over the same batches (every shape seen), then
  `repetitions` timed passes alternating the order ours/Marian, Marian/ours, so drift hits both. With `--compile`
  (and fresh runs, without `--profile`) the steady passes follow the first epoch in each fresh process instead, on
  the graphs it compiled: compiling each model a second time here would double the compile time for the same figures.
- profile (`--profile`): then one more pass per model under `torch.profiler` (see `profiling`).

Figures are medians over runs, and `_best` the fastest run (on a busy machine the least disturbed one): target
tokens/s counts real target tokens (labels that are not padding), FLOP/s is the steps' FLOPs (`TrainingFlops`) over
the same time, and peak_fraction divides it by the measured matmul peak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch._dynamo
import torch._inductor.config
from transformers.trainer_pt_utils import LabelSmoother

from . import measure
from .lengths import PairLengths, batch_lengths, training_batch
from .measure import MemoryWatch, autocast, count_flops, interleaved, sdpa_kernels, timed
from .models import MODEL_NAMES, benchmark_config, build_model, build_models, trainable_parameters
from .profiling import profiled_in_turn
from .report import comparison
from .settings import BenchmarkSettings, configure_torch

# (source, target) lengths of the one-pair batches whose FLOPs fix `TrainingFlops`' coefficients (more than 5 points,
# so an exact fit is a check that the FLOPs really are this polynomial).
_FLOP_FIT_SHAPES = ((2, 3), (3, 2), (4, 4), (5, 3), (3, 6), (6, 5), (7, 2), (4, 7))


def make_optimizer(model) -> torch.optim.AdamW:
    """The paper's Adam settings (§5.3) in torch's fused AdamW, as the Trainer runs them (transformers 5's default
    `optim` with torch >= 2.8, adamw_torch_fused); the learning rate does not change the speed."""
    return torch.optim.AdamW(trainable_parameters(model), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                             fused=True)


def training_model(model):
    """The model as the Trainer trains it: in training mode, with `config.use_cache = False` (TrainingArguments'
    `use_cache` default), so that a forward without `labels` builds no cache of keys and values either."""
    model.config.use_cache = False
    return model.train()


def stepped(model, settings: BenchmarkSettings):
    """The module a training step calls: `model`, or with `--compile` `torch.compile(model)` (the Trainer's
    --torch_compile; its parameters are the model's), or with `--compile_regions` each layer compiled on its own, as
    accelerate's regional compilation does it. Compile within `compiling`."""
    if not settings.compile:
        return model
    if settings.compile_regions:
        from accelerate.utils import compile_regions

        return compile_regions(model, backend=settings.compile_backend)
    return torch.compile(model, backend=settings.compile_backend)


def compile_seconds() -> float:
    """The seconds this process has spent compiling with torch.compile: dynamo's frames (their Inductor or AOT
    compilation included) and the backward graphs compiled on their first call."""
    from torch._dynamo.utils import compilation_time_metrics

    return sum(sum(compilation_time_metrics.get(key, ())) for key in ("_compile.compile_inner",
                                                                       "backward._backward_impl"))


@contextlib.contextmanager
def compiling(settings: BenchmarkSettings):
    """With `--compile`: no graph of an earlier setting (both models' forwards run through transformers'
    `can_return_tuple` frame, whose graphs count against one recompile limit), room for both models' graphs (a
    static one, then dynamic ones as batch sizes and lengths change) under that limit, and a hit of it an error
    rather than a silent fall back to eager for the shapes after it; no compilation served from Inductor's on-disk
    caches (a later fresh process's first epoch would skip compiling)."""
    if not settings.compile:
        yield
        return
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(recompile_limit=32, fail_on_recompile_limit_hit=True), \
                torch._inductor.config.patch(force_disable_caches=True):
            yield
    finally:
        torch._dynamo.reset()


def loss_function(name: str, model, label_smoothing: float) -> Callable[[dict], torch.Tensor]:
    """batch -> loss as a training step gets it (see the module doc); ours reads its smoothing from its config."""
    if name == "ours" or label_smoothing == 0:
        return lambda batch: model(**batch).loss
    smoother = LabelSmoother(epsilon=label_smoothing)

    def smoothed(batch):
        labels = batch["labels"]
        outputs = model(**{key: value for key, value in batch.items() if key != "labels"})
        with torch.profiler.record_function("LabelSmoother"):  # a context for `profiling` (nothing unprofiled)
            return smoother(outputs, labels)

    return smoothed


def forward_backward(loss_of, batch: dict, device: torch.device, dtype: str) -> None:
    with autocast(device, dtype):
        loss = loss_of(batch)
    loss.backward()


def training_step(loss_of, optimizer, batch: dict, device: torch.device, dtype: str) -> None:
    forward_backward(loss_of, batch, device, dtype)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def loss_name(label_smoothing: float) -> str:
    return "cross_entropy" if label_smoothing == 0 else f"label_smoothing_{label_smoothing:g}"


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of a forward + backward pass (the optimizer step has no matmuls) for any batch shape.

    A batch of n pairs padded to S source and T target positions costs n * (a S + b T + c S^2 + d T^2 + e S T):
    projections, feed-forward networks and the output layer are linear in the positions, self-attention
    quadratic, encoder-decoder attention S * T. The coefficients are fitted to `FlopCounterMode` counts of
    one-pair batches, so every batch of a run is counted exactly without counting each one (slow)."""

    coefficients: tuple[float, ...]

    @staticmethod
    def _monomials(source: int, target: int) -> list[int]:
        return [source, target, source * source, target * target, source * target]

    @classmethod
    def fit(cls, loss_of, model, device: torch.device, dtype: str, vocab_size: int) -> "TrainingFlops":
        rows, counts = [], []
        for source, target in _FLOP_FIT_SHAPES:
            batch = {k: v.to(device) for k, v in training_batch([source], [target], vocab_size, seed=0).items()}
            counts.append(count_flops(lambda: forward_backward(loss_of, batch, device, dtype)))
            rows.append(cls._monomials(source, target))
        model.zero_grad(set_to_none=True)
        rows, counts = np.array(rows, dtype=np.float64), np.array(counts, dtype=np.float64)
        coefficients = np.linalg.lstsq(rows, counts, rcond=None)[0]
        error = np.abs(rows @ coefficients - counts).max() / counts.max()
        if error > 1e-9:
            raise RuntimeError(
                f"the training FLOPs of {type(model).__name__} are not a polynomial a S + b T + c S^2 + d T^2 + e S T "
                f"in the padded lengths (relative fit error {error:.2e}); count each batch with count_flops instead"
            )
        return cls(tuple(float(c) for c in coefficients))

    def __call__(self, batch: dict) -> int:
        pairs, source = batch["input_ids"].shape
        target = batch["labels"].shape[1]
        return round(pairs * float(np.dot(self.coefficients, self._monomials(source, target))))


def _device_batches(pair_lengths, settings: BenchmarkSettings, device: torch.device) -> list[dict]:
    return [
        {key: value.to(device) for key, value in training_batch(
            source, target, settings.vocab_size, settings.seed + index, settings.pad_to_multiple_of
        ).items()}
        for index, (source, target) in enumerate(pair_lengths)
    ]


def fresh_training_run(spec: dict) -> dict:
    """One model's first pass over the batches, in a fresh process (see `run_in_fresh_process`)."""
    settings = BenchmarkSettings(**spec["settings"])
    configure_torch(settings)
    device = torch.device(settings.device)
    config = benchmark_config(spec["size"], settings.vocab_size, spec["label_smoothing"])
    model = training_model(build_model(spec["model"], config, settings.seed).to(device))
    loss_of = loss_function(spec["model"], stepped(model, settings), spec["label_smoothing"])
    optimizer = make_optimizer(model)
    batches = _device_batches(spec["batch_lengths"], settings, device)
    memory = MemoryWatch(device)
    memory.start()
    with compiling(settings):
        # One step on a one-pair batch, a shape no measured batch has: it starts what every run starts once (thread
        # pools, CUDA context and libraries, optimizer state), so the timed steps measure unseen shapes.
        warm_up = _device_batches([([2], [2])], settings, device)[0]
        # The warm-up compiles a run's first graph (a real run, on its first batch), counted apart from the timed
        # steps' graphs
        before_warm_up = compile_seconds()
        training_step(loss_of, optimizer, warm_up, device, settings.dtype)
        after_warm_up = compile_seconds()
        step_seconds = [timed(lambda: training_step(loss_of, optimizer, batch, device, settings.dtype), device)[0]
                        for batch in batches]
        compiled = compile_seconds() - after_warm_up
        steady_seconds = [  # compiled: the steady passes too, on the graphs this process compiled (see the module doc)
            timed(lambda: [training_step(loss_of, optimizer, batch, device, settings.dtype) for batch in batches],
                  device)[0]
            for _ in range(spec.get("steady_passes", 0))
        ]
    peak, training = memory.read()
    # After the timed steps, so that they meet each shape first: SDPA's kernel for each attention call of a training
    # forward on the first batch, eager (a compiled graph runs the kernels chosen when it was traced)
    first = loss_function(spec["model"], model, spec["label_smoothing"])
    with autocast(device, settings.dtype):
        kernels = sdpa_kernels(lambda: first(batches[0]))
    return {"seconds": sum(step_seconds), "step_seconds": step_seconds, "peak_memory_bytes": peak,
            "training_memory_bytes": training, "compile_seconds": compiled,
            "warm_up_compile_seconds": after_warm_up - before_warm_up, "steady_seconds": steady_seconds,
            "sdpa_kernels": kernels}


def steps_by_shape(step_seconds: list[list[float]], unseen: list[bool]) -> dict:
    """The median first-epoch step whose padded shape (pairs, source, target) comes for the first time in the pass,
    against the median of those whose shape came before: what a new shape costs (None where there is none)."""
    def median(new: bool):
        seconds = [step for run in step_seconds for step, first in zip(run, unseen) if first == new]
        return statistics.median(seconds) if seconds else None

    return {"median_step_seconds_unseen_shape": median(True), "median_step_seconds_seen_shape": median(False)}


def benchmark_training_loss(
    size: str, settings: BenchmarkSettings, lengths: PairLengths, peak_flops_per_s: float, label_smoothing: float
) -> dict:
    device = torch.device(settings.device)
    config = benchmark_config(size, settings.vocab_size, label_smoothing)
    steps = batch_lengths(lengths, settings.max_tokens, settings.steps, settings.seed, settings.pad_to_multiple_of)
    target_tokens = sum(sum(target) for _, target in steps)

    # Compiled, the fresh processes measure the steady passes too: compiling a model once more in this process would
    # double the compile time (on an H200 more than 100 s per model at base), for the same figures.
    steady_when_fresh = settings.compile and settings.fresh_runs > 0 and not settings.profile
    first_runs = {name: [] for name in MODEL_NAMES}
    for run in range(settings.fresh_runs):
        for name in interleaved(MODEL_NAMES, run):
            spec = {"model": name, "size": size, "settings": settings.to_dict(), "batch_lengths": steps,
                    "label_smoothing": label_smoothing,
                    "steady_passes": settings.repetitions if steady_when_fresh else 0}
            first_runs[name].append(measure.run_in_fresh_process(fresh_training_run, spec))

    models = {name: training_model(model.to(device)) for name, model in build_models(config, settings.seed).items()}
    losses = {name: loss_function(name, model, label_smoothing) for name, model in models.items()}
    batches = _device_batches(steps, settings, device)
    flops = {
        name: sum(map(TrainingFlops.fit(losses[name], model, device, settings.dtype, settings.vocab_size), batches))
        for name, model in models.items()
    }
    optimizers = {name: make_optimizer(model) for name, model in models.items()}
    if settings.compile and not steady_when_fresh:  # after the FLOP count, which reads the dispatched operations
        losses = {name: loss_function(name, stepped(model, settings), label_smoothing)
                  for name, model in models.items()}

    def run_all(name):
        for batch in batches:
            training_step(losses[name], optimizers[name], batch, device, settings.dtype)

    steady_seconds = {name: [seconds for run in first_runs[name] for seconds in run["steady_seconds"]]
                      for name in MODEL_NAMES}
    profiled = None
    if not steady_when_fresh:
        with compiling(settings):
            for name in MODEL_NAMES:  # the untimed pass: afterwards every shape has been seen
                run_all(name)
            for repetition in range(settings.repetitions):
                for name in interleaved(MODEL_NAMES, repetition):
                    steady_seconds[name].append(timed(lambda: run_all(name), device)[0])
            profiled = profiled_in_turn(run_all, steady_seconds, device) if settings.profile else None

    def rates(name, seconds):
        tokens_per_s = statistics.median(target_tokens / s for s in seconds)
        flops_per_s = tokens_per_s * flops[name] / target_tokens
        return {"target_tokens_per_s": tokens_per_s, "target_tokens_per_s_best": target_tokens / min(seconds),
                "flops_per_s": flops_per_s, "peak_fraction": flops_per_s / peak_flops_per_s, "seconds": list(seconds)}

    shapes = [(*batch["input_ids"].shape, batch["labels"].shape[1]) for batch in batches]  # (pairs, source, target)
    unseen = [shape not in shapes[:step] for step, shape in enumerate(shapes)]
    first_epoch = {}
    for name, runs in first_runs.items():
        step_seconds = [run["step_seconds"] for run in runs]
        first_epoch[name] = {**rates(name, [run["seconds"] for run in runs]),
                             **({"compile_seconds": statistics.median(run["compile_seconds"] for run in runs),
                                 "warm_up_compile_seconds": statistics.median(run["warm_up_compile_seconds"]
                                                                              for run in runs),
                                 "after_compiling": rates(name, [run["seconds"] - run["compile_seconds"]
                                                                 for run in runs])}
                                if settings.compile else {}),
                             "peak_memory_bytes": max(run["peak_memory_bytes"] for run in runs),
                             "training_memory_bytes": max(run["training_memory_bytes"] for run in runs),
                             "step_seconds": step_seconds, **steps_by_shape(step_seconds, unseen),
                             "sdpa_kernels": runs[0]["sdpa_kernels"]}
    return {
        "label_smoothing": label_smoothing,
        "marian_loss": "MarianMTModel's cross-entropy" if label_smoothing == 0 else "transformers' LabelSmoother",
        "workload": {
            "steps": len(steps),
            "pairs": sum(len(source) for source, _ in steps),
            "source_tokens": sum(sum(source) for source, _ in steps),
            "target_tokens": target_tokens,
            "padded_source_tokens": sum(pairs * source for pairs, source, _ in shapes),
            "padded_target_tokens": sum(pairs * target for pairs, _, target in shapes),
            "padded_shapes": [list(shape) for shape in shapes],
            "unseen_shape_steps": [step for step, new in enumerate(unseen) if new],
        },
        "model": comparison({
            name: {"trainable_parameters": model.num_parameters(only_trainable=True),
                   "flops_per_step": flops[name] / len(steps),
                   "attention_implementation": model.config._attn_implementation}
            for name, model in models.items()
        }),
        "first_epoch": comparison(first_epoch),
        "steady": comparison({name: rates(name, seconds) for name, seconds in steady_seconds.items()}),
        "steady_passes": "after the first epoch, in its fresh process" if steady_when_fresh else
                         "both models in one process, after an untimed pass, alternating",
        **({"profile": profiled} if profiled else {}),
    }


# The figures the compile section sets side by side, each (name, where in a training result, lower is better).
SIDE_BY_SIDE = (
    ("steady target tokens/s", ("steady", "target_tokens_per_s")),
    ("first epoch target tokens/s, compiling left out", ("first_epoch", "after_compiling", "target_tokens_per_s")),
    ("first epoch target tokens/s", ("first_epoch", "target_tokens_per_s")),
    ("compile seconds (first epoch)", ("first_epoch", "compile_seconds")),
    ("compile seconds (the first graph, on the warm-up batch)", ("first_epoch", "warm_up_compile_seconds")),
    ("steady FLOP/s", ("steady", "flops_per_s")),
    ("steady share of the measured peak", ("steady", "peak_fraction")),
    ("peak memory bytes", ("first_epoch", "peak_memory_bytes")),
)


def benchmark_eager_or_compiled(
    kind: str, size: str, settings: BenchmarkSettings, lengths: PairLengths, peak_flops_per_s: float,
    label_smoothing: float,
) -> dict:
    """The training section's figures of one loss, eager or (kind "compiled") through torch.compile: the compile
    section measures each kind as a part of its own, so a run stopped while compiling keeps the eager figures."""
    return benchmark_training_loss(size, dataclasses.replace(settings, compile=kind == "compiled"), lengths,
                                   peak_flops_per_s, label_smoothing)


def side_by_side(runs: dict) -> dict:
    """Each figure of ours and Marian, eager and compiled (`runs`: {"eager": ..., "compiled": ...}, each a training
    result), as a ratio to Marian eager (what a Seq2SeqTrainer user gets)."""
    def figure(kind: str, model: str, path: tuple[str, ...]):
        node = runs[kind][path[0]][model]
        for key in path[1:]:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    rows = {}
    for label, path in SIDE_BY_SIDE:
        row = {f"{model} {kind}": figure(kind, model, path) for kind in ("eager", "compiled")
               for model in MODEL_NAMES}
        reference = row["marian eager"]
        row["ratio to marian eager"] = {
            name: value / reference for name, value in row.items()
            if isinstance(value, (int, float)) and isinstance(reference, (int, float)) and reference
        }
        rows[label] = row
    return rows
