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

- packed (`--packing`): ours once more, as a third run beside the two in every phase, on packed batches of one
  fixed shape (`modeling.data.packing`: the first `steps` batches of epoch 0 of `PackedBatchSampler` under the same
  token budget, with the attention implementation `--packed_attention`); its figures are set against Marian on its
  padded batches (`packed` in the results). Its warm-up batch is a grid of the same shape: a packed run compiles its
  one graph there.

Figures are medians over runs, and `_best` the fastest run (on a busy machine the least disturbed one): target
tokens/s counts real target tokens (labels that are not padding), FLOP/s is the steps' FLOPs (`TrainingFlops`) over
the same time, and peak_fraction divides it by the measured matmul peak. FLOP/s counts what the model computed,
padding and masked attention included; pair_flops_per_s (and pair_peak_fraction) counts the FLOPs of the same pairs
each alone, without padding: the work any way of batching must do, so it compares padded and packed batches.
A run's target tokens in `RUN_SECONDS` (a recipe's 15 minutes) are projected from its first epoch as measured,
compiling included, then its steady rate.
"""

from __future__ import annotations

import contextlib
import copy
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
from .lengths import PairLengths, batch_lengths, packed_batch_lengths, packed_training_batch, training_batch
from .measure import MemoryWatch, autocast, count_flops, interleaved, sdpa_kernels, timed
from .models import MODEL_NAMES, benchmark_config, build_model, build_models, trainable_parameters
from .profiling import profiled_in_turn
from .report import comparison
from .settings import BenchmarkSettings, configure_torch

# (source, target) lengths of the one-pair batches whose FLOPs fix `TrainingFlops`' coefficients (more than 5 points,
# so an exact fit is a check that the FLOPs really are this polynomial).
_FLOP_FIT_SHAPES = ((2, 3), (3, 2), (4, 4), (5, 3), (3, 6), (6, 5), (7, 2), (4, 7))
PACKED = "ours packed"  # ours on packed batches (--packing), a run beside the two models
RUN_SECONDS = 900  # a recipe's time limit (15 minutes): the run length whose target tokens are projected


def model_of(run: str) -> str:
    """The model a run trains: "ours" for ours on packed batches."""
    return "ours" if run == PACKED else run


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

    def of_pairs(self, source_lengths: list[int], target_lengths: list[int]) -> int:
        """The FLOPs of the pairs each alone, without padding: what any batching of them computes at least."""
        return round(sum(float(np.dot(self.coefficients, self._monomials(source, target)))
                         for source, target in zip(source_lengths, target_lengths)))


def _device_batches(pair_lengths, settings: BenchmarkSettings, device: torch.device, grid: dict | None = None):
    """The batches of the given pairs' lengths on the device: padded, or with a `grid` packed."""
    def batch(index, source, target):
        if grid is not None:
            return packed_training_batch(source, target, grid, settings.vocab_size, settings.seed + index)
        return training_batch(source, target, settings.vocab_size, settings.seed + index, settings.pad_to_multiple_of)

    return [{key: value.to(device) for key, value in batch(index, source, target).items()}
            for index, (source, target) in enumerate(pair_lengths)]


def run_model(run: str, model, settings: BenchmarkSettings):
    """The model as `run` trains it: ours on packed batches with the attention implementation --packed_attention."""
    if run == PACKED:
        model.set_attn_implementation(settings.packed_attention)
    return training_model(model)


def fresh_training_run(spec: dict) -> dict:
    """One model's first pass over the batches, in a fresh process (see `run_in_fresh_process`)."""
    settings = BenchmarkSettings(**spec["settings"])
    configure_torch(settings)
    device = torch.device(settings.device)
    config = benchmark_config(spec["size"], settings.vocab_size, spec["label_smoothing"])
    grid = spec.get("grid")
    model = run_model(spec["run"], build_model(model_of(spec["run"]), config, settings.seed).to(device), settings)
    loss_of = loss_function(model_of(spec["run"]), stepped(model, settings), spec["label_smoothing"])
    optimizer = make_optimizer(model)
    batches = _device_batches(spec["batch_lengths"], settings, device, grid)
    memory = MemoryWatch(device)
    memory.start()
    with compiling(settings):
        # One step on a one-pair batch, a shape no measured batch has: it starts what every run starts once (thread
        # pools, CUDA context and libraries, optimizer state), so the timed steps measure unseen shapes. Packed,
        # it is a grid of the one shape every packed batch has.
        warm_up = _device_batches([([2], [2])], settings, device, grid)[0]
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
    first = loss_function(model_of(spec["run"]), model, spec["label_smoothing"])
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


