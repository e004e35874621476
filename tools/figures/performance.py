"""The speed tables of docs/performance.md: training, generation, CTranslate2, the data pipeline and compiled
training, ours against MarianMTModel on each device."""

from __future__ import annotations

import statistics

from .formats import (
    Benchmarks,
    _block,
    _flops,
    _joined,
    _lengths,
    _measured_on,
    _mib,
    _percent,
    _rate,
    _ratio,
    _seconds,
    _size,
    _table,
    table,
)


def _training_rows(result: dict, size: str, losses: dict) -> list[tuple]:
    rows = []
    described = f"{_size(size)}, {result['settings']['max_tokens']:,}-token batches, {_lengths(result)}"
    for loss in losses.values():
        name = "cross-entropy" if loss["label_smoothing"] == 0 else f"label smoothing {loss['label_smoothing']:g}"
        for phase, label in (("steady", "steady"), ("first_epoch", "first epoch (a fresh process each)")):
            figures = loss[phase]
            rows.append((described, f"{name}, {label}, target tokens/s",
                         _rate(figures["ours"]["target_tokens_per_s"]), _rate(figures["marian"]["target_tokens_per_s"]),
                         _ratio(figures["ratio"]["target_tokens_per_s"])))
            described = ""
        steady = loss["steady"]
        peak = _flops(result["matmul_peak"]["flops_per_s"])
        rows.append(("", f"{name}, steady, % of the measured matmul peak ({peak})",
                     _percent(steady["ours"]["peak_fraction"]), _percent(steady["marian"]["peak_fraction"]),
                     _ratio(steady["ratio"]["peak_fraction"])))
        first = loss["first_epoch"]
        rows.append(("", f"{name}, peak training memory, MiB", _mib(first["ours"]["peak_memory_bytes"]),
                     _mib(first["marian"]["peak_memory_bytes"]), _ratio(first["ratio"]["peak_memory_bytes"])))
    return rows


def _training_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    results = [benchmarks(file) for file in files]
    rows = [row for result in results for size, losses in result["train"].items()
            for row in _training_rows(result, size, losses)]
    steps = _joined(result["settings"]["steps"] for result in results)
    repetitions = _joined(result["settings"]["repetitions"] for result in results)
    method = (f"Steady: the median of {repetitions} alternating passes of {steps} steps per model; first epoch: the "
              "same steps once in a fresh process per model; memory: " + _joined(
                  result["environment"]["memory_method"] for result in results) + ".")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "figure", "ours", "MarianMTModel", "ours/Marian"), rows))


def _generation_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    results = [benchmarks(file) for file in files]
    rows = []
    for result in results:
        for size, settings in result["generate"].items():
            for generated in settings.values():
                search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
                cache = "" if generated.get("cache", "dynamic") == "dynamic" else f", {generated['cache']} cache"
                rows.append((_size(size), f"{search}, batch {generated['batch_size']}{cache}",
                             _rate(generated["ours"]["tokens_per_s"]), _rate(generated["marian"]["tokens_per_s"]),
                             _ratio(generated["ratio"]["tokens_per_s"]),
                             "yes" if generated["same_output"] else "no"))
    new_tokens = _joined(g["max_new_tokens"] for r in results for s in r["generate"].values() for g in s.values())
    repetitions = _joined(result["settings"]["repetitions"] for result in results)
    method = (f"Generated tokens/s of {new_tokens} new tokens per sentence, the median of {repetitions} alternating "
              f"calls per model, {_joined(_lengths(result) for result in results)}.")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "setting", "ours, tokens/s", "MarianMTModel, tokens/s", "ours/Marian",
                          "same tokens"), rows))


