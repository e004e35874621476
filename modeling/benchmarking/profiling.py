"""Where a training pass's time goes: one pass under `torch.profiler`, its self time by kind of work (`--profile`).

The pass is an extra one over the steady batches, after the timed ones, so the profiler's overhead is in no other
figure. On a GPU the times are the kernels' device times and `busy_fraction` is their sum over the pass's wall time:
well under 1, the GPU waits on the host (kernel launches, Python, synchronisations) and faster kernels would not
help; near 1, the kinds below say which kernels to make faster. On a CPU they are the operators' self times on the
calling thread (their sum is close to the wall time). Kinds are read off kernel and operator names (`KINDS`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from .measure import timed

# (kind, name fragments), first match wins; names are lowercased kernel names on a GPU (cuBLAS/CUTLASS "gemm",
# "nvjet", flash attention "flash"/"fmha"), aten operator names on a CPU ("aten::mm").
KINDS = (
    ("optimizer", ("multi_tensor", "adam", "_foreach")),
    ("attention", ("flash", "fmha", "attention", "attn", "scaled_dot_product")),
    ("matrix products", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "aten::mm", "aten::addmm", "aten::bmm",
                         "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("softmax and loss", ("softmax", "nll", "cross_entropy", "logsumexp", "labelsmoothed")),
    ("layer norm", ("layer_norm", "layernorm")),
    ("dropout", ("dropout", "bernoulli", "random_")),  # ours draws its CPU mask with random_ (modeling/dropout.py)
    ("copies and fills", ("memcpy", "memset", "copy", "fill", "cat_", "aten::cat", "contiguous", "clone",
                          "zero_", "aten::to")),
)
OTHER = "elementwise and other"
TOP_OPERATORS = 12


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, fragments in KINDS if any(fragment in lowered for fragment in fragments)), OTHER)


def profile_pass(run: Callable[[], None], device: torch.device) -> dict:
    """Run `run` once under the profiler: {"seconds": wall time, "busy_fraction" (GPU only), "kinds": {kind:
    seconds}, "top": the TOP_OPERATORS kernels (GPU) or operators (CPU) with the most self time}."""
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    with profile(activities=activities) as profiler:
        seconds, _ = timed(run, device)
    timings = []  # (name, calls, self seconds)
    for event in profiler.key_averages():
        if on_gpu and event.device_type == DeviceType.CUDA:
            timings.append((event.key, event.count, event.self_device_time_total / 1e6))
        elif not on_gpu and event.device_type == DeviceType.CPU:
            timings.append((event.key, event.count, event.self_cpu_time_total / 1e6))
    timings = [timing for timing in timings if timing[2] > 0]
    kinds: dict[str, float] = {}
    for name, _, self_seconds in timings:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + self_seconds
    timings.sort(key=lambda timing: -timing[2])
    profiled = {
        "seconds": seconds,
        "profiled_seconds": sum(kinds.values()),
        "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1])),
        "top": [{"name": name[:120], "kind": kind_of(name), "calls": calls, "self_seconds": self_seconds}
                for name, calls, self_seconds in timings[:TOP_OPERATORS]],
    }
    if on_gpu:
        profiled["busy_fraction"] = profiled["profiled_seconds"] / seconds
    return profiled
