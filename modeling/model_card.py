"""The model card (`README.md` of a trained model folder), rendered from the repository's `model_card.md` template.

The template is Jinja2 (as `huggingface_hub.ModelCard.from_template` uses) rendered strictly: a field missing from
the context is an error, not an empty string. The metadata header comes from `huggingface_hub.ModelCardData`, so
the Hub reads the languages, license, tags and the results table (`model-index`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

TEMPLATE_PATH = Path(__file__).resolve().parent.parent / "model_card.md"

PAPER_TAGS = ["translation", "transformer", "attention-is-all-you-need", "annotated-transformer", "custom_code"]


def card_data(
    model_name: str,
    results: Sequence[Mapping],
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    dataset_id: str | None = None,
    dataset_name: str | None = None,
    license: str = "apache-2.0",
) -> ModelCardData:
    """The Hub metadata: languages, license, tags, dataset and one `model-index` entry per result and metric."""
    eval_results = []
    task_name = f"Translation {source_lang}-{target_lang}" if source_lang and target_lang else "Sequence transduction"
    for row in results:
        for metric_type, metric_name in (("bleu", "sacreBLEU"), ("chrf", "chrF")):
            eval_results.append(
                EvalResult(
                    task_type="translation",
                    task_name=task_name,
                    dataset_type=dataset_id or "custom",
                    dataset_name=dataset_name or dataset_id or "custom",
                    dataset_split=row["split"],
                    metric_type=metric_type,
                    metric_name=metric_name,
                    metric_value=row[metric_type],
                )
            )
    languages = [language for language in (source_lang, target_lang) if language]
    return ModelCardData(
        model_name=model_name,
        language=languages or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(PAPER_TAGS),
        datasets=[dataset_id] if dataset_id else None,
        metrics=["bleu", "chrf"],
        eval_results=eval_results or None,
    )


def render_model_card(context: Mapping, template_path: str | os.PathLike | None = None) -> str:
    """Fill the template with `context` (which must provide every field it uses; `card_data` may be a
    `ModelCardData`) and check that the result parses as a Hub model card."""
    template_path = Path(template_path or TEMPLATE_PATH)
    if not template_path.is_file():
        raise FileNotFoundError(f"model card template {template_path} not found")
    context = dict(context)
    if isinstance(context.get("card_data"), ModelCardData):
        context["card_data"] = context["card_data"].to_yaml()
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
    )
    try:
        content = environment.from_string(template_path.read_text(encoding="utf-8")).render(**context)
    except jinja2.UndefinedError as error:
        raise ValueError(f"the model card template {template_path} needs a value the context lacks: {error}") from None
    ModelCard(content, ignore_metadata_errors=False)  # raises if the metadata header is not valid YAML
    return content


def write_model_card(
    output_dir: str | os.PathLike, context: Mapping, template_path: str | os.PathLike | None = None
) -> Path:
    """Render the card and write it as `output_dir/README.md`."""
    path = Path(output_dir) / "README.md"
    path.write_text(render_model_card(context, template_path), encoding="utf-8")
    return path


__all__ = ["PAPER_TAGS", "TEMPLATE_PATH", "card_data", "render_model_card", "write_model_card"]
