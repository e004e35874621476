"""Figures side by side: ratios ours/Marian (and CTranslate2/ours), the printed table and the JSON file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from modeling.common.file_writes import replace_text

MIB = 2**20


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def comparison(figures: dict[str, dict]) -> dict:
    """{"ours": figures, "marian": figures, "ratio": {name: ours / marian}} for every number both have (None when
    Marian's is 0). Lists, such as the seconds of each run, are kept but not divided."""
    ours, marian = figures["ours"], figures["marian"]
    ratio = {
        name: (value / marian[name] if marian[name] else None)
        for name, value in ours.items()
        if _is_number(value) and _is_number(marian.get(name))
    }
    return {"ours": ours, "marian": marian, "ratio": ratio}


def write_results(results: dict, path: str | os.PathLike) -> Path:
    """Write `results` as JSON to `path`, replacing a file whole: through a temporary file beside it, so an
    interrupted write leaves the earlier version."""
    path = Path(os.path.realpath(path))  # through a link, its target is the file replaced
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2) + "\n"
    if path.exists() and not path.is_file():  # /dev/null, a named pipe: written to, never replaced
        path.write_text(text, encoding="utf-8")
        return path
    try:
        return replace_text(path, text)
    except OSError:  # a folder that takes no new files (the file in it may still be written): written in place
        path.write_text(text, encoding="utf-8")
        return path


def _flops(value: float) -> str:
    return f"{value / 1e12:,.2f} T" if value >= 1e12 else f"{value / 1e9:,.1f} G"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _compared(rows, section, size, label, compared, key, show):
    """A row of ours and Marian; "-" for a run not measured (--compiled_runs)."""
    ours, marian = compared["ours"], compared["marian"]
    shown = ("-" if figures is None else show(figures) for figures in (ours, marian))
    rows.append((section, size, label, *shown, _ratio(compared["ratio"].get(key))))


def format_table(results: dict) -> str:
    """The figures as a text table (every figure is also in the JSON, with the seconds of each run)."""
    environment = results["environment"]
    peak = results["matmul_peak"]
    lines = [
        f"Annotated Transformer vs MarianMTModel on {environment['device']} ({environment['device_name']}, "
        f"{environment['threads']} threads), {environment['dtype']}"
        f"{', training through torch.compile' if environment.get('compiled_training') else ''}"
        f"{_sdpa_backends(results['settings'].get('sdpa_backends'))}, "
        f"torch {environment['torch']}, transformers "
        f"{environment['transformers']}, {environment['date']}; load average {environment['load_average_at_start']:.1f}"
        f" at the start, {environment['load_average_at_end']:.1f} at the end",
        f"matmul peak ({peak['size']}^3 {peak['dtype']}): {_flops(peak['flops_per_s'])}FLOP/s; lengths: "
        f"{results['lengths']['origin']} (mean source {results['lengths']['source_mean']:.1f}, target "
        f"{results['lengths']['target_mean']:.1f} tokens)",
        "",
    ]
    rows = [("section", "size", "figure", "ours", "marian", "ours/marian")]
    for size, losses in results.get("train", {}).items():
        for train in losses.values():
            _training_rows(rows, size, train)
    for size, settings in results.get("generate", {}).items():
        for name, generated in settings.items():
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            cache = "" if generated.get("cache", "dynamic") == "dynamic" else f", {generated['cache']} cache"
            setting = f"{search}, batch {generated['batch_size']}{cache}, {generated['max_new_tokens']} new"
            label = f"{setting}: tokens/s (best)" + ("" if generated["same_output"] else " (outputs differ)")
            _compared(rows, "generate", size, label, generated, "tokens_per_s", _rate)
            if "profile" in generated:
                _profile_rows(rows, size, setting, generated["profile"], "call")
    data = results.get("data")
    if data:
        pipeline, stages = data["pipeline"], data["pipeline"]["stage_seconds"]
        rows.append(("data", "", f"{data['corpus']['pairs']:,} pairs: {' + '.join(stages)} s",
                     f"{pipeline['seconds']:,.1f} = " + " + ".join(f"{s:,.1f}" for s in stages.values()), "", ""))
        rows.append(("data", "", "pipeline peak RSS MiB (+ over the imports)",
                     f"{pipeline['peak_rss_bytes'] / MIB:,.0f} (+{pipeline['rss_delta_bytes'] / MIB:,.0f})", "", ""))
        if "peak_private_bytes" in pipeline:
            rows.append(("data", "", "pipeline peak private memory MiB (+ over the imports); index bytes/pair",
                         f"{pipeline['peak_private_bytes'] / MIB:,.0f} "
                         f"(+{(pipeline['peak_private_bytes'] - pipeline['private_bytes_at_start']) / MIB:,.0f}); "
                         f"{pipeline['index_bytes_per_pair']:.1f}", "", ""))
        cached, cached_stages = data["pipeline_cached"], data["pipeline_cached"]["stage_seconds"]
        rows.append(("data", "", "the same, again on the cache it left: s",
                     f"{cached['seconds']:,.1f} = " + " + ".join(f"{s:,.1f}" for s in cached_stages.values()), "", ""))
        if (launch := data.get("first_step_cached")) is not None:
            rows.append(("data", "", "launch on that cache to setup done / first step s",
                         f"{launch['setup_seconds']:,.1f} / {launch['first_step_seconds']:,.1f}", "", ""))
    if len(rows) > 1:  # a run of other sections only (--only compile, ctranslate2) has no row of its own here
        lines.extend(_aligned(rows))
    lines.extend(_compile_table(results.get("compile")))
    lines.extend(_ctranslate2_table(results.get("ctranslate2")))
    lines.extend(f"FAILED {part}: {error}" for part, error in results.get("errors", {}).items())
    return "\n".join(lines)


