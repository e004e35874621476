"""OneDNN linear layers while `generate()` runs: `nn.Linear`'s results, plain `nn.Linear` layers outside the call,
and every change of a weight between calls followed."""

import copy
import inspect
import io

import pytest
import torch
import torch.nn.functional as F
from model_helpers import assert_varied, generating_model, padded_batch, trained_to_copy, training_batch
from torch import nn
from transformers import GenerationMixin, StoppingCriteria, StoppingCriteriaList

from modeling import onednn_linear
from modeling.onednn_linear import OneDNNForward, cpu_vendor, onednn_linear_layers, onednn_linear_available

pytestmark = pytest.mark.skipif(not onednn_linear_available(),
                                reason="this torch build has no oneDNN linear on a laid-out weight")

SETTINGS = dict(max_new_tokens=10, output_scores=True, return_dict_in_generate=True)


@pytest.fixture(autouse=True)
def layout_pays(monkeypatch):
    """Packing runs on AMD CPUs only; these tests check it on any CPU (as ONEDNN_LINEAR=1 lets a user)."""
    monkeypatch.setenv(onednn_linear.ONEDNN_LINEAR_ENV, "1")


@pytest.fixture
def laid_out_weights(monkeypatch):
    """The weights laid out so far (a list that grows)."""
    laid_out = []

    def counting(weight):
        laid_out.append(weight)
        return lay_out_weight(weight)

    lay_out_weight = onednn_linear.lay_out_weight
    monkeypatch.setattr(onednn_linear, "lay_out_weight", counting)
    return laid_out


def generated(model, num_beams: int = 1):
    input_ids, attention_mask = padded_batch()
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, **SETTINGS)


def plain_linear_generated(model, num_beams: int = 1):
    with torch.backends.mkldnn.flags(enabled=False):
        return generated(model, num_beams)


def installed_forwards(module: nn.Module) -> list[tuple[nn.Module, OneDNNForward]]:
    return [(layer, layer.__dict__["forward"]) for layer in module.modules()
            if isinstance(layer.__dict__.get("forward"), OneDNNForward)]


def no_laid_out_copies(module: nn.Module) -> bool:
    """No layer of `module` holds a laid-out copy or counts itself in a scope (every scope was left)."""
    return all(forward.laid_out is None and forward.scopes == 0 for _, forward in installed_forwards(module))


def assert_same_generation(fast, plain):
    assert torch.equal(fast.sequences, plain.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(plain.scores), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "rows",
    [torch.randn(7, 24), torch.randn(3, 5, 24), torch.randn(24, 6).t(), torch.randn(4, 9, 24)[:, 2:],
     torch.randn(0, 24), torch.randn(24)],
    ids=["2d", "3d", "transposed", "sliced", "empty", "1d"],
)
def test_within_the_scope_a_layer_multiplies_with_its_laid_out_weight_and_gives_linears_result(bias, rows,
                                                                                                laid_out_weights):
    torch.manual_seed(0)
    layer = nn.Linear(24, 40, bias=bias)
    with onednn_linear_layers(layer), torch.no_grad():
        result = layer(rows)
        again = layer(rows)
    assert laid_out_weights == [layer.weight]  # laid out once, on the first call
    torch.testing.assert_close(result, F.linear(rows, layer.weight.detach(), layer.bias), atol=2e-5, rtol=1e-5)
    assert torch.equal(again, result)
    assert type(layer) is nn.Linear and no_laid_out_copies(layer)  # the copy freed on exit
    with torch.no_grad():
        torch.testing.assert_close(layer(rows), F.linear(rows, layer.weight, layer.bias), atol=0, rtol=0)
    assert laid_out_weights == [layer.weight]  # outside a scope: F.linear, nothing laid out


def test_gradients_autocast_other_dtypes_and_a_disabled_onednn_use_nn_linear(laid_out_weights):
    torch.manual_seed(0)
    layer, rows = nn.Linear(24, 40), torch.randn(6, 24, requires_grad=True)
    with onednn_linear_layers(layer):
        layer(rows).sum().backward()  # gradients enabled
        assert layer.weight.grad is not None and rows.grad is not None
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(rows).dtype == torch.bfloat16
        with torch.no_grad(), pytest.raises(RuntimeError):
            layer(rows.double())  # F.linear's own dtype error
    with torch.backends.mkldnn.flags(enabled=False), onednn_linear_layers(layer), torch.no_grad():
        layer(rows)
    half = nn.Linear(24, 40).to(torch.bfloat16)
    with onednn_linear_layers(half), torch.no_grad():
        half(rows.bfloat16())
        assert "forward" not in half.__dict__
    assert laid_out_weights == []