def _compile_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    """Ours and Marian, eager and through torch.compile, from one run each (`scripts/benchmark.py --only compile`)."""
    results = [benchmarks(file) for file in files]
    columns = ("ours eager", "marian eager", "ours compiled", "marian compiled")
    formats = {"tokens/s": _rate, "seconds": _seconds, "FLOP/s": _flops, "share": _percent, "bytes": _mib}
    rows = []
    for result in results:
        for size, losses in result["compile"].items():
            described = f"{_size(size)}, {result['settings']['max_tokens']:,}-token batches, {_lengths(result)}"
            for loss in losses.values():
                for label, row in loss["side_by_side"].items():
                    shown = next(render for key, render in formats.items() if key in label)
                    ratio = row["ratio to marian eager"].get("ours compiled")
                    rows.append((described, label.replace(" bytes", ", MiB"),
                                 *("-" if row[name] is None else shown(row[name]) for name in columns), _ratio(ratio)))
                    described = ""
    backend = _joined(result["environment"].get("compile_backend") for result in results)
    compiled_steady = _joined(  # where the compiled steady passes ran (before this was recorded: as eager's)
        loss["compiled"].get("steady_passes", "both models in one process, after an untimed pass, alternating")
        for result in results for losses in result["compile"].values() for loss in losses.values())
    regions = any(result["environment"].get("compile_regions") for result in results)
    how = ("each layer compiled on its own: accelerate's regional compilation, `accelerate launch "
           "--dynamo_use_regional_compilation` with the Trainer's --torch_compile") if regions else \
        "the Trainer's --torch_compile"
    method = (f"torch.compile with the {backend} backend ({how}); first epoch: the steps once "
              "in a fresh process per model, its compile seconds measured by torch.compile, and its speed with them "
              "left out; steady: the median of passes after every shape was seen (eager: both models in one "
              f"process, after an untimed pass, alternating; compiled: {compiled_steady}).")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "figure", *columns, "ours compiled / Marian eager"), rows))


@table("performance-cpu-compile")
def performance_cpu_compile(benchmarks: Benchmarks) -> str:
    """Training eager and compiled, ours and Marian, on the CPU."""
    return _compile_table(benchmarks, ("results-cpu-compile.json",))


@table("performance-cpu-compile-regions")
def performance_cpu_compile_regions(benchmarks: Benchmarks) -> str:
    """Training eager and with each layer compiled on its own (regional compilation), ours and Marian, on the CPU."""
    return _compile_table(benchmarks, ("results-cpu-compile-regions.json",))


