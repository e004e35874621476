"""Data-parallel training speed: the same model trained by N processes with DDP or FSDP2, each step on a token-budget
batch per process, as `accelerate launch --multi_gpu` or `--use_fsdp` trains it (one process per GPU; gloo on CPUs).

    accelerate launch --multi_gpu --num_processes N -m tools.benchmarking.data_parallel --engine ddp \\
        --device cuda --size base --output results.json

Every process builds the model with the same seed (ours, `benchmark_config(size)` with label smoothing 0.1), wraps it
(DDP: `DistributedDataParallel`; FSDP2: `fully_shard` on each encoder and decoder layer, then on the whole model, the
shared embedding one module, as accelerate's TRANSFORMER_BASED_WRAP does with configs/accelerate_fsdp.yaml), and
trains with torch's AdamW on its own batches: process r takes batches r, r + N, ... of epoch 0's token-budget batches
of the lengths (`lengths.batch_lengths`: Multi30k's training split where --data_dir holds it, else synthetic
Multi30k-like lengths), as accelerate hands them out. After `--warmup` steps, `--steps` steps are timed between two
barriers; the target tokens of all processes' batches (padding left out) over that time are the target tokens/s, and
process 0 writes them with the settings. One process is the baseline of the scaling (`efficiency`: tokens/s of N
processes over N times one process's)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from tools.processes import as_typed, free_port
from modeling.common.hardware import device_name
from .lengths import batch_lengths, corpus_lengths, synthetic_lengths, training_batch
from .measure import DTYPES, autocast
from .models import SIZES, benchmark_config, build_model

ENGINES = ("ddp", "fsdp2")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--engine", choices=ENGINES, default="ddp")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None, help="bf16 on a GPU, fp32 on a CPU")
    parser.add_argument("--size", choices=tuple(SIZES), default="base")
    parser.add_argument("--max_tokens", type=int, default=None, help="each process's batch (GPU 32768, CPU 2048)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timed ones")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per process (CPU)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--data_dir", default="data/multi30k", help="whose training lengths shape the batches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True, help="the JSON process 0 writes")
    return parser


def shard(model, engine: str):
    """The model as `engine` trains it on this process."""
    if engine == "ddp":
        device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    from torch.distributed.fsdp import fully_shard

    model.model.embed_with_the_shared_module()  # one module holds the tied matrix, as the Trainer does under FSDP
    for layer in [*model.model.encoder.layers, *model.model.decoder.layers]:
        fully_shard(layer)
    return fully_shard(model)


def reduction_device(backend: str, device: torch.device) -> torch.device:
    """Where a tensor must be for the process group's `backend` to reduce it: NCCL reduces CUDA tensors only (the
    process's own GPU), gloo CPU tensors."""
    return device if backend == "nccl" else torch.device("cpu")


def summed(value: int, device: torch.device) -> torch.Tensor:
    """`value` summed over every process of the default group, in a tensor on the device its backend serves."""
    tensor = torch.tensor([value], dtype=torch.int64,
                          device=reduction_device(torch.distributed.get_backend(), device))
    torch.distributed.all_reduce(tensor)
    return tensor.cpu()