def test_a_quantized_or_wrapped_layer_and_a_nested_scope_are_left_alone(laid_out_weights):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    assert not any(type(layer) is nn.Linear for layer in quantized.modules())  # all replaced by quantized layers
    with onednn_linear_layers(quantized), torch.no_grad():
        quantized(torch.randn(2, 8))
    assert laid_out_weights == []
    with onednn_linear_layers(model):
        inner = model[0].__dict__["forward"]
        with onednn_linear_layers(model):
            assert model[0].__dict__["forward"] is inner
        assert model[0].__dict__["forward"] is inner and inner.scopes == 1  # the inner scope leaves the outer's
    assert model[0].__dict__["forward"] is inner and no_laid_out_copies(model)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_gives_the_tokens_and_scores_of_plain_linear_layers(num_beams, laid_out_weights):
    model = generating_model()
    fast = generated(model, num_beams)
    stepping = [layer for layer in [*model.model.decoder.modules(), model.lm_head] if type(layer) is nn.Linear]
    # each once, in the decoder
    assert [id(weight) for weight in laid_out_weights] == [id(layer.weight) for layer in stepping]
    assert no_laid_out_copies(model)  # nothing kept after the call
    assert_varied(fast.sequences)
    assert_same_generation(fast, plain_linear_generated(model, num_beams))


def test_the_first_sampled_generate_of_a_process_draws_what_every_later_one_draws(monkeypatch):
    """Whether the layout works is probed once per process, with a generator of its own: a draw from the global one
    would make the first call's samples (and a first evaluation's effect on training) differ from every later one."""
    model = generating_model()
    monkeypatch.setattr(onednn_linear, "_available", None)  # as in a new process: not probed yet
    before = torch.random.get_rng_state()
    assert onednn_linear_available()
    assert torch.equal(torch.random.get_rng_state(), before)
    monkeypatch.setattr(onednn_linear, "_available", None)
    input_ids, attention_mask = padded_batch()
    samples = []
    for _ in range(2):
        torch.manual_seed(0)
        samples.append(model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                      max_new_tokens=10))
    assert torch.equal(samples[0], samples[1])


