"""`modeling.dropout.Dropout`: nn.Dropout's distribution, with its mask drawn 16 bits per element on a CPU."""

import pytest
import torch
from torch import nn

from modeling.dropout import Dropout
from tests.model_helpers import tiny_model


def test_drops_with_probability_p_and_keeps_the_expectation():
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 1  # no zeros of its own
    y = Dropout(0.1).train()(x)
    dropped = (y == 0).float().mean().item()
    assert dropped == pytest.approx(0.1, abs=0.002)  # 1e6 draws: the standard error is 0.0003
    drops = round(0.1 * 2**16)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] * (2**16 / (2**16 - drops)), rtol=1e-6, atol=0)
    assert y.mean().item() == pytest.approx(x.mean().item(), rel=0.003)


def test_masks_follow_torch_seed():
    x = torch.ones(64, 64)
    layer = Dropout(0.5).train()
    torch.manual_seed(3)
    first = layer(x)
    torch.manual_seed(3)
    assert torch.equal(layer(x), first)
    assert not torch.equal(layer(x), first)  # the generator moved on


def test_the_four_masks_read_from_one_64_bit_draw_are_independent():
    """Each 16-bit quarter of a draw decides another element: every quarter drops with probability p."""
    torch.manual_seed(1)
    y = Dropout(0.25).train()(torch.ones(4 * 250_000))
    for quarter in range(4):
        assert (y[quarter::4] == 0).float().mean().item() == pytest.approx(0.25, abs=0.004)


def test_gradient_is_the_mask_times_the_scale_and_only_a_boolean_mask_is_kept():
    torch.manual_seed(2)
    x = torch.randn(300, 200, requires_grad=True)
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        y = Dropout(0.3).train()(x)
    assert [t.dtype for t in saved] == [torch.bool]
    weights = torch.randn_like(y)
    (y * weights).sum().backward()
    keep = y != 0
    scale = 2**16 / (2**16 - round(0.3 * 2**16))
    torch.testing.assert_close(x.grad, torch.where(keep, weights * scale, 0))


@pytest.mark.parametrize("p", [0.0, 1.0, 1e-6])
def test_probabilities_that_round_to_0_or_1_behave_as_nn_dropout(p):
    x = torch.randn(50, 50)
    torch.manual_seed(4)
    expected = nn.functional.dropout(x, p, True)
    torch.manual_seed(4)
    assert torch.equal(Dropout(p).train()(x), expected)


def test_outside_training_and_in_place_it_is_nn_dropout():
    x = torch.randn(40, 40)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    torch.manual_seed(5)
    expected = nn.Dropout(0.5, inplace=True).train()(x.clone())
    torch.manual_seed(5)
    assert torch.equal(Dropout(0.5, inplace=True).train()(x.clone()), expected)


def test_the_model_uses_it_everywhere_dropout_applies():
    model = tiny_model()
    dropouts = [module for module in model.modules() if isinstance(module, nn.Dropout)]
    assert dropouts and all(type(module) is Dropout for module in dropouts)


class _TensorSubclass(torch.Tensor):
    pass


def test_vmap_fx_and_subclasses_get_nn_dropout():
    """Where the cheaper mask does not apply (one mask per vmap member, an fx proxy without a device, a tensor
    subclass such as DTensor), the layer behaves as nn.Dropout."""
    layer = Dropout(0.5).train()
    x = torch.randn(30, 30)
    torch.manual_seed(6)
    expected = nn.functional.dropout(x, 0.5, True)
    torch.manual_seed(6)
    assert torch.equal(layer(x.as_subclass(_TensorSubclass)), expected)
    rows = torch.func.vmap(layer, randomness="different")(torch.ones(3, 400))
    assert not torch.equal(rows[0], rows[1])
    traced = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(4, 4), Dropout(0.1)).train())
    assert any(node.target is torch.nn.functional.dropout for node in traced.graph.nodes)