def skipped_runs(settings: BenchmarkSettings) -> tuple[str, ...]:
    """The runs a compiled measurement leaves out: those --compiled_runs does not name (none without it, or eager)."""
    if not settings.compile or settings.compiled_runs is None:
        return ()
    names = {"ours": "ours", "marian": "marian", **({PACKED: "packed"} if settings.packing else {})}
    return tuple(run for run, name in names.items() if name not in settings.compiled_runs)


def benchmark_training_loss(
    size: str, settings: BenchmarkSettings, lengths: PairLengths, peak_flops_per_s: float, label_smoothing: float
) -> dict:
    """The figures of one loss for every run but those `skipped_runs` leaves out (their figures are None)."""
    device = torch.device(settings.device)
    skipped = skipped_runs(settings)
    config = benchmark_config(size, settings.vocab_size, label_smoothing)
    padded = batch_lengths(lengths, settings.max_tokens, settings.steps, settings.seed, settings.pad_to_multiple_of)
    steps = dict.fromkeys(MODEL_NAMES, padded)  # each run's batches, as (source lengths, target lengths)
    grids = dict.fromkeys(MODEL_NAMES)
    if settings.packing:
        steps[PACKED], grids[PACKED] = packed_batch_lengths(lengths, settings.max_tokens, settings.steps,
                                                            settings.seed, settings.pad_to_multiple_of)
    runs = tuple(steps)
    measured = tuple(run for run in runs if run not in skipped)
    target_tokens = {run: sum(sum(target) for _, target in steps[run]) for run in runs}

    # Compiled, the fresh processes measure the steady passes too: compiling a model once more in this process would
    # double the compile time (on an H200 more than 100 s per model at base), for the same figures.
    steady_when_fresh = settings.compile and settings.fresh_runs > 0 and not settings.profile
    first_runs = {run: [] for run in measured}
    for repetition in range(settings.fresh_runs):
        for run in interleaved(measured, repetition):
            spec = {"run": run, "size": size, "settings": settings.to_dict(), "batch_lengths": steps[run],
                    "grid": grids[run], "label_smoothing": label_smoothing,
                    "steady_passes": settings.repetitions if steady_when_fresh else 0}
            first_runs[run].append(measure.run_in_fresh_process(fresh_training_run, spec))

    models = build_models(config, settings.seed)
    if settings.packing:  # ours again, the same weights, with the packed attention implementation
        models[PACKED] = copy.deepcopy(models["ours"])
    models = {run: run_model(run, model.to(device), settings) for run, model in models.items()}
    losses = {run: loss_function(model_of(run), model, label_smoothing) for run, model in models.items()}
    batches = {run: _device_batches(steps[run], settings, device, grids[run]) for run in runs}
    fits = {name: TrainingFlops.fit(losses[name], models[name], device, settings.dtype, settings.vocab_size)
            for name in MODEL_NAMES}
    flops = {run: sum(map(fits[model_of(run)], batches[run])) for run in runs}
    pair_flops = {run: fits[model_of(run)].of_pairs([s for source, _ in steps[run] for s in source],
                                                    [t for _, target in steps[run] for t in target])
                  for run in runs}
    optimizers = {run: make_optimizer(model) for run, model in models.items()}
    if settings.compile and not steady_when_fresh:  # after the FLOP count, which reads the dispatched operations
        losses = {run: loss_function(model_of(run), stepped(model, settings), label_smoothing)
                  for run, model in models.items()}

    def run_all(run):
        for batch in batches[run]:
            training_step(losses[run], optimizers[run], batch, device, settings.dtype)

    steady_seconds = {run: [seconds for first in first_runs[run] for seconds in first["steady_seconds"]]
                      for run in measured}
    profiled = None
    if not steady_when_fresh:
        with compiling(settings):
            for run in measured:  # the untimed pass: afterwards every shape has been seen
                run_all(run)
            for repetition in range(settings.repetitions):
                for run in interleaved(measured, repetition):
                    steady_seconds[run].append(timed(lambda: run_all(run), device)[0])
            if settings.profile and not skipped:
                profiled = profiled_in_turn(run_all, steady_seconds, device, others=runs[len(MODEL_NAMES):])

    def rates(run, seconds):
        tokens_per_s = statistics.median(target_tokens[run] / s for s in seconds)
        flops_per_s = tokens_per_s * flops[run] / target_tokens[run]
        pair_flops_per_s = tokens_per_s * pair_flops[run] / target_tokens[run]
        return {"target_tokens_per_s": tokens_per_s, "target_tokens_per_s_best": target_tokens[run] / min(seconds),
                "flops_per_s": flops_per_s, "peak_fraction": flops_per_s / peak_flops_per_s,
                "pair_flops_per_s": pair_flops_per_s, "pair_peak_fraction": pair_flops_per_s / peak_flops_per_s,
                "seconds": list(seconds)}

    shapes = {run: [(*batch["input_ids"].shape, batch["labels"].shape[1]) for batch in batches[run]]
              for run in runs}  # (pairs or rows, source, target)
    unseen = {run: [shape not in shapes[run][:step] for step, shape in enumerate(shapes[run])] for run in runs}
    steady = {run: rates(run, seconds) for run, seconds in steady_seconds.items()}
    first_epoch = {}
    for run, fresh in first_runs.items():
        step_seconds = [first["step_seconds"] for first in fresh]
        first_epoch[run] = {**rates(run, [first["seconds"] for first in fresh]),
                            **({"compile_seconds": statistics.median(first["compile_seconds"] for first in fresh),
                                "warm_up_compile_seconds": statistics.median(first["warm_up_compile_seconds"]
                                                                             for first in fresh),
                                "after_compiling": rates(run, [first["seconds"] - first["compile_seconds"]
                                                               for first in fresh])}
                               if settings.compile else {}),
                            "run_target_tokens": run_target_tokens(
                                target_tokens[run], [first["seconds"] + first["warm_up_compile_seconds"]
                                                     for first in fresh], steady[run]["target_tokens_per_s"]),
                            "peak_memory_bytes": max(first["peak_memory_bytes"] for first in fresh),
                            "training_memory_bytes": max(first["training_memory_bytes"] for first in fresh),
                            "step_seconds": step_seconds, **steps_by_shape(step_seconds, unseen[run]),
                            "sdpa_kernels": fresh[0]["sdpa_kernels"]}

    def workload(run):
        padded_source = sum(pairs * source for pairs, source, _ in shapes[run])
        padded_target = sum(pairs * target for pairs, _, target in shapes[run])
        source_tokens = sum(sum(source) for source, _ in steps[run])
        return {
            "steps": len(steps[run]),
            "pairs": sum(len(source) for source, _ in steps[run]),
            "source_tokens": source_tokens,
            "target_tokens": target_tokens[run],
            "padded_source_tokens": padded_source,
            "padded_target_tokens": padded_target,
            "source_padding_fraction": 1 - source_tokens / padded_source if padded_source else 0.0,
            "target_padding_fraction": 1 - target_tokens[run] / padded_target if padded_target else 0.0,
            "padded_shapes": [list(shape) for shape in shapes[run]],
            "unseen_shape_steps": [step for step, new in enumerate(unseen[run]) if new],
            **({"packed_grid": grids[run]} if grids[run] else {}),
        }

    def against_marian(run, figures):
        if run not in figures or "marian" not in figures:  # skipped
            return {"ours": figures.get(run), "marian": figures.get("marian"), "ratio": {}}
        return comparison({"ours": figures[run], "marian": figures["marian"]})

    packed_profile = profiled.pop(PACKED, None) if isinstance(profiled, dict) else None
    return {
        "label_smoothing": label_smoothing,
        "marian_loss": "MarianMTModel's cross-entropy" if label_smoothing == 0 else "transformers' LabelSmoother",
        "workload": workload("ours"),
        "model": comparison({
            name: {"trainable_parameters": models[name].num_parameters(only_trainable=True),
                   "flops_per_step": flops[name] / len(steps[name]),
                   "attention_implementation": models[name].config._attn_implementation}
            for name in MODEL_NAMES
        }),
        "first_epoch": against_marian("ours", first_epoch),
        "steady": against_marian("ours", steady),
        "steady_passes": "after the first epoch, in its fresh process" if steady_when_fresh else
                         "both models in one process, after an untimed pass, alternating",
        **({"profile": profiled} if profiled else {}),
        **({"packed": {
            "attention_implementation": models[PACKED].config._attn_implementation,
            "workload": workload(PACKED),
            "first_epoch": against_marian(PACKED, first_epoch),
            "steady": against_marian(PACKED, steady),
            **({"profile": comparison({"ours": packed_profile, "marian": profiled["marian"]})}
               if packed_profile else {}),
        }} if settings.packing else {}),
    }


