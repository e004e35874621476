"""The translation pipeline saved with the model (`modeling/pipeline_annotated_transformer.py`): transformers 5 has no
`translation` pipeline, so the folder carries one that `pipeline(...)` finds through `config.custom_pipelines`, and it
returns what transformers 4's TranslationPipeline returned."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from launch_helpers import WITHOUT_THIS_PACKAGE
from model_helpers import tiny_model
from test_translate import SOURCES, save_copy_model
from transformers import pipeline
from transformers.dynamic_module_utils import get_imports

import modeling.pipeline_annotated_transformer as pipeline_module
from modeling import AnnotatedTransformerTranslationPipeline
from modeling.inference.translation import load_translation_model
from modeling.tokenization import (
    save_tokenizers,
    train_tokenizer,
)

GENERATION = {"num_beams": 2, "max_new_tokens": 6}  # max_new_tokens < the source lengths, so it shows


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest (conftest)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_copy_model(tmp_path_factory.mktemp("model"))


def generated_translations(model, tokenizer, texts, target_tokenizer=None, **generate_kwargs):
    """What the pipeline must return: each text's own `generate` output, decoded (one sentence at a time)."""
    return [
        (target_tokenizer or tokenizer).decode(
            model.generate(**tokenizer([text], return_tensors="pt"), **generate_kwargs)[0], skip_special_tokens=True
        )
        for text in texts
    ]


def test_saved_folder_carries_the_pipeline_file_and_config_entry(model_dir):
    assert (model_dir / "pipeline_annotated_transformer.py").is_file()
    config = json.loads((model_dir / "config.json").read_text())
    assert config["custom_pipelines"] == {"translation": {
        "impl": "pipeline_annotated_transformer.AnnotatedTransformerTranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"], "type": "text",
    }}
    # It travels as custom code: only libraries that a transformers user has.
    assert set(get_imports(pipeline_module.__file__)) <= {"enum", "os", "transformers"}


FRESH_PROCESS = WITHOUT_THIS_PACKAGE + textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import pipeline
    torch.set_num_threads(1)
    model_dir, resave_dir = sys.argv[1], sys.argv[2]
    texts, generation = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    by_task = pipeline("translation", model=model_dir, trust_remote_code=True)
    inferred = pipeline(model=model_dir, trust_remote_code=True)
    assert "modeling" not in sys.modules
    by_task.model.save_pretrained(resave_dir)  # a model loaded as remote code saves the pipeline again
    print(json.dumps({
        "classes": [type(p).__module__ + "." + type(p).__name__ for p in (by_task, inferred)],
        "tasks": [by_task.task, inferred.task],
        "by_task": by_task(texts, batch_size=2, **generation),
        "inferred": inferred(texts, batch_size=2, **generation),
        "single": inferred(texts[0], **generation),
    }))
    """
)


def test_pipeline_translates_in_a_fresh_process_without_this_package(model_dir, tmp_path):
    """`pipeline("translation", ...)` and `pipeline(model=...)` from the folder alone (offline, another working
    directory, `modeling` not importable): batched beam-search translations equal to generate()'s, one at a time."""
    model, tokenizer, _ = load_translation_model(model_dir, device="cpu")
    expected = generated_translations(model, tokenizer, SOURCES, **GENERATION)
    assert len(set(expected)) == len(SOURCES) and any(len(t.split()) == 6 for t in expected)  # distinct; capped

    workdir, resave_dir = tmp_path / "elsewhere", tmp_path / "resaved"
    workdir.mkdir()
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin",
           "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(model_dir), str(resave_dir), json.dumps(SOURCES),
         json.dumps(GENERATION)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(name.startswith("transformers_modules.") and name.endswith(
        ".pipeline_annotated_transformer.AnnotatedTransformerTranslationPipeline") for name in outputs["classes"])
    assert outputs["tasks"] == ["translation", "translation"]
    records = [{"translation_text": text} for text in expected]
    assert outputs["by_task"] == records
    assert outputs["inferred"] == records
    assert outputs["single"] == records[:1]  # a single text gives a list holding one dict, as in transformers 4

    assert (resave_dir / "pipeline_annotated_transformer.py").is_file()
    resaved = json.loads((resave_dir / "config.json").read_text())
    assert resaved["custom_pipelines"] == json.loads((model_dir / "config.json").read_text())["custom_pipelines"]


