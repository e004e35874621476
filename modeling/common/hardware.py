"""The machine a run used, as model cards, logs and the benchmark report it: the CPU model or the GPU's name, and how
the run computed (processes, engine, precision, threads)."""

from __future__ import annotations

import platform

import torch


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


# accelerate's distributed types, named as users know the engines (NO: one process, nothing to name)
_ENGINES = {"MULTI_CPU": "DDP", "MULTI_GPU": "DDP", "MULTI_XPU": "DDP", "MULTI_NPU": "DDP", "MULTI_MLU": "DDP",
            "MULTI_HPU": "DDP", "FSDP": "FSDP", "DEEPSPEED": "DeepSpeed", "MEGATRON_LM": "Megatron-LM"}


def describe_run(processes: int, device_type: str, distributed_type: str, precision: str,
                 threads: int | None = None, machines: int = 1) -> str:
    """How a run computes, e.g. "2 processes on the CPU (DDP, fp32, 1 thread each)", "1 process on the GPU (bf16)"
    or "16 processes on the GPUs of 2 machines (DDP, bf16)"; `distributed_type` is accelerate's
    (`DistributedType.value`), `threads` the CPU threads of each process."""
    device = {"cpu": "the CPU", "cuda": "the GPU"}.get(device_type, device_type)
    if machines > 1:
        device = {"cpu": "the CPUs", "cuda": "the GPUs"}.get(device_type, device_type) + f" of {machines} machines"
    details = [engine] if (engine := _ENGINES.get(distributed_type, distributed_type)) != "NO" else []
    details.append(precision)
    if threads is not None:
        details.append(f"{threads} thread{'s' if threads != 1 else ''}{' each' if processes > 1 else ''}")
    return f"{processes} process{'es' if processes != 1 else ''} on {device} ({', '.join(details)})"
