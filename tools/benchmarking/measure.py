"""Clocks, the matmul peak, FLOP counting, memory and fresh processes: how every benchmark figure is measured."""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import resource
import sys
import threading
import time
from collections.abc import Callable

import psutil
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

aten = torch.ops.aten
# torch's FLOP counter knows the CUDA attention kernels but not the fused CPU one that SDPA runs on a CPU; without
# these the attention scores and weighted sums (2 of the ~12 d_model^2-sized matmuls per token) go uncounted.
CPU_ATTENTION_FLOPS = {
    aten._scaled_dot_product_flash_attention_for_cpu: (
        lambda query, key, value, *args, out_shape=None, **kwargs: sdpa_flop_count(query, key, value)
    ),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda grad_out, query, key, value, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(
            grad_out, query, key, value
        )
    ),
}


def synchronize(device: torch.device | None) -> None:
    """Wait for queued GPU work, so a clock read after it counts it."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(function: Callable, device: torch.device | None = None):
    """(seconds, result) of `function()`, with the device synchronised before both clock reads."""
    synchronize(device)
    start = time.perf_counter()
    result = function()
    synchronize(device)
    return time.perf_counter() - start, result


def autocast(device: torch.device, dtype: str):
    """bf16 autocast (both models' matmuls in bf16, master weights fp32), or nothing for fp32."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype])


def count_flops(function: Callable[[], object]) -> int:
    """Floating-point operations of the matmuls, convolutions and attention kernels `function()` runs, by
    `torch.utils.flop_counter.FlopCounterMode` (multiply-add = 2 FLOPs; other operations are not counted)."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        function()
    return counter.get_total_flops()


def sdpa_kernels(function: Callable[[], object]) -> dict[str, int]:
    """How many of the `scaled_dot_product_attention` calls in `function()` each kernel ran, as SDPA chose it for
    each call's arguments (`torch._fused_sdp_choice`, its dispatcher's own choice; SDPBackend's names, in lower case:
    flash_attention, efficient_attention, cudnn_attention, math; "unknown" where torch cannot say). Eager calls
    only: a compiled graph was traced before."""
    original = torch.nn.functional.scaled_dot_product_attention
    kernels: dict[str, int] = {}

    def recorded(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        try:  # a private function: its failing must not cost the call (nor a benchmark its figures)
            name = torch.nn.attention.SDPBackend(torch._fused_sdp_choice(
                query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )).name.lower()
        except (RuntimeError, TypeError, ValueError, AttributeError):
            name = "unknown"
        kernels[name] = kernels.get(name, 0) + 1
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)

    torch.nn.functional.scaled_dot_product_attention = recorded
    try:
        function()
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
    return kernels


def matmul_peak(device: torch.device, dtype: str, size: int, repeats: int = 5) -> dict:
    """The measured matmul peak: the best rate of `repeats` size x size @ size x size matmuls in `dtype`."""
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator, device=device, dtype=DTYPES[dtype]) for _ in range(2))
    torch.matmul(a, b)  # warm-up: thread pools, kernel selection
    best = min(timed(lambda: torch.matmul(a, b), device)[0] for _ in range(repeats))
    return {"size": size, "dtype": dtype, "seconds": best, "flops_per_s": 2 * size**3 / best}


def _status_bytes(field: str) -> int | None:
    """A memory line of /proc/self/status (Linux), in bytes; None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int:
    """This process's resident memory now: VmRSS on Linux (the same accounting as `peak_rss_bytes`), else psutil's."""
    rss = _status_bytes("VmRSS")
    return rss if rss is not None else psutil.Process().memory_info().rss