def test_pipeline_options_and_round_trip(model_dir, tmp_path):
    translator = pipeline("translation", model=str(model_dir), trust_remote_code=True, device="cpu")
    model, tokenizer = translator.model, translator.tokenizer
    expected = generated_translations(model, tokenizer, SOURCES[:2], num_beams=3, num_return_sequences=1)
    # Generation arguments given at construction apply to every call; the call's override them.
    fixed = pipeline("translation", model=str(model_dir), trust_remote_code=True, device="cpu", num_beams=3)
    assert fixed(SOURCES[:2]) == [{"translation_text": text} for text in expected]
    # The model's generation_config.json decides what is not given (2 beams, max_length 12).
    default = generated_translations(model, tokenizer, SOURCES[:1])
    assert translator(SOURCES[0]) == [{"translation_text": default[0]}]

    two = translator(SOURCES[:2], num_beams=2, num_return_sequences=2, max_new_tokens=4)
    assert [len(records) for records in two] == [2, 2]  # a list per input, as in transformers 4
    ids = translator(SOURCES[1], return_tensors=True, num_beams=1)[0]["translation_token_ids"]
    greedy = model.generate(**tokenizer([SOURCES[1]], return_tensors="pt"), num_beams=1)[0]
    assert torch.equal(ids, greedy)
    assert translator([]) == []
    with pytest.raises(TypeError, match="translates strings, got int"):
        translator([3])
    with pytest.raises(ValueError, match="not_a_generate_argument"):
        translator(SOURCES[0], not_a_generate_argument=1)

    # An in-memory model (no folder to read custom_pipelines from) uses the class directly.
    direct = AnnotatedTransformerTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    assert direct(SOURCES[:2], num_beams=3, batch_size=2) == [{"translation_text": text} for text in expected]
    with pytest.raises(ValueError, match="the translation pipeline needs the model's tokenizer: pass tokenizer="):
        AnnotatedTransformerTranslationPipeline(model=model, device="cpu")

    translator.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["custom_pipelines"]
    again = pipeline(model=str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    assert again(SOURCES, num_beams=1) == translator(SOURCES, num_beams=1)


def test_the_static_cache_passes_through_the_pipeline_and_translates_alike(model_dir):
    """docs/performance.md's fast greedy path on a GPU, `translator(texts, cache_implementation="static")`: the
    pipeline hands it to generate(), which then decodes into a preallocated cache, with the dynamic cache's output."""
    translator = pipeline("translation", model=str(model_dir), trust_remote_code=True, device="cpu")
    dynamic = translator(SOURCES, num_beams=1)
    static = translator(SOURCES, num_beams=1, cache_implementation="static")
    assert static == dynamic and any(record["translation_text"] for record in static)
    with pytest.raises(ValueError, match="cache_implementation"):
        translator(SOURCES[0], num_beams=1, cache_implementation="not_a_cache")


def test_truncation_fits_the_encoder_positions_whatever_the_tokenizer_allows(model_dir):
    """A tokenizer trained by train_tokenizer.py keeps --model_max_length 1024 where a model may have fewer
    positions: truncation=True cut texts to 1024 tokens, and the model refused them."""
    translator = pipeline("translation", model=str(model_dir), trust_remote_code=True, device="cpu")
    positions = translator.model.config.max_position_embeddings
    translator.tokenizer.model_max_length = 1024
    long_text = " ".join(["7"] * (positions + 8))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        translator(long_text, num_beams=1)  # not truncated unless asked
    truncated = translator.preprocess(long_text, truncation=True)["input_ids"]
    assert truncated.shape[1] == positions and truncated[0, -1].item() == translator.tokenizer.eos_token_id
    assert translator(long_text, truncation=True, num_beams=1)[0]["translation_text"].startswith("7 7")


def test_a_separate_target_vocabulary_decodes_with_the_target_tokenizer(tmp_path):
    """A folder with `target_tokenizer/` (source and target vocabularies differ) decodes with that tokenizer."""
    source = train_tokenizer([" ".join(str(i) for i in range(10))] * 20, vocab_size=270)
    target = train_tokenizer(["a dog runs in the park", "two men sit on a bench"] * 20, vocab_size=290)
    assert len(source) != len(target)
    model = tiny_model(seed=3, vocab_size=len(target), src_vocab_size=len(source), tie_word_embeddings=False,
                       max_position_embeddings=32)
    model.generation_config.max_new_tokens = 5
    model.save_pretrained(tmp_path)
    save_tokenizers((source, target), tmp_path)

    translator = pipeline("translation", model=str(tmp_path), trust_remote_code=True, device="cpu")
    assert len(translator.target_tokenizer) == len(target)
    expected = generated_translations(model, source, SOURCES, target_tokenizer=target, num_beams=1)
    assert translator(SOURCES, num_beams=1, batch_size=2) == [{"translation_text": text} for text in expected]
    ids = target("a dog runs")["input_ids"]
    assert max(ids) >= len(source)  # ids the source tokenizer does not have
    assert translator.postprocess({"output_ids": torch.tensor([[ids]])}) == [{"translation_text": "a dog runs"}]
