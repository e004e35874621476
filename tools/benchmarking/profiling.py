"""Where the time goes: one training pass, or one `generate()` call of each generation setting, under
`torch.profiler`, its time by kind of work (`--profile`).

The profiled run is an extra one, after the timed ones, so the profiler's overhead is in no other figure. On a GPU
the times are the kernels' device times, each kernel counted once under the operator that launched it, and
`busy_fraction` divides their sum by the median unprofiled run's time (a steady training pass, a timed `generate()`
call): well under 1, the GPU waits on the host (kernel launches, Python, synchronisations) and faster kernels would
not help; near 1, the kinds say which kernels to make faster. On a CPU they are the operators' self times on the
calling thread (their sum is close to the wall time).

A time's kind is its context's where an enclosing operator names one (`CONTEXTS`: the optimizer's step, a loss, so
that their elementwise work counts there), else its own name's (`KINDS`: kernel names on a GPU, aten operator names
on a CPU). The backward of Marian's `LabelSmoother` (negation, gather, sums) has no such context and counts as
elementwise work. In `generate()` the "loss" is beam search's log-softmax of each step's scores.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from .measure import timed
from .models import MODEL_NAMES
from .report import comparison

LOSS = "loss"
OTHER = "elementwise and other"
# (kind, fragments of an enclosing operator's lowercased name); the nearest enclosing match wins. "labelsmoother" is
# the range `training_speed` opens around Marian's LabelSmoother.
CONTEXTS = (
    ("optimizer", ("optimizer.step", "optimizer.zero_grad")),
    (LOSS, ("labelsmoothedcrossentropy", "labelsmoother", "cross_entropy_loss", "nll_loss", "nlllossbackward",
            "log_softmax", "logsoftmaxbackward")),
)
# (kind, fragments of a kernel's or an operator's own lowercased name), first match wins: cuBLAS/CUTLASS "gemm" and
# "nvjet", flash attention "flash"/"fmha" on a GPU; "aten::mm" on a CPU.
KINDS = (
    (OTHER, ("masked_fill",)),
    ("optimizer", ("multi_tensor", "adam", "_foreach")),
    # softmax outside a loss's context: eager attention's (and SDPA's math fallback's)
    ("attention", ("flash", "fmha", "attention", "attn", "scaled_dot_product", "softmax")),
    ("matrix products", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "aten::mm", "aten::addmm", "aten::bmm",
                         "aten::baddbmm", "aten::matmul", "aten::linear")),
    (LOSS, ("nll", "cross_entropy", "logsumexp")),
    ("layer norm", ("layer_norm", "layernorm", "gammabeta", "rowwisemoments", "computeinternalgradients")),
    # ours draws its CPU mask with random_ (modeling/dropout.py); a GPU's dropout backward is masked_scale
    ("dropout", ("dropout", "bernoulli", "random_", "masked_scale")),
    ("copies and fills", ("memcpy", "memset", "copy", "fill_", "fillfunctor", "aten::cat", "catarray",
                          "contiguous", "clone", "zero_")),
)
TOP_OPERATORS = 12


def _first_match(name: str, table) -> str | None:
    lowered = name.lower()
    return next((kind for kind, fragments in table if any(fragment in lowered for fragment in fragments)), None)


def kind_of(name: str) -> str:
    """The kind of a kernel or operator by its own name."""
    return _first_match(name, KINDS) or OTHER


def context_of(event) -> str | None:
    """The kind named by `event` or the nearest operator enclosing it (`CONTEXTS`), if any."""
    while event is not None:
        kind = _first_match(event.name, CONTEXTS)
        if kind is not None:
            return kind
        event = event.cpu_parent
    return None


def timings_by_kind(events, on_gpu: bool) -> tuple[dict[str, float], list[dict]]:
    """({kind: seconds}, the TOP_OPERATORS heaviest kernels or operators) from a profile's `events()`: on a GPU every
    kernel under the CPU operator that launched it, on a CPU every operator's self time."""
    kinds: dict[str, float] = {}
    by_name: dict[tuple[str, str], list] = {}  # (name, kind) -> [calls, seconds]
    for event in events:
        if event.device_type != DeviceType.CPU or event.is_async or (on_gpu and event.name.startswith("cu")):
            continue  # CUDA runtime calls (cudaDeviceSynchronize, ...): an id of theirs can equal an operator's
        timings = ([(kernel.name, kernel.duration) for kernel in event.kernels] if on_gpu
                   else [(event.name, event.self_cpu_time_total)])
        context = context_of(event) if timings else None
        for name, microseconds in timings:
            if microseconds <= 0:
                continue
            kind = context or kind_of(name)
            kinds[kind] = kinds.get(kind, 0.0) + microseconds / 1e6
            entry = by_name.setdefault((name, kind), [0, 0.0])
            entry[0] += 1
            entry[1] += microseconds / 1e6
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:TOP_OPERATORS]
    return (dict(sorted(kinds.items(), key=lambda item: -item[1])),
            [{"name": name[:120], "kind": kind, "calls": calls, "self_seconds": seconds}
             for (name, kind), (calls, seconds) in top])