def _training_rows(rows, size: str, train: dict) -> None:
    """The rows of one loss setting: the model's size and work, each phase's rate, peak memory."""
    loss = ("cross-entropy" if train["label_smoothing"] == 0 else
            f"smoothing {train['label_smoothing']:g} (Marian: {train['marian_loss'].split()[-1]})")
    work = train["workload"]
    label = f"{loss}; parameters, GFLOP/step ({work['steps']} steps, {work['target_tokens']:,} target tokens)"
    _compared(rows, "train", size, label, train["model"], "flops_per_step",
              lambda m: f"{m['trainable_parameters'] / 1e6:.2f}M, {m['flops_per_step'] / 1e9:,.1f}")
    for phase in ("first_epoch", "steady"):
        name = phase.replace("_", " ")
        _compared(rows, "train", size, f"{name}: target tokens/s, median (best)", train[phase],
                  "target_tokens_per_s",
                  lambda m: f"{m['target_tokens_per_s']:,.0f} ({m['target_tokens_per_s_best']:,.0f})")
        _compared(rows, "train", size, f"{name}: FLOP/s (% of peak)", train[phase], "flops_per_s",
                  lambda m: f"{_flops(m['flops_per_s'])} ({100 * m['peak_fraction']:.0f}%)")
        unseen = len(work.get("unseen_shape_steps", ())) if phase == "first_epoch" else 0
        if 0 < unseen < work["steps"]:  # both kinds of step: what a new shape costs
            _compared(rows, "train", size, f"{name}: median step ms, {unseen} new shapes / seen (ratio: new)",
                      train[phase], "median_step_seconds_unseen_shape",
                      lambda m: f"{1e3 * m['median_step_seconds_unseen_shape']:,.0f} / "
                                f"{1e3 * m['median_step_seconds_seen_shape']:,.0f}")
    _compared(rows, "train", size, "peak memory MiB (+ in training)", train["first_epoch"], "peak_memory_bytes",
              lambda m: f"{m['peak_memory_bytes'] / MIB:,.0f} (+{m['training_memory_bytes'] / MIB:,.0f})")
    if "sdpa_kernels" in (train["first_epoch"]["ours"] or {}):
        rows.append(("train", size, "SDPA's kernel: attention calls per forward",
                     *(_kernels((train["first_epoch"][name] or {}).get("sdpa_kernels", {}))
                       for name in ("ours", "marian")), ""))
    if "profile" in train:
        _profile_rows(rows, size, loss, train["profile"])
    if "packed" in train:
        _packed_rows(rows, size, train)


def _packed_rows(rows, size: str, train: dict) -> None:
    """Ours on packed batches (--packing) against Marian on its padded batches: the grid and each one's padding,
    each phase's rate, the share of the peak in the model's FLOPs and in the pairs' own, a run's tokens, memory."""
    packed = train["packed"]
    work, padded = packed["workload"], train["workload"]
    grid = work["packed_grid"]
    rows.append(("packed", size, f"{grid['rows']} x {grid['row_length']} grids ({packed['attention_implementation']}), "
                 f"{work['steps']} steps: padding share, source / target",
                 f"{100 * work['source_padding_fraction']:.1f}% / {100 * work['target_padding_fraction']:.1f}%",
                 f"{100 * padded['source_padding_fraction']:.1f}% / {100 * padded['target_padding_fraction']:.1f}%",
                 ""))
    for phase in ("first_epoch", "steady"):
        name = phase.replace("_", " ")
        _compared(rows, "packed", size, f"{name}: target tokens/s, median (best)", packed[phase],
                  "target_tokens_per_s",
                  lambda m: f"{m['target_tokens_per_s']:,.0f} ({m['target_tokens_per_s_best']:,.0f})")
    _compared(rows, "packed", size, "steady: FLOP/s (% of peak)", packed["steady"], "flops_per_s",
              lambda m: f"{_flops(m['flops_per_s'])} ({100 * m['peak_fraction']:.0f}%)")
    _compared(rows, "packed", size, "steady: the pairs' own FLOP/s (% of peak)", packed["steady"], "pair_flops_per_s",
              lambda m: f"{_flops(m['pair_flops_per_s'])} ({100 * m['pair_peak_fraction']:.0f}%)")
    _compared(rows, "packed", size, "target tokens in a 15-minute run (projected)", packed["first_epoch"],
              "run_target_tokens", lambda m: f"{m['run_target_tokens']:,.0f}")
    _compared(rows, "packed", size, "peak memory MiB (+ in training)", packed["first_epoch"], "peak_memory_bytes",
              lambda m: f"{m['peak_memory_bytes'] / MIB:,.0f} (+{m['training_memory_bytes'] / MIB:,.0f})")
    if "profile" in packed:
        _profile_rows(rows, size, "packed", packed["profile"])