def test_generate_follows_weight_changes_between_calls_that_no_version_counter_sees():
    """A fused optimizer step and an edit through `.data` (how PEFT merges an adapter) leave the weight's version
    counter as it was: laid-out copies kept across calls would be stale."""
    model = generating_model()
    before = generated(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    input_ids, attention_mask = padded_batch()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    optimizer.step()  # the model stays in eval mode
    after = generated(model)
    assert not torch.equal(torch.stack(after.scores), torch.stack(before.scores))
    assert_same_generation(after, plain_linear_generated(model))
    model.lm_head.weight.data.mul_(-1)
    model.model.decoder.layers[0].feed_forward.fc1.weight.data.add_(0.5)
    assert_same_generation(generated(model), plain_linear_generated(model))


def test_a_failing_generate_leaves_plain_layers():
    model = generating_model()
    with pytest.raises(ValueError):
        generated(model, num_beams=0)
    assert no_laid_out_copies(model)


def test_a_copy_or_pickle_made_during_generate_computes_with_its_own_weights():
    """A deepcopy (from another thread, a stopping criterion) or `torch.save(model)` while generate() runs."""
    model = generating_model()
    made = {}

    class CopyOnce(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            if not made:
                made["copy"] = copy.deepcopy(model)
                buffer = io.BytesIO()
                torch.save(model, buffer)
                made["pickled"] = buffer.getvalue()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    input_ids, attention_mask = padded_batch()
    model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4,
                   stopping_criteria=StoppingCriteriaList([CopyOnce()]))
    unpickled = torch.load(io.BytesIO(made["pickled"]), weights_only=False)
    rows = torch.randn(3, model.config.d_model)
    for twin in (made["copy"], unpickled):
        with torch.no_grad():
            twin.lm_head.weight.zero_()
            assert twin.lm_head(rows).abs().max() == 0  # its own weight, not the original's
        expected = plain_linear_generated(twin)
        assert_same_generation(generated(twin), expected)  # a later generate() lays out the copy's weights
        assert no_laid_out_copies(twin)
        assert all(forward.layer is layer for layer, forward in installed_forwards(twin))  # each its own layer's


def test_a_decoding_step_compiled_by_generate_is_not_compiled_again_by_the_next_call():
    """generate() with a static cache compiles the decoding step (CPUs included when asked); the layout of each
    call must not change what the compiled graph guards on (a layer's forward), or every call compiles again."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    model = trained_to_copy(generating_model(), steps=30)
    input_ids, attention_mask = padded_batch()
    settings = dict(max_new_tokens=6, cache_implementation="static")
    eager = model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
    assert_varied(eager)
    model.generation_config.compile_config = CompileConfig(fullgraph=True)
    model.generation_config.compile_config._compile_all_devices = True  # transformers compiles on GPUs only, else
    torch._dynamo.reset()
    counters.clear()
    for _ in range(3):
        compiled = model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
        assert torch.equal(compiled, eager)
    assert counters["stats"]["unique_graphs"] == 1
    assert installed_forwards(model) and no_laid_out_copies(model)  # the layout ran, outside the compiled step


def test_generate_keeps_generationmixins_signature():
    model = generating_model()
    assert inspect.signature(model.generate) == inspect.signature(GenerationMixin.generate.__get__(model))
    assert "oneDNN's layout" in model.generate.__doc__ and GenerationMixin.generate.__doc__ in model.generate.__doc__


@pytest.mark.parametrize("cpuinfo, processor, pays", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n", "", True),  # Linux
    ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n", "", False),
    ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n", "aarch64", False),  # ARM: no vendor_id
    (None, "AMD64 Family 25 Model 33 Stepping 2, AuthenticAMD", True),  # Windows: no /proc/cpuinfo
    (None, "Intel64 Family 6 Model 85 Stepping 7, GenuineIntel", False),
], ids=["linux-amd", "linux-intel", "linux-arm", "windows-amd", "windows-intel"])
def test_weights_are_laid_out_only_on_cpus_where_it_pays(cpuinfo, processor, pays, tmp_path, monkeypatch):
    monkeypatch.undo()  # the real onednn_layout_pays and cpu_vendor, reading /proc/cpuinfo (here a stand-in for it)
    monkeypatch.delenv(onednn_linear.ONEDNN_LINEAR_ENV, raising=False)  # as CI may set it for the whole run
    laid_out, lay_out_weight, real_open = [], onednn_linear.lay_out_weight, open
    monkeypatch.setattr(onednn_linear, "lay_out_weight",
                        lambda weight: laid_out.append(weight) or lay_out_weight(weight))
    stand_in = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        stand_in.write_text(cpuinfo)
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(stand_in if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    monkeypatch.setattr(onednn_linear.platform, "processor", lambda: processor)
    onednn_linear.cpu_vendor.cache_clear()
    try:
        assert ("AuthenticAMD" in onednn_linear.cpu_vendor()) is pays
        model = generating_model()
        assert_same_generation(generated(model), plain_linear_generated(model))
        assert bool(laid_out) is pays
    finally:
        onednn_linear.cpu_vendor.cache_clear()  # the next call reads the real machine again


def test_the_real_cpu_vendor_is_read_from_the_system():
    try:
        cpuinfo = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if "vendor_id" not in cpuinfo:
        pytest.skip("this system's /proc/cpuinfo names no vendor")
    assert f"vendor_id\t: {cpu_vendor.__wrapped__()}\n" in cpuinfo


@pytest.mark.parametrize("setting, vendor, pays", [("1", "GenuineIntel", True), ("0", "AuthenticAMD", False),
                                                   ("", "AuthenticAMD", True), ("yes", "GenuineIntel", False)])
def test_onednn_linear_in_the_environment_decides_in_place_of_the_vendor(monkeypatch, setting, vendor, pays):
    monkeypatch.setenv(onednn_linear.ONEDNN_LINEAR_ENV, setting)
    monkeypatch.setattr(onednn_linear, "cpu_vendor", lambda: vendor)
    assert onednn_linear.onednn_layout_pays() is pays


def test_a_training_step_compiled_before_the_first_generate_is_not_compiled_again_after_it():
    """The layers get their oneDNN forward when the model is built: at the first generate() (an evaluation), a
    training step already compiled would have seen its layers change, and compiled again (a third graph in a run)."""
    from torch._dynamo.testing import CompileCounter

    model = generating_model().train()
    assert installed_forwards(model.model.decoder) and installed_forwards(model.lm_head)
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    try:
        compiled(**training_batch([5, 8, 3])).loss.backward()
        model.eval()
        generated(model)
        model.train()
        compiled(**training_batch([5, 8, 3])).loss.backward()
        assert counter.frame_count == 1
    finally:
        torch._dynamo.reset()