def profile_pass(run: Callable[[], None], device: torch.device) -> dict:
    """Run `run` once under the profiler: {"seconds": its wall time so profiled, "profiled_seconds": the kernels' (GPU)
    or operators' (CPU) time, "kinds": {kind: seconds}, "top": the heaviest}. Raises RuntimeError on a GPU whose
    kernels the profiler cannot record (no CUPTI: it would give operators' CUDA-event times, nested ones summed
    again, or nothing, which would read as an idle GPU)."""
    on_gpu = device.type == "cuda"
    if on_gpu and ProfilerActivity.CUDA not in torch.profiler.supported_activities():
        raise RuntimeError("this torch's profiler cannot record CUDA kernels (no CUPTI)")
    with profile(activities=_activities(device)) as profiler:
        seconds, _ = timed(run, device)
    events = profiler.events()
    if on_gpu and any(event.is_legacy for event in events):  # whole operators' CUDA-event times, parents included
        raise RuntimeError("the profiler fell back to CUDA events instead of kernels")
    kinds, top = timings_by_kind(events, on_gpu)
    if on_gpu and not kinds:
        raise RuntimeError("the profiler recorded no GPU kernel")
    return {"seconds": seconds, "profiled_seconds": sum(kinds.values()), "kinds": kinds, "top": top}


def profiled_in_turn(run: Callable[[str], object], unprofiled_seconds: dict[str, list[float]], device,
                     others: tuple[str, ...] = ()) -> dict:
    """One profiled `run(name)` per model (`profile_pass`), compared; on a GPU each with `busy_fraction`, its
    kernels' time over the median of `unprofiled_seconds[name]`. `others` (such as ours on packed batches) are
    profiled after the models, their figures beside the comparison under their names. A profiler that fails is
    recorded as {"error": ...}: the figures measured before it are kept."""
    try:
        start_profiler(device)
        profiled = {name: profile_pass(functools.partial(run, name), device) for name in (*MODEL_NAMES, *others)}
    except Exception as error:  # noqa: BLE001 - recorded in the results
        return {"error": f"{type(error).__name__}: {error}"}
    if device.type == "cuda":
        for name, figures in profiled.items():
            figures["busy_fraction"] = figures["profiled_seconds"] / statistics.median(unprofiled_seconds[name])
    return {**comparison({name: profiled[name] for name in MODEL_NAMES}),
            **{name: profiled[name] for name in others}}


def start_profiler(device: torch.device) -> None:
    """One empty profiling session: what the first one starts once (CUPTI, the profiler's threads) is then in no
    model's figures."""
    with profile(activities=_activities(device)):
        pass


def _activities(device: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]