def run_target_tokens(first_epoch_tokens: int, first_epoch_seconds: list[float], steady_tokens_per_s: float) -> float:
    """The target tokens a run of `RUN_SECONDS` trains, projected: its first epoch as measured (the median run, its
    warm-up's compiling included), then the steady rate for the rest of the time."""
    seconds = statistics.median(first_epoch_seconds)
    if seconds >= RUN_SECONDS:
        return first_epoch_tokens * RUN_SECONDS / seconds
    return first_epoch_tokens + steady_tokens_per_s * (RUN_SECONDS - seconds)


# The figures the compile section sets side by side, each (name, where in a training result). "workload" paths are
# the batches' own (ours and Marian share theirs; ours packed has its own).
SIDE_BY_SIDE = (
    ("steady target tokens/s", ("steady", "target_tokens_per_s")),
    ("first epoch target tokens/s, compiling left out", ("first_epoch", "after_compiling", "target_tokens_per_s")),
    ("first epoch target tokens/s", ("first_epoch", "target_tokens_per_s")),
    ("target tokens in a 15-minute run, first epoch and compiling included (projected)",
     ("first_epoch", "run_target_tokens")),
    ("compile seconds (first epoch)", ("first_epoch", "compile_seconds")),
    ("compile seconds (the first graph, on the warm-up batch)", ("first_epoch", "warm_up_compile_seconds")),
    ("steady FLOP/s", ("steady", "flops_per_s")),
    ("steady share of the measured peak", ("steady", "peak_fraction")),
    ("steady share of the measured peak, the pairs' own FLOPs", ("steady", "pair_peak_fraction")),
    ("padding share of the target tokens", ("workload", "target_padding_fraction")),
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
    """Each figure of ours and Marian (and ours packed, with --packing), eager and compiled (`runs`: {"eager": ...,
    "compiled": ...}, each a training result), as a ratio to Marian eager (what a Seq2SeqTrainer user gets)."""
    def figure(kind: str, run: str, path: tuple[str, ...]):
        result = runs[kind]["packed"] if run == PACKED else runs[kind]
        if result["steady"][model_of(run)] is None:  # not measured (--compiled_runs)
            return None
        node = result["workload"] if path[0] == "workload" else result[path[0]][model_of(run)]
        for key in path[1:]:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    names = (*MODEL_NAMES, *((PACKED,) if all("packed" in runs[kind] for kind in ("eager", "compiled")) else ()))
    rows = {}
    for label, path in SIDE_BY_SIDE:
        row = {f"{run} {kind}": figure(kind, run, path) for kind in ("eager", "compiled") for run in names}
        reference = row["marian eager"]
        row["ratio to marian eager"] = {
            name: value / reference for name, value in row.items()
            if isinstance(value, (int, float)) and isinstance(reference, (int, float)) and reference
        }
        rows[label] = row
    return rows
