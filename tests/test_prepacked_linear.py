"""The prepacked linear layer: `nn.Linear`'s results and state, a oneDNN-packed weight only in CPU float32 inference,
and a packed copy that follows every change of the weight."""

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from model_helpers import assert_varied, generating_model, padded_batch
from torch import nn

from modeling.prepacked_linear import PrepackedLinear, prepacking_available

pytestmark = pytest.mark.skipif(not prepacking_available(), reason="this torch build has no oneDNN prepacked linear")


def layer(bias: bool = True, seed: int = 0) -> PrepackedLinear:
    torch.manual_seed(seed)
    return PrepackedLinear(24, 40, bias=bias)


def packed(module: PrepackedLinear) -> bool:
    return "_prepacked_weight" in module.__dict__


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "rows",
    [torch.randn(7, 24), torch.randn(3, 5, 24), torch.randn(24, 6).t(), torch.randn(4, 9, 24)[:, 2:],
     torch.randn(0, 24)],
    ids=["2d", "3d", "transposed", "sliced", "empty"],
)
def test_inference_multiplies_with_the_packed_weight_and_gives_linears_result(bias, rows):
    module = layer(bias)
    with torch.inference_mode():
        result = module(rows)
    assert packed(module)
    torch.testing.assert_close(result, F.linear(rows, module.weight.detach(), module.bias), atol=2e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(module(rows), result)


def test_the_packed_copy_follows_every_change_of_the_weight():
    module, rows = layer(), torch.randn(6, 24)

    def check():
        with torch.inference_mode():
            result = module(rows)
        torch.testing.assert_close(result, F.linear(rows, module.weight.detach(), module.bias), atol=2e-5, rtol=1e-5)

    check()
    with torch.no_grad():
        module.weight.mul_(-3)  # an optimizer step or an in-place init
    check()
    module.weight = nn.Parameter(torch.randn(40, 24))  # a new tensor (the old one is freed: its address may recur)
    check()
    module.load_state_dict({"weight": torch.randn(40, 24), "bias": torch.randn(40)})
    check()
    module.weight.data = torch.randn(40, 24)  # new storage under the same parameter
    check()


def test_gradients_autocast_half_precision_and_a_disabled_onednn_use_nn_linear():
    module, rows = layer(), torch.randn(6, 24, requires_grad=True)
    output = module(rows)  # gradients needed
    output.sum().backward()
    assert not packed(module) and module.weight.grad is not None and rows.grad is not None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert module(rows.detach()).dtype == torch.bfloat16
    with torch.inference_mode(), torch.backends.mkldnn.flags(enabled=False):
        module(rows.detach())
    half = layer().to(torch.bfloat16)
    with torch.inference_mode():
        half(rows.detach().bfloat16())
    assert not packed(module) and not packed(half)


def test_train_eval_and_to_drop_the_copy_and_it_is_never_saved_copied_or_pickled():
    module, rows = layer(), torch.randn(6, 24)
    for drop in (lambda: module.eval(), lambda: module.train(), lambda: module.to(torch.float32)):
        with torch.no_grad():
            module(rows)
        assert packed(module)
        drop()
        assert not packed(module)
    with torch.no_grad():
        expected = module(rows)
    assert packed(module)
    assert set(module.state_dict()) == set(nn.Linear(24, 40).state_dict())
    for twin in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert not packed(twin)
        with torch.no_grad():
            torch.testing.assert_close(twin(rows), expected)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_gives_the_tokens_and_scores_of_plain_linear_layers(num_beams):
    model = generating_model()
    input_ids, attention_mask = padded_batch()
    settings = dict(num_beams=num_beams, do_sample=False, max_new_tokens=10, output_scores=True,
                    return_dict_in_generate=True)
    with torch.inference_mode():
        fast = model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
        assert packed(model.lm_head) and packed(model.model.decoder.layers[0].self_attn.q_proj)
        with torch.backends.mkldnn.flags(enabled=False):
            plain = model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
    assert_varied(fast.sequences)
    assert torch.equal(fast.sequences, plain.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(plain.scores), atol=1e-4, rtol=1e-4)


def test_a_rows_product_does_not_depend_on_the_other_rows():
    """Unlike `F.linear` on a CPU (one row goes through a matrix-vector kernel), so a sentence's translation does not
    depend on the batch it is in."""
    module, rows = layer(), torch.randn(70, 24)
    with torch.inference_mode():
        alone = module(rows[:1])
        for count in (2, 3, 32, 70):
            assert torch.equal(module(rows[:count])[:1], alone), count
