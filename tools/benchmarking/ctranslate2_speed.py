"""Generation speed of the CTranslate2 export against our PyTorch `generate()`, with the same weights and sources.

Our model (the benchmark size, seeded as in `generation_speed`) is converted in memory by the exporter that
`scripts/export_ctranslate2.py` uses (`AnnotatedTransformerConverter`), over a synthetic vocabulary whose tokens are
the ids written out (the special tokens keep their names), into a temporary folder. That folder is then loaded
once per CTranslate2 compute type (CPU: float32 and int8; bf16 runs: bfloat16 and int8_bfloat16), with as many
threads as the run's torch.

Each (batch size, beams) setting decodes the source batch `generation_speed` uses (same lengths, same ids) with
`max_new_tokens`: PyTorch `generate(use_cache=True)`, with `early_stopping=True` for beams (the beam search CTranslate2
runs, see modeling/ctranslate2_export.py) and `Translator.translate_batch` for each compute type, one untimed run each,
then `repetitions` timed runs in alternating order. Generated tokens are counted as in `generation_speed` (through the
first `</s>`, which CTranslate2 leaves out of its hypotheses and which is added back when a hypothesis stopped early).
`same_output` says whether a compute type produced exactly PyTorch's tokens: float32 should; int8 rounds the weights, so
its tokens may differ. Ratios are CTranslate2 / PyTorch.

Both run in one process, which then holds two OpenMP runtimes (torch's and the one CTranslate2 bundles): on 2 CPU
cores PyTorch's rate in this section came out below the `generate` section's (2,135 against 3,404 greedy tokens/s
on 2026-11-23), so compare CTranslate2 with that section's figure too.
"""

from __future__ import annotations

import tempfile

import torch

from modeling.tokenization import SPECIAL_TOKENS, UNK_TOKEN
from .generation_speed import generated_tokens, generation_setting_name, rate_figures, timed_in_turn
from .lengths import PairLengths, source_batch, source_lengths_sample
from .measure import autocast
from .models import benchmark_config, build_model
from .settings import BenchmarkSettings

PYTORCH = "pytorch"


class SyntheticVocabulary:
    """The part of a tokenizer the exporter and `ctranslate2_generate` use, for token ids without a tokenizer:
    id i is the token "t<i>", the special ids keep their names (<pad>, <s>, </s>, <unk>)."""

    unk_token = UNK_TOKEN
    bos_token = SPECIAL_TOKENS[1]

    def __init__(self, size: int):
        self.tokens = [*SPECIAL_TOKENS, *(f"t{index}" for index in range(len(SPECIAL_TOKENS), size))]
        self.ids = {token: index for index, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return self.tokens[ids] if isinstance(ids, int) else [self.tokens[index] for index in ids]

    def convert_tokens_to_ids(self, tokens):
        return self.ids[tokens] if isinstance(tokens, str) else [self.ids[token] for token in tokens]


def compute_types(dtype: str) -> tuple[str, ...]:
    """CTranslate2 compute types that match a run's dtype: full precision, then int8 weights."""
    return ("float32", "int8") if dtype == "fp32" else ("bfloat16", "int8_bfloat16")


def _ctranslate2_tokens(hypotheses: list[list[int]], max_new_tokens: int) -> int:
    """Tokens counted as `generated_tokens` counts them: a hypothesis shorter than the limit ended with `</s>`."""
    return sum(len(ids) + (len(ids) < max_new_tokens) for ids in hypotheses)


def _pytorch_hypotheses(sequences: torch.Tensor, eos_token_id: int) -> list[list[int]]:
    """`generate`'s rows without the decoder start token, cut before the first `</s>` (CTranslate2's form)."""
    hypotheses = []
    for row in sequences[:, 1:].tolist():
        hypotheses.append(row[: row.index(eos_token_id)] if eos_token_id in row else row)
    return hypotheses


def benchmark_ctranslate2(size: str, settings: BenchmarkSettings, lengths: PairLengths) -> dict:
    from modeling.inference.ctranslate2_export import AnnotatedTransformerConverter
    from modeling.inference.ctranslate2_runtime import ctranslate2_generate, load_ctranslate2_translator, require_ctranslate2

    require_ctranslate2()
    device = torch.device(settings.device)
    config = benchmark_config(size, settings.vocab_size)
    model = build_model("ours", config, settings.seed).eval()
    vocabulary = SyntheticVocabulary(config.vocab_size)
    engines = compute_types(settings.dtype)
    with tempfile.TemporaryDirectory(prefix="ctranslate2-benchmark-") as folder:
        AnnotatedTransformerConverter(model, vocabulary).convert(folder, force=True)
        translators = {
            f"ctranslate2_{compute_type}": load_ctranslate2_translator(
                folder, settings.device, compute_type=compute_type, intra_threads=settings.threads
            )
            for compute_type in engines
        }
    model.to(device)
    names = (PYTORCH, *translators)
    results = {"compute_types": list(engines)}
    for batch_size in settings.generate_batch_sizes:
        sources = source_batch(
            source_lengths_sample(lengths, batch_size, settings.seed), settings.vocab_size, settings.seed,
            settings.pad_to_multiple_of,
        )
        source_ids = [ids[mask.bool()].tolist() for ids, mask in zip(sources["input_ids"], sources["attention_mask"])]
        sources = {key: value.to(device) for key, value in sources.items()}
        for num_beams in settings.num_beams:

            def generate(name):
                if name == PYTORCH:
                    with torch.inference_mode(), autocast(device, settings.dtype):
                        sequences = model.generate(
                            **sources, num_beams=num_beams, do_sample=False, max_new_tokens=settings.max_new_tokens,
                            use_cache=True, **({"early_stopping": True} if num_beams > 1 else {}),
                        )
                    return _pytorch_hypotheses(sequences.cpu(), config.eos_token_id), generated_tokens(
                        sequences, config.eos_token_id
                    )
                hypotheses = ctranslate2_generate(
                    translators[name], source_ids, vocabulary, num_beams=num_beams,
                    max_new_tokens=settings.max_new_tokens, batch_size=batch_size,
                )
                return hypotheses, _ctranslate2_tokens(hypotheses, settings.max_new_tokens)

            outputs, runs = timed_in_turn(names, generate, lambda output: output[1], settings.repetitions, device)
            figures = {name: rate_figures(name_runs) for name, name_runs in runs.items()}
            for name in translators:
                figures[name]["same_output"] = outputs[name][0] == outputs[PYTORCH][0]
            pytorch_rate = figures[PYTORCH]["tokens_per_s"]
            results[generation_setting_name(num_beams, batch_size)] = {
                "num_beams": num_beams,
                "batch_size": batch_size,
                "max_new_tokens": settings.max_new_tokens,
                **figures,
                "ratio": {name: figures[name]["tokens_per_s"] / pytorch_rate for name in translators},
            }
    return results
