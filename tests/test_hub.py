"""What goes to the Hub with a model folder, and the card it shows there (no network: the folder checks and the card
text only; tests/test_train.py uploads to a local fake Hub)."""

from huggingface_hub import ModelCard
from model_helpers import tiny_model

from modeling.inference.hub import hub_upload_files, upload_problem
from modeling.inference.model_card import renamed_card
from modeling.tokenization import train_tokenizer

CARD = """---
model_name: o
---
# o

## How to use

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model = AutoModelForSeq2SeqLM.from_pretrained("o", trust_remote_code=True)
```

From a checkout of the repository: `python scripts/translate.py o "Ein Hund." --num_beams 4`.

## Architecture

Post-norm, one output projection.
"""


def test_a_short_folder_name_is_replaced_only_where_it_names_the_model():
    """A run saved as `--output_dir o`: every "o" of the section's code is not the model's id."""
    card = renamed_card(ModelCard(CARD), "me/tiny", "me/tiny")
    assert card.text.startswith("# me/tiny\n\n## How to use\n")
    assert "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer" in card.text
    assert 'AutoModelForSeq2SeqLM.from_pretrained("me/tiny", trust_remote_code=True)' in card.text
    assert 'translate.py me/tiny "Ein Hund." --num_beams 4' in card.text
    assert "Post-norm, one output projection." in card.text  # other sections untouched


def test_the_usage_example_quotes_the_sentence_for_python_and_the_shell():
    """A test sentence with quotes, a literal backslash-n and a `$`: Python read \\n as a newline, the shell
    expanded $HOME."""
    import ast
    import shlex

    from modeling.inference.model_card import usage_example

    source = 'Er sagte "Hallo" und zahlte $HOME \\n zurück'
    fields = usage_example("runs/my model", source)
    assert ast.literal_eval(fields["example_source_python"]) == source
    line = f"python scripts/translate.py {fields['model_id_shell']} {fields['example_source_shell']} --num_beams 4"
    assert shlex.split(line)[2:4] == ["runs/my model", source]
    for written in ("'runs/my model'", "runs/my model"):  # as cards are written now, and as before (unquoted)
        card = CARD.replace('"o"', '"runs/my model"').replace("translate.py o ", f"translate.py {written} ")
        renamed = renamed_card(ModelCard(card), "me/tiny", "me/tiny").text
        assert 'from_pretrained("me/tiny"' in renamed and 'translate.py me/tiny "Ein Hund."' in renamed


def test_an_evaluation_of_files_takes_the_cards_languages_for_its_task(tmp_path):
    """An averaged model's card has no scores left to copy the task name from; its metadata has the languages."""
    from modeling.inference.model_card import record_evaluation

    (tmp_path / "README.md").write_text("---\nlanguage:\n- de\n- en\nmodel_name: averaged\n---\n# averaged\n")
    signatures = {"bleu": "b", "chrf": "c", "bleu_lowercase": "l"}
    results = {"split": "test.de", "num_beams": 4, "sentences": 2, "bleu": 20.0, "chrf": 40.0, "bleu_lowercase": 21.0,
               "exact_match": 0.0, "signatures": signatures,
               "test_set": {"source_file": "/data/test.de", "reference_file": "/data/test.en"}}
    record_evaluation(tmp_path, results, "evaluate.py averaged")
    evaluations = ModelCard.load(tmp_path / "README.md").data.eval_results
    assert [evaluation.task_name for evaluation in evaluations] == ["Translation de-en"] * 2


def test_the_best_checkpoint_of_another_folder_is_named_by_its_path(tmp_path):
    from modeling.inference.model_card import best_checkpoint_note

    run = tmp_path / "run"
    note = best_checkpoint_note(str(run / "checkpoint-30"), run, "bleu")
    assert note == " (the best on validation bleu: checkpoint-30)"
    other = str(tmp_path / "other" / "checkpoint-30")  # resumed from there: its weights are not in run/
    assert best_checkpoint_note(other, run, "bleu") == f" (the best on validation bleu: {other})"


def test_hidden_files_stay_local(tmp_path):
    for name in ("config.json", ".env", "sub/.netrc", "sub/vocab.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    assert hub_upload_files(tmp_path) == ["config.json", "sub/vocab.txt"]


def model_folder(folder):
    """A complete model folder: config, weights with their checksums, tokenizer."""
    tokenizer = train_tokenizer(["1 2 3 4", "5 6 7 8 9 0"] * 10, vocab_size=270)
    tiny_model(seed=1, vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert upload_problem(folder) is None
    return folder


def test_a_link_to_a_file_outside_the_folder_is_refused(tmp_path):
    folder, outside = model_folder(tmp_path / "model"), tmp_path / "secret.txt"
    outside.write_text("token")
    (folder / "notes.json").symlink_to(outside)
    problem = upload_problem(folder, allow_other_files=True)
    assert problem is not None and "notes.json link(s) to files outside the folder" in problem
    (folder / "notes.json").unlink()
    (folder / "inside.json").symlink_to(folder / "config.json")  # a link within the folder is no leak
    assert upload_problem(folder) is None


def test_files_no_model_folder_holds_are_refused_unless_allowed(tmp_path):
    folder = model_folder(tmp_path)
    for name in ("runs/x/events.out.tfevents.1", "eval-test/hypotheses.txt", "emissions.csv",
                 "nohup.out", "data/train.tsv", "data/train.json", "sub/credentials.json", "sub/model.safetensors"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    problem = upload_problem(folder) or ""
    # *.json, *.py and *.safetensors are a model's at the top of its folder, not in any subfolder
    assert ("not part of a model, which would be uploaded too: data/train.json, data/train.tsv, nohup.out, "
            "sub/credentials.json, sub/model.safetensors;") in problem
    assert upload_problem(folder, allow_other_files=True) is None