def main(argv=None) -> dict | None:
    args = build_parser().parse_args(argv)
    cuda = args.device == "cuda"
    dtype = args.dtype or ("bf16" if cuda else "fp32")
    max_tokens = args.max_tokens or (32768 if cuda else 2048)
    if "WORLD_SIZE" not in os.environ:  # one process, launched without torch's launcher
        os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT") or str(free_port()))
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
    rank, processes = torch.distributed.get_rank(), torch.distributed.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if Path(args.data_dir).is_dir():
            lengths = corpus_lengths(args.data_dir, "de", "en", args.vocab_size, 128)
        else:
            lengths = synthetic_lengths(seed=args.seed)
        wanted = (args.warmup + args.steps) * processes
        batches = batch_lengths(lengths, max_tokens, wanted, args.seed, 8 if cuda else None)[rank::processes]
        if len(batches) < args.warmup + args.steps:
            raise ValueError(f"an epoch holds {len(batches) * processes} batches, fewer than the {wanted} asked for")
        model = build_model("ours", benchmark_config(args.size, args.vocab_size, 0.1), seed=args.seed).to(device)
        model.config.use_cache = False
        model = shard(model.train(), args.engine)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
        tensors = [{key: value.to(device) for key, value in training_batch(source, target, args.vocab_size,
                                                                             args.seed + index,
                                                                             8 if cuda else None).items()}
                   for index, (source, target) in enumerate(batches)]

        def step(batch):
            with autocast(device, dtype):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for batch in tensors[:args.warmup]:
            step(batch)
        timed = tensors[args.warmup:args.warmup + args.steps]
        if cuda:
            torch.cuda.synchronize(device)
        torch.distributed.barrier()
        start = time.perf_counter()
        for batch in timed:
            step(batch)
        if cuda:
            torch.cuda.synchronize(device)
        torch.distributed.barrier()
        seconds = time.perf_counter() - start
        tokens = summed(sum(int((batch["labels"] != -100).sum()) for batch in timed), device)
        result = {
            "engine": args.engine, "processes": processes, "machines": int(os.environ.get("GROUP_WORLD_SIZE", 1)),
            "device": args.device, "device_name": device_name(device), "dtype": dtype, "size": args.size,
            "max_tokens_per_process": max_tokens, "steps": args.steps, "warmup": args.warmup,
            "threads": torch.get_num_threads() if not cuda else None, "lengths": lengths.origin,
            "seconds": seconds, "target_tokens": int(tokens.item()), "target_tokens_per_s": tokens.item() / seconds,
            "seconds_per_step": seconds / args.steps, "torch": torch.__version__,
            "command": as_typed(["accelerate", "launch", *(["--multi_gpu"] if processes > 1 else []),
                                 "--num_processes", str(processes), "-m", "tools.benchmarking.data_parallel",
                                 *(argv if argv is not None else sys.argv[1:])]),
        }
        if rank == 0:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps(result))
        return result
    finally:
        torch.distributed.destroy_process_group()


# NVIDIA's published data-parallel scaling of fairseq's Transformer (DeepLearningExamples, PyTorch/Translation/
# Transformer, its training performance on a DGX A100): 8 GPUs train 6.72 times as many tokens/s as one.
PUBLISHED_SCALING = {"processes": 8, "speedup": 6.72, "gpu": "A100",
                     "source": "NVIDIA DeepLearningExamples, PyTorch/Translation/Transformer (fairseq), DGX A100"}


def scaling(one: dict, many: dict, reference: dict | None = None) -> dict:
    """The scaling of `many` processes over `one` (two results of `main`): their speed-up and efficiency (speed-up /
    processes), both results, and a published reference's efficiency beside them."""
    if one["processes"] != 1 or many["processes"] < 2 or one["engine"] != many["engine"]:
        raise ValueError(f"need one process and several of one engine, got {one['processes']} ({one['engine']}) and "
                         f"{many['processes']} ({many['engine']})")
    speedup = many["target_tokens_per_s"] / one["target_tokens_per_s"]
    result = {"engine": many["engine"], "processes": many["processes"], "speedup": speedup,
              "efficiency": speedup / many["processes"], "one": one, "many": many}
    if reference is not None:
        result["reference"] = {**reference, "efficiency": reference["speedup"] / reference["processes"]}
    return result


def write_scaling(argv=None) -> dict:
    """`python -m tools.benchmarking.data_parallel scaling ONE.json MANY.json --output OUT.json`."""
    parser = argparse.ArgumentParser(description="The scaling of two results of this module.")
    parser.add_argument("one")
    parser.add_argument("many")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    one, many = (json.loads(Path(path).read_text()) for path in (args.one, args.many))
    result = scaling(one, many, PUBLISHED_SCALING)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{many['processes']} processes: {result['speedup']:.2f}x one process's target tokens/s, efficiency "
          f"{result['efficiency']:.0%} (NVIDIA's fairseq Transformer on 8 A100s: {result['reference']['efficiency']:.0%})")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["scaling"]:
        write_scaling(sys.argv[2:])
    else:
        main()
