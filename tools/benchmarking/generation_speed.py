"""Generation speed: `generate()` with greedy search and beam search, ours against Marian, with the same weights.

Both models get the same weights (`build_models` copies ours into Marian), so they compute the same function and
generate the same tokens; `same_output` in the report says whether they did. Each (batch size, beams) setting runs
once untimed per model (first shapes, lazy initialisation), then `repetitions` timed runs alternating the order.
Every run: the same right-padded source batch (lengths sampled from the pair lengths), `max_new_tokens`,
`use_cache=True` (each decoder step feeds only the newest token; the encoder-decoder attention's keys and values
are computed once), no sampling, under the run's dtype. Each cache of `--caches` is a setting of its own: "dynamic"
(transformers' default, growing per step) or "static" (preallocated to the output length, with which `generate()`
compiles the decoding step on a GPU, CUDA graphs included; the untimed first run pays the compilation).

Figures are medians over the timed runs, and `_best` the fastest run. Generated tokens are counted per output sequence
up to and including its first `</s>` (or all `max_new_tokens` when there is none): neither the decoder start token nor
the padding after `</s>` counts. Beam search counts the returned best hypothesis per source, not every beam. Untrained
weights rarely produce `</s>`, so most outputs run to `max_new_tokens`, and the rate is close to steps x batch size /
time.

With `--profile`, one more `generate()` call per model and setting under `torch.profiler` (see `profiling`): its time
by kind of work and, on a GPU, the fraction of a timed call the kernels ran (`busy_fraction`).
"""

from __future__ import annotations

import itertools
import statistics

import torch

from .lengths import PairLengths, source_batch, source_lengths_sample
from .measure import autocast, interleaved, timed
from .models import MODEL_NAMES, benchmark_config, build_models
from .profiling import profiled_in_turn
from .report import comparison
from .settings import BenchmarkSettings


def generated_tokens(sequences: torch.Tensor, eos_token_id: int) -> int:
    """Tokens `generate` produced (see the module doc): each row after the decoder start token, through its first
    `</s>`."""
    generated = sequences[:, 1:]
    is_eos = generated == eos_token_id
    lengths = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, generated.shape[1])
    return int(lengths.sum())


def rate_figures(runs: list[tuple[float, int]]) -> dict:
    """Median and best tokens/s, the median token count and every run's seconds, from (seconds, tokens) pairs."""
    return {
        "tokens_per_s": statistics.median(tokens / seconds for seconds, tokens in runs),
        "tokens_per_s_best": max(tokens / seconds for seconds, tokens in runs),
        "generated_tokens": statistics.median(tokens for _, tokens in runs),
        "seconds": [seconds for seconds, _ in runs],
    }


def timed_in_turn(names: tuple[str, ...], run, count_tokens, repetitions: int, device) -> tuple[dict, dict]:
    """One untimed `run(name)` per name (first shapes, lazy initialisation), then `repetitions` timed rounds in
    alternating order: ({name: first output}, {name: [(seconds, count_tokens(output)), ...]})."""
    outputs = {name: run(name) for name in names}
    runs = {name: [] for name in names}
    for repetition in range(repetitions):
        for name in interleaved(names, repetition):
            seconds, output = timed(lambda: run(name), device)
            runs[name].append((seconds, count_tokens(output)))
    return outputs, runs


def generation_setting_name(num_beams: int, batch_size: int, cache: str = "dynamic") -> str:
    search = "greedy" if num_beams == 1 else f"beam{num_beams}"
    return f"{search}_batch{batch_size}" + ("" if cache == "dynamic" else f"_{cache}")


def benchmark_generation(size: str, settings: BenchmarkSettings, lengths: PairLengths, failed=None) -> dict:
    """{setting name: figures} for each batch size, number of beams and cache. With `failed`, a setting that raises
    (out of memory at a large batch, a compilation error with a static cache) is handed to `failed(name, error)`
    and the other settings are still measured; without, the error propagates."""
    device = torch.device(settings.device)
    config = benchmark_config(size, settings.vocab_size)
    models = {name: model.to(device).eval() for name, model in build_models(config, settings.seed).items()}
    results = {}
    for batch_size in settings.generate_batch_sizes:
        sources = source_batch(
            source_lengths_sample(lengths, batch_size, settings.seed), settings.vocab_size, settings.seed,
            settings.pad_to_multiple_of,
        )
        sources = {key: value.to(device) for key, value in sources.items()}
        for num_beams, cache in itertools.product(settings.num_beams, settings.caches):

            def generate(name):
                with torch.inference_mode(), autocast(device, settings.dtype):
                    return models[name].generate(
                        **sources, num_beams=num_beams, do_sample=False, max_new_tokens=settings.max_new_tokens,
                        use_cache=True, cache_implementation=None if cache == "dynamic" else cache,
                    )

            try:
                outputs, runs = timed_in_turn(
                    MODEL_NAMES, generate, lambda sequences: generated_tokens(sequences, config.eos_token_id),
                    settings.repetitions, device,
                )
            except Exception as error:  # noqa: BLE001 - handed to `failed`, which records it
                if failed is None:
                    raise
                failed(generation_setting_name(num_beams, batch_size, cache), error)
                continue
            figures = {name: rate_figures(name_runs) for name, name_runs in runs.items()}
            same = outputs["ours"].shape == outputs["marian"].shape and torch.equal(outputs["ours"], outputs["marian"])
            results[generation_setting_name(num_beams, batch_size, cache)] = {
                "num_beams": num_beams,
                "batch_size": batch_size,
                "cache": cache,
                "max_new_tokens": settings.max_new_tokens,
                "same_output": bool(same),
                **comparison(figures),
                **({"profile": profiled_in_turn(generate, {name: figures[name]["seconds"] for name in figures},
                                                device)} if settings.profile else {}),
            }
    return results
