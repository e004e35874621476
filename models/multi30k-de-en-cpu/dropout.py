"""§5.4 dropout, with a cheaper mask on CPUs: 16 random bits per element, four to each 64-bit draw.

On a CPU, `nn.Dropout` draws its mask with `bernoulli_`, one Mersenne Twister draw and one conversion per element:
2.7 ms for a 2,048 x 256 activation on 2 cores of an Intel Xeon, longer than its 256 x 256 projection. A step has
2 + 2 * encoder_layers + 3 * decoder_layers of them (one more per layer with `activation_dropout`), together about a
tenth of a training step of the CPU benchmark's models. `Dropout` fills a quarter as many 64-bit integers from
the same generator (`random_` over the full range), reads each as four 16-bit integers, and keeps an element when
its integer is at least round(p * 2^16) - 2^15: it drops with probability p rounded to a multiple of 2^-16 (0.1
becomes 0.1000061) and scales the kept elements by 1 / (1 - that probability), so the expectation is unchanged. The
mask, the `where` and the scaling take 1.0 ms for that activation. Autograd keeps the mask as booleans, a byte per
element (nn.Dropout on a CPU keeps a mask in the input's dtype, four bytes in float32).

The random bits come from torch's default CPU generator, so `torch.manual_seed`, the Trainer's seed, a checkpoint's
rng_state.pth and gradient checkpointing's replay reproduce the masks as they do nn.Dropout's (they are other masks
than nn.Dropout's for the same seed). A dropped element is 0 even where the input is inf or NaN (nn.Dropout's
product gives NaN there); a non-finite value that is kept still reaches the loss. Elsewhere it is `F.dropout`: on
GPUs (a fused kernel with its own counter-based generator), under torch.compile (which generates its own random
numbers), outside training, in place, where p rounds to 0 or 1, for tensor subclasses (DTensor, torch.fx's
proxies) and inside `torch.func.vmap` (one mask per batch member). Unlike nn.Dropout it is not TorchScript-able.
"""

import torch
import torch.nn.functional as F
from torch import nn

MASK_BITS = 16


def keep_mask(shape: torch.Size, drops: int) -> torch.Tensor:
    """A boolean mask of `shape` that is False with probability drops / 2^16, from the default CPU generator."""
    numel = shape.numel()
    words = torch.empty(-(-numel // 4), dtype=torch.int64).random_(-(2**63), None)  # every 64-bit value equally
    return words.view(torch.int16)[:numel].view(shape) >= drops - 2 ** (MASK_BITS - 1)


def _plain_cpu_tensor(input) -> bool:
    """A CPU tensor of no subclass (a DTensor's mask must agree across its shards; an fx proxy has no device) and not
    batched by vmap (which asks for a mask per batch member)."""
    batched = torch._C._functorch.is_batchedtensor
    return type(input) is torch.Tensor and input.device.type == "cpu" and not batched(input)


class Dropout(nn.Dropout):
    """`nn.Dropout` whose mask costs less on a CPU (see the module doc). An `nn.Dropout`, so code that finds or
    changes dropout layers by type still does."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        drops = round(self.p * 2**MASK_BITS)
        cheaper_mask = (
            self.training and not self.inplace and 0 < drops < 2**MASK_BITS and _plain_cpu_tensor(input)
            and not torch.compiler.is_compiling()
        )
        if not cheaper_mask:
            return F.dropout(input, self.p, self.training, self.inplace)
        # where() keeps the boolean mask for backward; the product by a Python number keeps nothing
        return torch.where(keep_mask(input.shape, drops), input, 0).mul_(2**MASK_BITS / (2**MASK_BITS - drops))