def _clear_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux: /proc/self/clear_refs); False where impossible,
    including kernels that accept the write but keep the old peak or do not raise it again (checked with 32 MiB)."""
    if not _clear_peak_rss():
        return False
    before = _status_bytes("VmRSS")
    probe = b"\x01" * (32 * 2**20)  # written, so resident
    peak = _status_bytes("VmHWM")
    del probe
    tracks = before is not None and peak is not None and 24 * 2**20 <= peak - before < 48 * 2**20
    return _clear_peak_rss() and tracks


def peak_rss_bytes() -> int:
    """This process's highest resident memory since it started or since `reset_peak_rss`: VmHWM on Linux (not
    `getrusage`'s ru_maxrss, which a spawned process inherits from the parent it was forked from before exec),
    else ru_maxrss (bytes on macOS)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def private_bytes(pid: int | str = "self") -> int:
    """A process's anonymous memory: `Anonymous` of /proc/PID/smaps_rollup, the pages of its heap and of the arrays
    it allocated, which no file backs. RSS also counts file-backed pages (a memory-mapped Arrow file's as it is read,
    the shared libraries'), which the kernel drops and reads back as memory runs short. 0 where it cannot be read
    (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PrivateMemoryWatch:
    """The peak of the anonymous memory (`private_bytes`) of a process and its descendants (datasets' map workers,
    a launcher's training processes: those whose command line holds `only`, where given), sampled every `interval`
    seconds from a thread and at every `sample()`. `mark()` starts a new stage: `stage_peak()` is the peak since."""

    method = "peak anonymous memory (/proc/PID/smaps_rollup: Anonymous, not file-backed pages), sampled every 20 ms"

    def __init__(self, pid: int | None = None, interval: float = 0.02, only: str | None = None):
        self.process, self.interval, self.only = psutil.Process(pid), interval, only
        self.peak = self.stage = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="private-memory", daemon=True)

    def sample(self) -> int:
        """The anonymous memory now (of the processes watched), counted into the peaks."""
        try:
            processes = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            processes = []
        if self.only is not None:
            processes = [process for process in processes if self._matches(process)]
        now = sum(private_bytes(process.pid) for process in processes)
        self.peak, self.stage = max(self.peak, now), max(self.stage, now)
        return now

    def _matches(self, process) -> bool:
        try:
            return self.only in " ".join(process.cmdline())
        except psutil.Error:
            return False

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> "PrivateMemoryWatch":
        self.start_bytes = self.sample()
        self._thread.start()
        return self

    def mark(self) -> int:
        """The anonymous memory now; the stage peak starts again from it."""
        now = self.sample()
        self.stage = now
        return now

    def stage_peak(self) -> int:
        self.sample()
        return self.stage

    def stop(self) -> int:
        """Stop sampling; the peak."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.peak


class MemoryWatch:
    """Peak memory from `start()` to `read()`: on CUDA `torch.cuda.max_memory_allocated` (the caching allocator's
    live tensors), on a CPU the process's peak RSS (`peak_rss_bytes`), both reset at `start`. The benchmark uses it
    in fresh processes (`run_in_fresh_process`), where no other model's allocations are cached. `read()` returns the
    peak and the peak minus what was in use at `start()`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.baseline = 0

    @property
    def method(self) -> str:
        if self.device.type == "cuda":
            return "torch.cuda.max_memory_allocated in a fresh process"
        return "peak RSS (VmHWM reset at the start with /proc/self/clear_refs) in a fresh process"

    def start(self) -> None:
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        else:
            reset_peak_rss()
            self.baseline = rss_bytes()

    def read(self) -> tuple[int, int]:
        if self.device.type == "cuda":
            synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = peak_rss_bytes()
        return peak, peak - self.baseline


def run_in_fresh_process(function: Callable, *args):
    """`function(*args)` in a new Python process (spawned: nothing inherited from this one: no allocator caches,
    no kernel caches, a clean peak RSS). `function` must be importable and its arguments and result picklable."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as executor:
        try:
            return executor.submit(function, *args).result()
        except concurrent.futures.process.BrokenProcessPool:
            raise RuntimeError(
                f"the fresh process running {function.__name__} died before returning: killed (out of memory? this "
                f"machine has {psutil.virtual_memory().total / 2**30:.1f} GiB), or it failed to start (see its output)"
            ) from None


def interleaved(names: tuple[str, ...], repetition: int) -> tuple[str, ...]:
    """The order of the models in a repetition: as given in even ones, reversed in odd ones."""
    return names if repetition % 2 == 0 else names[::-1]
