"""Ours eager, then ours through torch.compile, in one process, on the benchmark's training batches: each step of the
first compiled pass timed as it goes (what compiling costs, and which shapes compile again), then steady passes of
each. For a lease too short for the compile section, which compiles each model three times (in a fresh process per
model, then both in its own); the figures are written after each stage, so a run stopped while compiling keeps them.

    python benchmarks/device/compiled_training.py --output FILE.json [benchmark.py's options, e.g. --device cuda
        --sizes base --label_smoothing 0.1 --data_dir DIR]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from modeling.benchmarking.lengths import batch_lengths, corpus_lengths, synthetic_lengths  # noqa: E402
from modeling.benchmarking.measure import matmul_peak, timed  # noqa: E402
from modeling.benchmarking.models import benchmark_config, build_model  # noqa: E402
from modeling.benchmarking.run import environment  # noqa: E402
from modeling.benchmarking.settings import build_parser, configure_torch, settings_from_arguments  # noqa: E402
from modeling.benchmarking.training_speed import (  # noqa: E402
    TrainingFlops,
    _device_batches,
    compile_seconds,
    compiling,
    loss_function,
    make_optimizer,
    stepped,
    training_model,
    training_step,
)


def main(arguments: list[str]) -> None:
    namespace = build_parser().parse_args(arguments)
    settings = settings_from_arguments(namespace)
    output = Path(namespace.output)
    configure_torch(settings)
    device = torch.device(settings.device)
    size, smoothing = settings.sizes[0], settings.label_smoothing[-1]
    results = {"environment": environment(settings), "size": size, "label_smoothing": smoothing}

    def save(echo=True, **figures):
        results.update(figures)
        output.write_text(json.dumps(results, indent=1))
        if echo:
            print(json.dumps(figures), flush=True)

    lengths = (corpus_lengths(settings.data_dir, settings.source_lang, settings.target_lang, settings.vocab_size,
                              settings.max_length)
               if settings.data_dir and Path(settings.data_dir).is_dir() else synthetic_lengths(seed=settings.seed))
    steps = batch_lengths(lengths, settings.max_tokens, settings.steps, settings.seed, settings.pad_to_multiple_of)
    target_tokens = sum(sum(target) for _, target in steps)
    peak = matmul_peak(device, settings.dtype, settings.peak_matmul_size)["flops_per_s"]
    model = training_model(build_model("ours", benchmark_config(size, settings.vocab_size, smoothing),
                                       settings.seed).to(device))
    batches = _device_batches(steps, settings, device)
    eager_loss = loss_function("ours", model, smoothing)
    flops = sum(map(TrainingFlops.fit(eager_loss, model, device, settings.dtype, settings.vocab_size), batches))
    optimizer = make_optimizer(model)
    shapes = [(*batch["input_ids"].shape, batch["labels"].shape[1]) for batch in batches]
    save(steps=len(batches), target_tokens=target_tokens, flops_per_pass=flops, matmul_peak_flops_per_s=peak,
         padded_shapes=[list(shape) for shape in shapes])

    def steady(loss_of) -> dict:
        def one_pass():
            for batch in batches:
                training_step(loss_of, optimizer, batch, device, settings.dtype)

        seconds = [timed(one_pass, device)[0] for _ in range(settings.repetitions)]
        rate = statistics.median(target_tokens / s for s in seconds)
        return {"target_tokens_per_s": rate, "peak_fraction": rate * flops / target_tokens / peak, "seconds": seconds}

    for batch in batches:  # eager's untimed pass
        training_step(eager_loss, optimizer, batch, device, settings.dtype)
    save(eager=steady(eager_loss))

    compiled_settings = dataclasses.replace(settings, compile=True)
    with compiling(compiled_settings):
        compiled_loss = loss_function("ours", stepped(model, compiled_settings), smoothing)
        first_pass = []
        for step, batch in enumerate(batches):
            before = compile_seconds()
            seconds = timed(lambda: training_step(compiled_loss, optimizer, batch, device, settings.dtype), device)[0]
            first_pass.append({"step": step, "shape": list(shapes[step]), "seconds": seconds,
                               "compile_seconds": compile_seconds() - before})
            print(json.dumps(first_pass[-1]), flush=True)
            save(echo=False, compiled_first_pass=first_pass)
        compiled = steady(compiled_loss)
        compiled["ratio_to_eager"] = compiled["target_tokens_per_s"] / results["eager"]["target_tokens_per_s"]
        save(compiled=compiled)


if __name__ == "__main__":
    main(sys.argv[1:])
