"""Faster decoding on AMD CPUs: while `generate()` runs, linear layers multiply with weights in oneDNN's layout.

A decoding step multiplies a few rows (batch x beams) by every weight of the decoder. On AMD's x86 CPUs `F.linear`
(MKL's sgemm in torch's CPU builds; MKL picks its fast kernels for Intel's CPUs) runs far below the machine's peak
at these shapes, and oneDNN's kernel, with the weight laid out for it once (what torch.compile's freezing does on a
CPU), is faster: on 2 cores of an AMD EPYC, the small model's decoder and output matrices take 2.1 ms for 32 rows
against 4.9 ms with `F.linear` (3.3 ms with oneDNN on the weight as it is; 1.3x at 512 rows). On 2 cores of an Intel
Xeon (AVX-512, AMX) the two kernels took the same time (1.6 ms) and the layout only added its cost (the small model's
batch-32 greedy generate() 163 ms against 145 ms), so weights are laid out on AMD CPUs only (`onednn_layout_pays`; the
environment variable ONEDNN_LINEAR=1 or 0 decides in place of the vendor).

`onednn_linear_layers(*modules)` gives every `nn.Linear` in `modules` (that exact type: a subclass, such as a
dynamically quantized layer, is left alone) whose weight is a float32 CPU tensor a forward that, within the scope,
lays the weight out on its first call and multiplies with the laid-out copy; on exit the copies are freed. The layers
keep that forward, which outside a scope is `F.linear`, and which torch.compile sees as `F.linear` always: a model
compiled once (generate() compiles the decoding step with a static cache) is not compiled again at the next call
because a forward changed. The model installs them when it is built (`install_onednn_forwards`), so that a
training step compiled before the first `generate()` (an evaluation) is not compiled again after it. The copies live
for one `generate()` call only, so no change of a weight between calls (an optimizer step, fused or not, an edit through `weight.data`, a merged adapter) can leave a stale copy behind. The layout costs
about 7 ms per call for the small model's decoder and output layer (26 ms at base), a few percent of a batch-32
generate(). Inside, a call with gradients enabled, in another dtype or device, under autocast or torch.compile
uses `F.linear`; a scope entered while `torch.backends.mkldnn.enabled` is off lays nothing out. A copy or pickle of the
model made during the call computes with its own weights.
"""

import contextlib
import copy
import functools
import os
import platform
import threading

import torch
import torch.nn.functional as F
from torch import nn

_available: bool | None = None


def onednn_linear_available() -> bool:
    """Whether this torch build has oneDNN's linear on a weight in its layout and it computes `F.linear` (a yes is
    remembered; a no, which a probe inside vmap or a fake-tensor mode could give, is asked again next time)."""
    global _available
    if _available:
        return True
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        # A generator of its own: a draw from the global one, made by a process's first call only, would change
        # what every later draw gives (training after its first evaluation, a sampled generate()).
        generator = torch.Generator().manual_seed(0)
        # on the CPU whatever device a caller's context sets (a model built on the meta device asks too)
        weight, bias, rows = (torch.randn(*shape, generator=generator, device="cpu") for shape in ((8, 4), (8,), (3, 4)))
        product = torch.ops.mkldnn._linear_pointwise(rows, lay_out_weight(weight), bias, "none", [], "")
        _available = bool(torch.allclose(product, F.linear(rows, weight, bias), atol=1e-5))
    except (AttributeError, NotImplementedError, RuntimeError):
        _available = False
    return _available


