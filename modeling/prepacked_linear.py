"""Faster CPU decoding: while `generate()` runs, linear layers multiply with oneDNN-prepacked copies of their weights.

A decoding step multiplies a few rows (batch x beams) by every weight of the decoder, shapes on which `F.linear`
(MKL's sgemm in torch's CPU builds) runs far below the machine's peak. oneDNN's kernel, with the weight laid out for
it once (what torch.compile's freezing does on a CPU), is faster there: on 2 cores, the small model's decoder and
output matrices take 2.1 ms for 32 rows against 4.9 ms with `F.linear` (3.3 ms with oneDNN on the unpacked weight;
1.3x at 512 rows).

`prepacked_linear_layers(*modules)` gives every `nn.Linear` in `modules` (that exact type: a subclass, such as a
dynamically quantized layer, is left alone) whose weight is a float32 CPU tensor a forward that packs the weight on its first
call and multiplies with the packed copy; on exit the layers are plain `nn.Linear` again and the copies are freed.
The copies live for one `generate()` call only, so no change of a weight between calls (an optimizer step, fused or
not, an edit through `weight.data`, a merged adapter) can leave a stale copy behind. Packing costs about 7 ms per
call for the small model's decoder and output layer (26 ms at base), a few percent of a batch-32 generate(). Inside,
a call with gradients enabled, in another dtype or device, under autocast or torch.compile uses `F.linear`, and
nothing is packed while `torch.backends.mkldnn.enabled` is off.
"""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

_available: bool | None = None


def prepacking_available() -> bool:
    """Whether this torch build has oneDNN's prepacked linear and it computes `F.linear` (a yes is remembered; a no,
    which a probe inside vmap or a fake-tensor mode could give, is asked again next time)."""
    global _available
    if _available:
        return True
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        weight, bias, rows = torch.randn(8, 4), torch.randn(8), torch.randn(3, 4)
        product = torch.ops.mkldnn._linear_pointwise(rows, pack_weight(weight), bias, "none", [], "")
        _available = bool(torch.allclose(product, F.linear(rows, weight, bias), atol=1e-5))
    except (AttributeError, NotImplementedError, RuntimeError):
        _available = False
    return _available


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` laid out for oneDNN's matrix kernel at a few dozen rows (an opaque tensor only oneDNN reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 32)


def _prepacking_forward(layer: nn.Linear):
    packed = None

    def forward(input: torch.Tensor) -> torch.Tensor:
        nonlocal packed
        if (
            torch.compiler.is_compiling()
            or torch.is_grad_enabled()
            or input.dtype != torch.float32
            or input.device.type != "cpu"
            or torch.is_autocast_enabled("cpu")
        ):
            return F.linear(input, layer.weight, layer.bias)
        if packed is None:
            packed = pack_weight(layer.weight)
        return torch.ops.mkldnn._linear_pointwise(input, packed, layer.bias, "none", [], "")

    return forward


@contextlib.contextmanager
def prepacked_linear_layers(*modules: nn.Module):
    """Within: the float32 CPU `nn.Linear` layers of `modules` multiply with prepacked copies of their weights (made
    on each layer's first call); on exit they are plain `nn.Linear` again. A layer that already has a forward of its
    own (a nested or concurrent scope) is left as it is."""
    installed = []
    if torch.backends.mkldnn.enabled and not torch.compiler.is_compiling() and prepacking_available():
        for layer in (layer for module in modules for layer in module.modules()):
            weight = layer.weight if type(layer) is nn.Linear else None
            if weight is not None and weight.device.type == "cpu" and weight.dtype == torch.float32:
                if "forward" not in layer.__dict__:
                    layer.forward = forward = _prepacking_forward(layer)
                    installed.append((layer, forward))
    try:
        yield
    finally:
        for layer, forward in installed:
            if layer.__dict__.get("forward") is forward:
                del layer.forward
