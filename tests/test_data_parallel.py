"""tools/benchmarking/data_parallel.py: DDP and FSDP2 training speed on N processes, and the scaling of two such
results; one process here (gloo on the CPU), several in the GPU script's test (tests/test_packing.py) and on GPUs."""

import json

import pytest
import torch
from launch_helpers import free_port

from tools.benchmarking import data_parallel


@pytest.mark.parametrize("engine", data_parallel.ENGINES)
def test_one_process_trains_and_writes_its_target_tokens_per_second(tmp_path, monkeypatch, engine):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    threads = torch.get_num_threads()
    try:
        result = data_parallel.main(["--engine", engine, "--device", "cpu", "--size", "tiny", "--steps", "3",
                                     "--warmup", "1", "--max_tokens", "256", "--threads", "1", "--data_dir",
                                     str(tmp_path / "none"), "--output", str(tmp_path / "out.json")])
    finally:
        torch.set_num_threads(threads)
    written = json.loads((tmp_path / "out.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["engine"] == engine and written["processes"] == 1 and written["target_tokens"] > 0
    assert written["target_tokens_per_s"] == pytest.approx(written["target_tokens"] / written["seconds"])
    assert written["command"].startswith("accelerate launch --num_processes 1 -m tools.benchmarking.data_parallel "
                                         "--engine")
    assert not torch.distributed.is_initialized()


def test_the_scaling_of_two_results_and_the_published_reference(tmp_path):
    one = {"engine": "ddp", "processes": 1, "target_tokens_per_s": 1000.0}
    many = {"engine": "ddp", "processes": 8, "target_tokens_per_s": 6000.0}
    for name, result in (("one", one), ("many", many)):
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    written = data_parallel.write_scaling([str(tmp_path / "one.json"), str(tmp_path / "many.json"), "--output",
                                           str(tmp_path / "scaling.json")])
    assert written == json.loads((tmp_path / "scaling.json").read_text())
    assert (written["speedup"], written["efficiency"]) == (6.0, 0.75)
    assert written["reference"]["efficiency"] == pytest.approx(6.72 / 8)
    with pytest.raises(ValueError, match="need one process and several of one engine, got 8 \\(ddp\\) and 1"):
        data_parallel.scaling(many, one)


def test_the_count_is_reduced_on_the_device_the_groups_backend_serves(monkeypatch):
    """NCCL reduces CUDA tensors only: the count goes to the process's GPU there, to the CPU for gloo (the reduction
    on a CPU tensor under NCCL crashed the GPU scaling step after its timing)."""
    gpu = torch.device("cuda", 1)
    assert data_parallel.reduction_device("nccl", gpu) == gpu
    assert data_parallel.reduction_device("gloo", gpu) == torch.device("cpu")
    assert data_parallel.reduction_device("gloo", torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    try:
        total = data_parallel.summed(41, torch.device("cpu"))
        assert total.device == torch.device("cpu") and total.item() == 41
    finally:
        torch.distributed.destroy_process_group()