def _sdpa_backends(backends: list[str] | None) -> str:
    return "" if backends is None else f", SDPA kernels {' '.join(backends)} only"


def _kernels(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {calls}" for name, calls in counts.items()) or "none (no SDPA)"


def _profile_rows(rows, size: str, setting: str, profiled: dict, run: str = "pass") -> None:
    """One profiled pass (or generate() call) per model: its wall time (on a GPU, with the fraction of an unprofiled
    one the kernels ran), then each kind's time and share of the profiled time."""
    if "error" in profiled:
        rows.append(("profile", size, f"{setting}: failed, {profiled['error']}"[:160], "", "", ""))
        return
    ours, marian = profiled["ours"], profiled["marian"]
    gpu = "busy_fraction" in ours
    steady = "a steady pass" if run == "pass" else "a timed call"
    _compared(rows, "profile", size,
              f"{setting}: one profiled {run} ms" + (f" (kernels busy, % of {steady})" if gpu else ""),
              profiled, "seconds", lambda m: f"{1e3 * m['seconds']:,.1f}" + (
                  f" ({100 * m['busy_fraction']:.0f}%)" if gpu else ""))
    for kind in dict.fromkeys([*ours["kinds"], *marian["kinds"]]):
        seconds = ours["kinds"].get(kind, 0.0), marian["kinds"].get(kind, 0.0)
        shown = [f"{1e3 * value:,.1f} ({100 * value / m['profiled_seconds']:.0f}%)" if m["profiled_seconds"] else "-"
                 for value, m in zip(seconds, (ours, marian))]
        rows.append(("profile", size, f"  {kind}: ms (share)", *shown,
                     _ratio(seconds[0] / seconds[1] if seconds[1] else None)))


def _compile_table(sizes: dict | None) -> list[str]:
    """The compile section's rows: each figure of ours and Marian, eager and compiled, and ours compiled against
    Marian eager (what a Seq2SeqTrainer user gets without compiling)."""
    if not sizes:
        return []
    columns = ["ours eager", "marian eager", "ours compiled", "marian compiled"]
    packed = any("ours packed eager" in row for losses in sizes.values() for compared in losses.values()
                 for row in compared.get("side_by_side", {}).values())
    columns += ["ours packed eager", "ours packed compiled"] if packed else []
    best = "ours packed compiled" if packed else "ours compiled"
    rows = [("section", "size", "figure", *columns, f"{best} / marian eager")]
    for size, losses in sizes.items():
        for loss, compared in losses.items():
            for label, row in compared.get("side_by_side", {}).items():
                rows.append(("compile", size, f"{loss}: {label}",
                             *(_figure(row.get(name), label) for name in columns),
                             _ratio(row["ratio to marian eager"].get(best))))
    return ["", *_aligned(rows)]


def _figure(value, label: str) -> str:
    if value is None:
        return "-"
    if "FLOP/s" in label:
        return _flops(value)
    if "share" in label:
        return f"{100 * value:.1f}%"
    if "bytes" in label:
        return f"{value / MIB:,.0f} MiB"
    if "seconds" in label:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def _ctranslate2_table(sizes: dict | None) -> list[str]:
    """The CTranslate2 rows: each compute type against our PyTorch generate() (not against Marian)."""
    if not sizes:
        return []
    if "skipped" in sizes:
        return ["", f"ctranslate2: skipped, {sizes['skipped']}"]
    rows = [("section", "size", "figure", "ctranslate2", "pytorch", "ctranslate2/pytorch")]
    for size, settings in sizes.items():
        for name, generated in settings.items():
            if name == "compute_types":
                continue
            search = "greedy" if generated["num_beams"] == 1 else f"beam {generated['num_beams']}"
            for engine, ratio in generated["ratio"].items():
                compute_type = engine.removeprefix("ctranslate2_")
                label = (f"{compute_type}, {search}, batch {generated['batch_size']}, "
                         f"{generated['max_new_tokens']} new: tokens/s (best)")
                label += "" if generated[engine]["same_output"] else " (outputs differ)"
                rows.append(("ctranslate2", size, label, _rate(generated[engine]), _rate(generated["pytorch"]),
                             _ratio(ratio)))
    return ["", *_aligned(rows)]


def _rate(figures: dict) -> str:
    return f"{figures['tokens_per_s']:,.0f} ({figures['tokens_per_s_best']:,.0f})"


def _aligned(rows) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) if column < 3 else cell.rjust(width)
                  for column, (cell, width) in enumerate(zip(row, widths))).rstrip()
        for row in rows
    ]