@table("performance-cpu-training")
def performance_cpu_training(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the Intel Xeon: the CPU recipes' model and the small one."""
    return _training_table(benchmarks, ("results-cpu-recipe-train-intel.json", "results-cpu-quick-intel.json"))


@table("performance-cpu-training-amd")
def performance_cpu_training_amd(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the AMD EPYC (before dropout's cheaper CPU mask)."""
    return _training_table(benchmarks, ("results-cpu-recipe-train.json", "results-cpu-quick.json"))


@table("performance-cpu-generation")
def performance_cpu_generation(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the Intel Xeon (plain nn.Linear)."""
    return _generation_table(benchmarks, ("results-cpu-generate-intel.json",))


@table("performance-cpu-generation-amd")
def performance_cpu_generation_amd(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the AMD EPYC (with the weights in oneDNN's layout)."""
    return _generation_table(benchmarks, ("results-cpu-generate.json",))


@table("ctranslate2-cpu")
def ctranslate2_cpu(benchmarks: Benchmarks) -> str:
    """The CTranslate2 export against our PyTorch generate(), same weights, same process."""
    result = benchmarks("results-cpu-ctranslate2.json")
    rows = []
    for size, settings in result["ctranslate2"].items():
        for name, generated in settings.items():
            if name == "compute_types":
                continue
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            for engine, ratio in generated["ratio"].items():
                rows.append((_size(size), f"{engine.removeprefix('ctranslate2_')}, {search}, batch "
                                          f"{generated['batch_size']}",
                             _rate(generated[engine]["tokens_per_s"]), _rate(generated["pytorch"]["tokens_per_s"]),
                             _ratio(ratio), "yes" if generated[engine]["same_output"] else "no"))
    method = (f"Generated tokens/s of {result['settings']['max_new_tokens']} new tokens per sentence, the median of "
              f"{result['settings']['repetitions']} alternating calls, both engines in one process.")
    return _block(_measured_on(result, ctranslate2=True, method=method),
                  _table(("model", "compute type, setting", "CTranslate2, tokens/s",
                          "our PyTorch generate(), tokens/s", "CTranslate2/PyTorch", "same tokens as PyTorch"), rows))


DATA_RESULTS = ("results-cpu-quick.json", "results-cpu-data-1M.json", "results-cpu-data-4.5M.json",
                "results-cpu-data-45M.json")


@table("performance-cpu-data")
def performance_cpu_data(benchmarks: Benchmarks) -> str:
    """The data pipeline at each corpus size measured: text files to token-budget batches (time, per million pairs,
    private memory and RSS), again from its cache, and launch to the first training step."""
    results = [benchmarks(name) for name in DATA_RESULTS if (benchmarks.folder / name).is_file()]
    rows = []
    for result in results:
        data = result["data"]
        pipeline, cached = data["pipeline"], data["pipeline_cached"]
        stages = " + ".join(_seconds(seconds) for seconds in pipeline["stage_seconds"].values())
        per_million = pipeline.get("seconds_per_million_pairs")
        private = "—"
        if "peak_private_bytes" in pipeline:  # measured since private memory was
            start = pipeline["private_bytes_at_start"]
            private = (f"{_mib(pipeline['peak_private_bytes'] - start)} / "
                       f"{_mib(pipeline['private_bytes_after_stage']['index'] - start)} (index: "
                       f"{pipeline['index_bytes_per_pair']:.1f} bytes a pair)")
        launch = data["first_step_cached"]
        pairs = f"{data['corpus']['pairs']:,}"
        if "peak_private_bytes" in pipeline and "filtered_at_a_time" not in pipeline:
            pairs += " (the earlier pipeline: filters and sort over the whole corpus at once)"
        rows.append((
            pairs, f"{_seconds(pipeline['seconds'])} ({stages})",
            _seconds(sum(per_million.values())) if per_million else "—", private,
            _mib(pipeline["peak_rss_bytes"]), _seconds(cached["seconds"]),
            f"{_seconds(launch['setup_seconds'])} / {_seconds(launch['first_step_seconds'])}"
            + (f" ({_mib(launch['peak_private_bytes'])} MiB)" if "peak_private_bytes" in launch else ""),
        ))
    header = ("synthetic pairs", "load + prepare + index, s", "s per million pairs",
              "private memory above the imports, MiB: peak / left after the index",
              "peak RSS, MiB", "the same on the cache it left, s",
              "`accelerate launch scripts/train.py` on that cache: setup done / first step, s (its peak private "
              "memory)")
    method = ("Private memory: the anonymous memory of the pipeline's process and its workers (their heap and arrays), "
              "which a corpus larger than memory must keep small; RSS also counts the memory-mapped Arrow files' "
              "pages as they are read, which the kernel drops as memory runs short.")
    return _block(_measured_on(*results, method=method), _table(header, rows))


@table("performance-gpu-training")
def performance_gpu_training(benchmarks: Benchmarks) -> str:
    """Training against MarianMTModel on the H100: Multi30k's lengths (label smoothing), and synthetic lengths."""
    return _training_table(benchmarks, ("results-gpu-h100-profile.json", "results-gpu-h100.json"))


@table("performance-gpu-training-profile")
def performance_gpu_training_profile(benchmarks: Benchmarks) -> str:
    """Where a steady training pass's GPU time goes, by kind of kernel."""
    result = benchmarks("results-gpu-h100-profile.json")
    rows = []
    for size, losses in result["train"].items():
        for loss in losses.values():
            profile = loss["profile"]
            ours, marian = profile["ours"], profile["marian"]
            steps = loss["workload"]["steps"]
            rows.append((f"kernel time of one {steps}-step pass, ms (GPU busy, % of a steady pass)",
                         f"{1e3 * ours['profiled_seconds']:,.0f} ({_percent(ours['busy_fraction'])})",
                         f"{1e3 * marian['profiled_seconds']:,.0f} ({_percent(marian['busy_fraction'])})",
                         _ratio(ours["profiled_seconds"] / marian["profiled_seconds"])))
            for kind in dict.fromkeys([*ours["kinds"], *marian["kinds"]]):
                mine, theirs = ours["kinds"].get(kind, 0.0), marian["kinds"].get(kind, 0.0)
                rows.append((f"{kind}, ms", f"{1e3 * mine:,.0f}", f"{1e3 * theirs:,.0f}",
                             _ratio(mine / theirs if theirs else None)))
    method = (f"{_size(size)}, label smoothing 0.1, {_lengths(result)}: one more training pass per model under "
              "torch.profiler, its GPU kernels' time summed by kind.")
    return _block(_measured_on(result, method=method),
                  _table(("figure", "ours", "MarianMTModel", "ours/Marian"), rows))


@table("performance-gpu-generation")
def performance_gpu_generation(benchmarks: Benchmarks) -> str:
    """generate() against MarianMTModel on the H100, with the dynamic and the static (compiled) cache."""
    return _generation_table(benchmarks, ("results-gpu-h100.json",))


@table("performance-gpu-generation-profile")
def performance_gpu_generation_profile(benchmarks: Benchmarks) -> str:
    """generate() on the H100 with Multi30k's lengths, and how much of a call the GPU computes."""
    result = benchmarks("results-gpu-h100-generate-profile.json")
    rows = []
    for size, settings in result["generate"].items():
        for generated in settings.values():
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            ours, marian, profile = generated["ours"], generated["marian"], generated["profile"]
            rows.append((
                f"{search}, batch {generated['batch_size']}",
                f"{_rate(ours['tokens_per_s'])} / {_rate(marian['tokens_per_s'])}",
                _ratio(generated["ratio"]["tokens_per_s"]),
                f"{ours['generated_tokens'] / ours['tokens_per_s']:.3f} / "
                f"{marian['generated_tokens'] / marian['tokens_per_s']:.3f}",
                " / ".join(f"{1e3 * profile[model]['profiled_seconds']:,.1f}" for model in ("ours", "marian")),
                f"{_percent(profile['ours']['busy_fraction'])} / {_percent(profile['marian']['busy_fraction'])}",
            ))
    method = (f"{_size(size)}, {result['settings']['caches'][0]} cache, {result['settings']['max_new_tokens']} new "
              f"tokens, {_lengths(result)}; the median of {result['settings']['repetitions']} alternating calls; one "
              "more call per model and setting under torch.profiler gives its kernels' time, and GPU busy is that time "
              "over a timed call's.")
    return _block(_measured_on(result, method=method),
                  _table(("setting", "tokens/s, ours / Marian", "ours/Marian", "a call, s, ours / Marian",
                          "its kernels, ms, ours / Marian", "GPU busy, ours / Marian"), rows))


@table("performance-gpu-h200-compile")
def performance_gpu_h200_compile(benchmarks: Benchmarks) -> str:
    """Training eager against compiled on the H200: the compile section's eager half (its compiled half did not end
    within its time limit) and a probe that compiled ours alone, step by step."""
    run, probe = benchmarks("results-gpu-h200-compile.json"), benchmarks("results-gpu-h200-compiled-probe.json")
    loss = next(iter(run["compile"]["base"].values()))
    eager, shapes = loss["eager"], [tuple(shape) for shape in loss["eager"]["workload"]["padded_shapes"]]
    rows = []
    for phase, label in (("steady", "steady, target tokens/s"), ("first_epoch", "first epoch, target tokens/s")):
        figures = eager[phase]
        rows.append((label, _rate(figures["ours"]["target_tokens_per_s"]),
                     _rate(figures["marian"]["target_tokens_per_s"]), "not measured", "—"))
    rows.append((f"steady, % of the measured matmul peak ({_flops(run['matmul_peak']['flops_per_s'])})",
                 _percent(eager["steady"]["ours"]["peak_fraction"]),
                 _percent(eager["steady"]["marian"]["peak_fraction"]), "not measured", "—"))
    rows.append(("peak training memory, MiB", _mib(eager["first_epoch"]["ours"]["peak_memory_bytes"]),
                 _mib(eager["first_epoch"]["marian"]["peak_memory_bytes"]), "not measured", "—"))
    compiled_steps = probe["compiled_first_pass"]
    shape = tuple(compiled_steps[0]["shape"])  # the most common shape: the batches of the shortest pairs

    seen_again = [step for step, seen in enumerate(shapes) if seen == shape and shape in shapes[:step]]
    eager_step = {  # each model's steps of `shape` after its first, in the fresh process
        model: statistics.median(eager["first_epoch"][model]["step_seconds"][0][step] for step in seen_again)
        for model in ("ours", "marian")
    }
    compiled = statistics.median(step["seconds"] for step in compiled_steps
                                 if tuple(step["shape"]) == shape and not step["compile_seconds"])
    described = f"a step of {shape[0]:,} pairs padded to {shape[1]} source and {shape[2]} target tokens, s"
    rows.append((described, f"{eager_step['ours']:.4f}", f"{eager_step['marian']:.4f}", f"{compiled:.4f}",
                 _ratio(eager_step["marian"] / compiled)))
    for step in compiled_steps:
        if step["compile_seconds"]:
            pairs, source, target = step["shape"]
            rows.append((f"compiling at step {step['step']} ({pairs:,} x {source} / {target}), s", "—", "—",
                         _seconds(step["compile_seconds"]), "—"))
    stopped = probe["stopped"]["step"]
    pairs, source, target = shapes[stopped]
    rows.append((f"compiling at step {stopped} ({pairs:,} x {source} / {target})", "—", "—",
                 "stopped while compiling", "—"))
    method = (f"{_size('base')}, label smoothing 0.1, {run['settings']['max_tokens']:,}-token batches, "
              f"{_lengths(run)}, {len(shapes)} steps of {len(set(shapes))} padded shapes. Eager: the compile section's "
              "eager half (its compiled half, each model compiled in a fresh process and again in the run's own, did "
              "not end in its 400 s); compiled: ours alone through torch.compile (inductor) in one process on a "
              "second H200 of the same image, each step of its first pass timed, stopped at its time limit while "
              "compiling a third graph.")
    return _block(_measured_on(run, method=method),
                  _table(("figure", "ours eager", "MarianMTModel eager", "ours compiled",
                          "Marian eager / ours compiled"), rows))


@table("performance-gpu-h200-serving")
def performance_gpu_h200_serving(benchmarks: Benchmarks) -> str:
    """Serving on the H200: the CTranslate2 export, our generate() and Marian's (dynamic and static cache)."""
    exported, generated = benchmarks("results-gpu-h200-ctranslate2.json"), benchmarks("results-gpu-h200-generate.json")
    rows = []
    for size, settings in exported["ctranslate2"].items():
        for name, run in settings.items():
            if name == "compute_types":
                continue
            same_run = generated["generate"][size][name]
            static = generated["generate"][size][f"{name}_static"]
            search = "greedy" if run["num_beams"] == 1 else f"beam {run['num_beams']}"
            # CTranslate2 against Marian through our generate(), which each run measured beside its peer
            to_marian = run["ratio"]["ctranslate2_bfloat16"] * same_run["ratio"]["tokens_per_s"]
            rows.append((
                f"{search}, batch {run['batch_size']}",
                f"{_rate(same_run['marian']['tokens_per_s'])} / {_rate(static['marian']['tokens_per_s'])}",
                f"{_rate(same_run['ours']['tokens_per_s'])} / {_rate(static['ours']['tokens_per_s'])}",
                _rate(run["pytorch"]["tokens_per_s"]),
                f"{_rate(run['ctranslate2_bfloat16']['tokens_per_s'])} / "
                f"{_rate(run['ctranslate2_int8_bfloat16']['tokens_per_s'])}",
                _ratio(run["ratio"]["ctranslate2_bfloat16"]), _ratio(to_marian),
                "yes" if all(run[engine]["same_output"] for engine in run["ratio"]) else "no",
            ))
    method = (f"{_size('base')}, {exported['settings']['max_new_tokens']} new tokens per sentence, "
              f"{_lengths(exported)}, the median of {exported['settings']['repetitions']} alternating calls. Two "
              "runs: CTranslate2 against our generate() (dynamic cache) in one process, and generate() of ours against "
              "Marian's with the "
              "dynamic and the static cache (whose decoding step transformers compiles into a CUDA graph) in "
              "another; CTranslate2 / Marian multiplies the two runs' ratios through our dynamic-cache generate(), "
              "measured in both.")
    return _block(_measured_on(exported, ctranslate2=True, method=method),
                  _table(("setting", "Marian generate(), dynamic / static cache", "ours, dynamic / static cache",
                          "ours, dynamic, beside CTranslate2", "CTranslate2 bfloat16 / int8_bfloat16",
                          "CTranslate2 bfloat16 / ours", "CTranslate2 bfloat16 / Marian dynamic",
                          "same tokens as ours"), rows))


@table("performance-cpu-demo")
def performance_cpu_demo(benchmarks: Benchmarks) -> str:
    """One press of Translate on the demo page, with the CPU recipe's model."""
    demo = benchmarks("results-cpu-demo.json")
    timing = demo["timing"]
    rows = [(f"{timing['source']} → {timing['translation']}", f"beam {timing['num_beams']}",
             _seconds(timing["median_seconds"]), _seconds(timing["fastest_seconds"]),
             _seconds(demo["target_seconds"]))]
    method = (f"The model: {demo['model']}. The translation, the eager attention pass over the translated pair and the "
              f"heatmap drawn as a PNG; the median and the fastest of {timing['repeats']} presses after an untimed one.")
    return _block(_measured_on(demo, method=method),
                  _table(("sentence", "search", "median, s", "fastest, s", "target, s"), rows))
