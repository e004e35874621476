"""The tables of packed training (`scripts/benchmark.py --packing`) in docs/performance.md, and the projection of the
paper's WMT 2014 setting from the best measured GPU training rate in docs/results.md."""

from __future__ import annotations

from .formats import (
    REPOSITORY,
    Benchmarks,
    _block,
    _flops,
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


def _share(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _packing_rows(result: dict, size: str, loss: dict) -> list[tuple]:
    """Ours on padded batches, ours on packed batches and Marian on padded ones, from one training run."""
    packed, padded = loss["packed"], loss["workload"]
    grid = packed["workload"]["packed_grid"]
    ours, marian, ours_packed = ({phase: loss[phase]["ours"] for phase in ("first_epoch", "steady")},
                                 {phase: loss[phase]["marian"] for phase in ("first_epoch", "steady")},
                                 {phase: packed[phase]["ours"] for phase in ("first_epoch", "steady")})
    runs = (ours, ours_packed, marian)

    def row(label, phase, key, shown):
        values = [run[phase][key] for run in runs]
        return (label, *map(shown, values), _ratio(values[1] / values[0]), _ratio(values[1] / values[2]))

    peak = _flops(result["matmul_peak"]["flops_per_s"])
    return [
        (f"the batches: {padded['steps']} token-budget batches / {packed['workload']['steps']} grids of "
         f"{grid['rows']} rows x {grid['row_length']} tokens", "", "", "", "", ""),
        ("padding share of the source / target tokens",
         f"{_share(padded['source_padding_fraction'])} / {_share(padded['target_padding_fraction'])}",
         f"{_share(packed['workload']['source_padding_fraction'])} / "
         f"{_share(packed['workload']['target_padding_fraction'])}",
         f"{_share(padded['source_padding_fraction'])} / {_share(padded['target_padding_fraction'])}", "", ""),
        row("steady, target tokens/s", "steady", "target_tokens_per_s", _rate),
        row("first epoch (a fresh process each), target tokens/s", "first_epoch", "target_tokens_per_s", _rate),
        row(f"steady, % of the measured matmul peak ({peak}), the model's FLOPs", "steady", "peak_fraction",
            _percent),
        row("steady, % of the peak, the pairs' own FLOPs (each pair alone, no padding)", "steady",
            "pair_peak_fraction", _percent),
        row("peak training memory, MiB", "first_epoch", "peak_memory_bytes", _mib),
    ]


def _packing_table(benchmarks: Benchmarks, file: str) -> str:
    result = benchmarks(file)
    rows = []
    for size, losses in result["train"].items():
        for loss in losses.values():
            name = "cross-entropy" if loss["label_smoothing"] == 0 else f"label smoothing {loss['label_smoothing']:g}"
            rows.append((f"**{_size(size)}, {name}**", "", "", "", "", ""))
            rows += _packing_rows(result, size, loss)
    settings = result["settings"]
    method = (f"{settings['max_tokens']:,}-token batches, {_lengths(result)}; packed: the first "
              f"{settings['steps']} grids of epoch 0 (PackedBatchSampler), attention through "
              f"{loss['packed']['attention_implementation']} with masks that keep each pair to itself. Steady: the "
              f"median of {settings['repetitions']} alternating passes per run; first epoch: the steps once in a "
              f"fresh process per run ({settings['fresh_runs']} each, the median); memory: "
              f"{result['environment']['memory_method']}.")
    return _block(_measured_on(result, method=method),
                  _table(("figure", "ours, padded", "ours, packed", "MarianMTModel, padded", "packed / ours padded",
                          "packed / Marian"), rows))


def _packed_compile_table(benchmarks: Benchmarks, files: tuple[str, ...]) -> str:
    """The compile section with --packing: each run eager and, where --compiled_runs named it, compiled, set against
    Marian eager."""
    results = [benchmarks(file) for file in files]
    columns = ("ours eager", "marian eager", "marian compiled", "ours packed eager", "ours packed compiled")
    formats = {"tokens/s": _rate, "tokens in": _rate, "seconds": _seconds, "FLOP/s": _flops, "share": _percent,
               "bytes": _mib}
    rows = []
    for result in results:
        for size, losses in result["compile"].items():
            described = f"{_size(size)}, {result['settings']['max_tokens']:,}-token batches, {_lengths(result)}"
            for loss in losses.values():
                for label, row in loss["side_by_side"].items():
                    shown = next(render for key, render in formats.items() if key in label)
                    cells = ["-" if row.get(name) is None else shown(row[name]) for name in columns]
                    rows.append((described, label.replace(" bytes", ", MiB"), *cells,
                                 _ratio(row["ratio to marian eager"].get("ours packed compiled"))))
                    described = ""
    backend = " / ".join(dict.fromkeys(str(r["environment"].get("compile_backend")) for r in results))
    method = (f"torch.compile with the {backend} backend (the Trainer's --torch_compile); ours padded is measured "
              "eager only (compiled, each new batch shape is a new graph: what packing removes). First epoch: the "
              "steps once in a fresh process per run, its compile seconds measured by torch.compile; steady: the "
              "median of passes after every shape was seen; a 15-minute run: the first epoch as measured, the "
              "warm-up's compiling included, then the steady rate.")
    return _block(_measured_on(*results, method=method),
                  _table(("model", "figure", *columns, "ours packed compiled / Marian eager"), rows))


@table("performance-cpu-packing")
def performance_cpu_packing(benchmarks: Benchmarks) -> str:
    """Ours on packed batches beside ours and Marian on padded ones, eager, on the CPU recipes' model."""
    return _packing_table(benchmarks, "results-cpu-packing.json")


@table("performance-cpu-packing-compile")
def performance_cpu_packing_compile(benchmarks: Benchmarks) -> str:
    """Packed and padded, eager and compiled, on the CPU."""
    return _packed_compile_table(benchmarks, ("results-cpu-packing-compile.json",))


# ---- the paper's setting, projected -------------------------------------------------------------------------------

PAPER_CONFIGS = {"base": "configs/wmt14_en_de_base.yaml", "big": "configs/wmt14_en_de_big.yaml"}


def _gpu_training_rates(benchmarks: Benchmarks, size: str) -> list[tuple[float, str, dict]]:
    """(target tokens/s, what was measured, its JSON) of every steady GPU training figure of ours at `size` in
    benchmarks/: the training and compile sections, padded and packed."""
    found = []
    for path in sorted(benchmarks.folder.glob("*.json")):
        result = benchmarks(path.name)
        if result.get("environment", {}).get("device") != "cuda":
            continue
        sections = [(loss, "compiled" if result["environment"].get("compiled_training") else "eager")
                    for loss in result.get("train", {}).get(size, {}).values()]
        sections += [(loss[kind], kind) for loss in result.get("compile", {}).get(size, {}).values()
                     for kind in ("eager", "compiled") if kind in loss]
        for figures, kind in sections:
            for packed, node in ((False, figures), (True, figures.get("packed"))):
                ours = (node or {}).get("steady", {}).get("ours")
                if ours:
                    what = f"ours {kind}, {'packed' if packed else 'padded'} batches, steady"
                    found.append((ours["target_tokens_per_s"], f"{what} (`benchmarks/{path.name}`)", result))
    return found


@table("paper-projection")
def paper_projection(benchmarks: Benchmarks) -> str:
    """The hours the paper's WMT 2014 base and big settings would train on one GPU and on 8, from the best measured
    GPU training rate of the same size (projected, not run)."""
    import yaml

    rows, measured = [], []
    for size, config_path in PAPER_CONFIGS.items():
        config = yaml.safe_load((REPOSITORY / config_path).read_text(encoding="utf-8"))  # the recipe as committed
        tokens = config["max_steps"] * config["max_tokens"]
        rates = _gpu_training_rates(benchmarks, size)
        described = (f"`{config_path}`", f"{_size(size)}", f"{config['max_steps']:,} x {config['max_tokens']:,}")
        if not rates:
            rows.append((*described, "not measured on a GPU yet (`benchmarks/gpu.sh` measures it)", "—", "—"))
            continue
        rate, what, result = max(rates, key=lambda found: found[0])
        measured.append(result)
        hours = tokens / rate / 3600
        rows.append((*described, f"{_rate(rate)} target tokens/s: {what}", f"{hours:,.1f}", f"{hours / 8:,.1f}"))
    method = ("Projected, not run: the steps times the tokens a step holds (the paper's 25,000 target tokens), at the "
              "best steady training rate measured on a GPU for the same model size, on Multi30k's lengths (WMT 2014's "
              "sentences are longer, so attention takes a larger share of a step); 8 GPUs are taken to train 8 times "
              "as fast (data parallelism, each GPU a batch of 3,125 tokens), which a real run approaches from below.")
    header = _measured_on(*measured, method=method) if measured else f"Hardware: none measured yet. {method}"
    return _block(header, _table(("config", "model", "steps x target tokens a step", "measured rate",
                                  "one GPU, hours", "8 GPUs, hours"), rows))


__all__ = ["PAPER_CONFIGS", "paper_projection", "performance_cpu_packing", "performance_cpu_packing_compile"]