@functools.cache
def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor as the system names it: Linux's `vendor_id` ("AuthenticAMD", "GenuineIntel"), else
    `platform.processor()` (on Windows e.g. "AMD64 Family 25 Model 33 Stepping 2, AuthenticAMD"; elsewhere often
    just the architecture), else ""."""
    try:
        with open(cpuinfo) as lines:
            for line in lines:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


# Set to 1 or 0, it decides in place of the CPU's vendor: 1 lays weights out on any CPU (the tests run the AMD path so
# on every CPU, where its rounding would otherwise be checked on AMD's only), 0 on none.
ONEDNN_LINEAR_ENV = "ONEDNN_LINEAR"


def onednn_layout_pays() -> bool:
    """Whether the layout is worth its cost on this CPU: on AMD's (the module's docstring gives both measurements),
    unless the environment variable `ONEDNN_LINEAR` says 1 (always) or 0 (never)."""
    forced = os.environ.get(ONEDNN_LINEAR_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return "AuthenticAMD" in cpu_vendor()


def lay_out_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` laid out for oneDNN's matrix kernel at a few dozen rows (an opaque tensor only oneDNN reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 32)


class OneDNNForward:
    """A layer's forward, installed on the first `onednn_linear_layers` scope that holds the layer and kept: within
    a scope it lays the weight out on its first call and multiplies with the copy; outside any scope, and whenever
    torch.compile traces it (checked first, so a compiled graph sees `F.linear` and nothing of the scope), it is
    `F.linear`. Kept rather than removed on exit, so that a model compiled once (by generate() with a static cache,
    or by hand) finds the same forward at every call and is not compiled again. A copy or pickle of the layer gets
    one of its own, with nothing laid out."""

    def __init__(self, layer: nn.Linear):
        self.layer, self.scopes, self.laid_out = layer, 0, None

    def __call__(self, input: torch.Tensor) -> torch.Tensor:
        layer = self.layer
        if (
            torch.compiler.is_compiling()
            or not self.scopes
            or torch.is_grad_enabled()
            or input.dtype != torch.float32
            or input.device.type != "cpu"
            or torch.is_autocast_enabled("cpu")
        ):
            return F.linear(input, layer.weight, layer.bias)
        laid_out = self.laid_out
        if laid_out is None:
            laid_out = self.laid_out = lay_out_weight(layer.weight)
        return torch.ops.mkldnn._linear_pointwise(input, laid_out, layer.bias, "none", [], "")

    def __deepcopy__(self, memo):
        return OneDNNForward(copy.deepcopy(self.layer, memo))  # the layer's copy (from memo)

    def __reduce__(self):
        return OneDNNForward, (self.layer,)


_scopes = threading.Lock()  # scopes of several threads count the same layers


def _onednn_forward(layer: nn.Module) -> OneDNNForward | None:
    """`layer`'s `OneDNNForward`, installed now if it has none; None for a layer that is not a plain `nn.Linear` or
    has a forward of its own."""
    if type(layer) is not nn.Linear:
        return None
    forward = layer.__dict__.get("forward")
    if forward is None or (isinstance(forward, OneDNNForward) and forward.layer is not layer):
        layer.forward = forward = OneDNNForward(layer)  # none yet, or a copied layer's (copied by hand)
    return forward if isinstance(forward, OneDNNForward) else None


def install_onednn_forwards(*modules: nn.Module) -> None:
    """Give every plain `nn.Linear` of `modules` its `OneDNNForward` now, on CPUs where the layout pays: the model
    does so when it is built. Installed only at the first `generate()`, it would change the layers that a compiled
    training step was traced with, and torch.compile would compile that step again after the first evaluation."""
    if onednn_layout_pays() and onednn_linear_available():
        with _scopes:
            for layer in (layer for module in modules for layer in module.modules()):
                _onednn_forward(layer)


@contextlib.contextmanager
def onednn_linear_layers(*modules: nn.Module):
    """Within: the float32 CPU `nn.Linear` layers of `modules` multiply with copies of their weights in oneDNN's layout
    (made on each layer's first call); on leaving the last scope that holds a layer its copy is freed, so no change of a
    weight between calls can leave a stale copy behind. A layer with a forward of its own that is not a
    `OneDNNForward` is left alone. Nothing is laid out on CPUs where it does not pay (`onednn_layout_pays`)."""
    entered = []
    if (
        torch.backends.mkldnn.enabled
        and not torch.compiler.is_compiling()
        and onednn_layout_pays()
        and onednn_linear_available()
    ):
        with _scopes:
            for layer in (layer for module in modules for layer in module.modules()):
                weight = layer.weight if type(layer) is nn.Linear else None
                if weight is None or weight.device.type != "cpu" or weight.dtype != torch.float32:
                    continue
                forward = _onednn_forward(layer)
                if forward is not None and forward not in entered:
                    forward.scopes += 1
                    entered.append(forward)
    try:
        yield
    finally:
        with _scopes:
            for forward in entered:
                forward.scopes -= 1
                if not forward.scopes:
                    forward.laid_out = None
