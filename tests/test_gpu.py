"""The model and scripts/train.py on CUDA GPUs: bf16 chosen automatically, SDPA against eager attention in bf16,
cached generation, the main job, and the example accelerate configs (configs/accelerate_ddp.yaml, _fsdp.yaml).

Skipped where there is no CUDA GPU (the CI machine); on a GPU machine `python -m pytest -m gpu` runs them. accelerate
ignores FSDP without a GPU, so the FSDP config can only be checked here.
"""

import json
import re

import pytest
import torch
from launch_helpers import REPO_ROOT, accelerate_launch, score_in_a_fresh_process
from model_helpers import assert_varied, generating_model, padded_batch, tiny_model
from safetensors.torch import load_file

from modeling.data.corpus import synthetic_task_dataset

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GPUS = torch.cuda.device_count()


def test_sdpa_in_bf16_is_as_accurate_as_eager_in_bf16():
    """Against the fp32 eager logits, SDPA's bf16 error is of the size of eager attention's own bf16 error."""
    input_ids, attention_mask = (tensor.cuda() for tensor in padded_batch())
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :5].clone())
    with torch.no_grad():
        reference = tiny_model(attn_implementation="eager").cuda()(**inputs).logits
        errors = {}
        for implementation in ("eager", "sdpa"):
            model = tiny_model(attn_implementation=implementation).cuda().to(torch.bfloat16)
            logits = model(**inputs).logits.float()
            assert not logits.isnan().any()
            errors[implementation] = (logits - reference).abs().max().item()
    assert errors["sdpa"] <= max(2 * errors["eager"], 0.02), errors


def test_fused_loss_on_the_gpu_equals_the_float64_loss_in_several_chunks(monkeypatch):
    """The label-smoothed loss of bf16 logits on the GPU (in float32, three chunks) against float64 on the CPU: loss
    and gradient."""
    from modeling import modeling_annotated_transformer
    from modeling.loss import label_smoothed_loss

    monkeypatch.setattr(modeling_annotated_transformer, "_loss_chunk_rows", lambda logits: 40)
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(100, 3000, generator=generator) * 4).bfloat16()
    labels = torch.randint(1, 3000, (100,), generator=generator)
    labels[::7] = -100
    results = {}
    for device, dtype in (("cuda", torch.bfloat16), ("cpu", torch.float64)):
        values = logits.to(device, dtype).detach().requires_grad_()
        total, count = label_smoothed_loss(values, labels.to(device), 0.1, 0)
        (total / count).backward()
        results[device] = ((total / count).item(), values.grad.double().cpu())
    assert results["cuda"][0] == pytest.approx(results["cpu"][0], rel=1e-5)
    torch.testing.assert_close(results["cuda"][1], results["cpu"][1], rtol=2e-2, atol=1e-5)


def test_cached_generation_equals_uncached_on_the_gpu():
    model = generating_model().cuda()
    input_ids, attention_mask = (tensor.cuda() for tensor in padded_batch())
    # as tests/test_generation.py's beam test (3 beams and 11 tokens gave the same tokens for both rows, which
    # assert_varied refuses, on the CPU too)
    settings = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=10)
    cached = model.generate(**settings, use_cache=True)
    assert_varied(cached)
    assert torch.equal(cached, model.generate(**settings, use_cache=False))


def test_main_job_on_one_gpu_trains_in_bf16_and_learns_the_copy_task(tmp_path):
    output_dir = tmp_path / "model"
    result = accelerate_launch(["--num_processes", "1"], ["--output_dir", str(output_dir)], timeout=1200)
    assert "1 process on the GPU (bf16)" in result.stdout  # bf16 chosen without being asked for
    assert json.loads((output_dir / "test_results.json").read_text())["test_exact_match"] > 95
    assert "| precision | bf16 |" in (output_dir / "README.md").read_text()


@pytest.mark.parametrize(
    "config, distributed_type", [("accelerate_ddp.yaml", "MULTI_GPU"), ("accelerate_fsdp.yaml", "FSDP")]
)
def test_example_accelerate_configs_train_and_save_a_complete_loadable_model(tmp_path, config, distributed_type):
    if distributed_type == "MULTI_GPU" and GPUS < 2:
        distributed_type = "(MULTI_GPU|NO)"  # one process: accelerate may leave DDP out
    output_dir = tmp_path / "model"
    result = accelerate_launch(  # the main job's copy task, with fewer sentences to evaluate
        ["--config_file", str(REPO_ROOT / "configs" / config), "--num_processes", str(GPUS)],
        ["--output_dir", str(output_dir), "--max_eval_samples", "50", "--max_test_samples", "50"],
        timeout=1200,
    )
    assert re.search(rf"{GPUS} process\(es\) on cuda \({distributed_type}, bf16\)", result.stdout), result.stdout
    # Full (not sharded) tensors, the tied matrix once: a folder from_pretrained loads, which has learned the task.
    saved = load_file(output_dir / "model.safetensors")
    assert saved["model.shared.weight"].shape == (270, 64) and "lm_head.weight" not in saved
    assert json.loads((output_dir / "test_results.json").read_text())["test_exact_match"] > 95
    validation = synthetic_task_dataset()["validation"].select(range(50))
    fresh = score_in_a_fresh_process(output_dir, validation["source"], validation["target"], cwd=tmp_path)
    assert fresh["exact_match"] > 95


def test_the_benchmark_profile_counts_every_kernel_once_and_finds_the_optimizers():
    """`--profile` on a GPU (tools/benchmarking/profiling.py) sums each kernel under the operator that launched it:
    the sum equals the profile's own kernel events (the device spans of annotated ranges left out), and the fused
    optimizer's kernels and the matrix products are found."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from tools.benchmarking import profiling

    model = tiny_model().cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    input_ids, attention_mask = (tensor.cuda() for tensor in padded_batch())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        step()
        torch.cuda.synchronize()
    events = profiler.events()
    kernels = [event for event in events
               if event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)]
    kernel_seconds = sum(event.time_range.end - event.time_range.start for event in kernels) / 1e6
    kinds, _ = profiling.timings_by_kind(events, on_gpu=True)
    assert kernels and sum(kinds.values()) == pytest.approx(kernel_seconds, rel=0.01)
    assert kinds["optimizer"] > 0 and kinds["matrix products"] > 0 and kinds[profiling.LOSS] > 0, kinds
