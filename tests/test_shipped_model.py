"""The German->English model the repository ships (models/multi30k-de-en-cpu): it loads from a copy of its folder
alone, translates validation sentences to the outputs its evaluation recorded, carries the package's code, its card
is the reference card, and its scores are the ones the README's headline shows."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modeling.inference.translation import SHIPPED_MODEL, model_and_texts
from launch_helpers import OFFLINE_ENV, REPO_ROOT, WITHOUT_THIS_PACKAGE, load_script
from tools.figures.formats import REFERENCE_CARD, Benchmarks
from tools.figures.recipes import reference_run
from tools.shipped_model import EVALUATIONS, code_problems, relative_test_set

FOLDER = REPO_ROOT / SHIPPED_MODEL
FIRST = 5  # validation sentences translated against the recorded outputs

LOAD_ALONE = WITHOUT_THIS_PACKAGE + """
import json, sys
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, sources = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
batch = tokenizer(sources, return_tensors="pt", padding=True)
with torch.no_grad():
    generated = model.generate(**batch, num_beams=4)
print(json.dumps({"class": type(model).__name__,
                  "translations": tokenizer.batch_decode(generated, skip_special_tokens=True)}))
"""


def test_the_folder_holds_a_small_model_its_code_and_its_evaluations():
    names = {path.relative_to(FOLDER).as_posix() for path in FOLDER.rglob("*") if path.is_file()}
    assert {"config.json", "model.safetensors", "checksums.sha256", "tokenizer.json", "README.md",
            "modeling_annotated_transformer.py"} <= names
    assert {f"{evaluation}/{name}" for evaluation in EVALUATIONS for name in ("results.json", "hypotheses.txt")} <= names
    assert not any(name.startswith(("checkpoint-", "runs/")) or name.endswith((".bin", ".pt", ".pth")) for name in names)
    assert sum(path.stat().st_size for path in FOLDER.rglob("*") if path.is_file()) < 17 * 2**20
    config = json.loads((FOLDER / "config.json").read_text())
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"]) == (128, 6, 6)


def test_the_folder_s_code_is_the_package_s():
    """A change of the package's model code must reach the shipped copy (`python tools/shipped_model.py
    --refresh`), or a user of the folder alone runs other code than the tests check."""
    assert code_problems() == []


def test_the_code_check_names_a_changed_a_missing_and_a_stale_file(tmp_path):
    copy = Path(shutil.copytree(FOLDER, tmp_path / "model"))
    (copy / "modeling_annotated_transformer.py").write_text("# changed\n")
    (copy / "attention_masks.py").unlink()
    (copy / "old_module.py").write_text("")
    assert code_problems(copy) == [
        "model/attention_masks.py is missing",
        "model/old_module.py is not written by save_pretrained any more",
        "model/modeling_annotated_transformer.py differs from modeling/modeling_annotated_transformer.py",
    ]


def test_the_folder_s_card_is_the_reference_card():
    assert (FOLDER / "README.md").read_text(encoding="utf-8") == (REPO_ROOT / REFERENCE_CARD).read_text(encoding="utf-8")
    assert f"from_pretrained(\"{SHIPPED_MODEL}\"" in (FOLDER / "README.md").read_text(encoding="utf-8")


def test_the_folder_s_scores_are_the_run_the_readme_and_the_card_show():
    run = reference_run(Benchmarks(REPO_ROOT))
    assert run["model_folder"] == SHIPPED_MODEL
    for evaluation, split in zip(EVALUATIONS, ("validation", "test")):
        results = json.loads((FOLDER / evaluation / "results.json").read_text(encoding="utf-8"))
        assert results["num_beams"] == run["num_beams"]
        assert results["bleu"] == pytest.approx(run[split]["bleu"], abs=5e-3)
        assert results["chrf"] == pytest.approx(run[split]["chrf"], abs=5e-3)
        assert results["sentences"] == run[split]["sentences"]
        assert "/work/" not in json.dumps(results) and relative_test_set(results["test_set"]) == results["test_set"]


def test_a_copy_of_the_folder_alone_translates_validation_sentences_as_its_evaluation_did(multi30k_dir, tmp_path):
    """Loaded with the Auto classes in a process where this package cannot be imported, from a copy of the folder
    elsewhere: beam 4 gives the first validation sentences the translations evaluate.py recorded."""
    from modeling.data.corpus import load_parallel_corpus

    sources = load_parallel_corpus(multi30k_dir, "de", "en", splits=["validation"])["validation"]["source"][:FIRST]
    recorded = (FOLDER / "eval-validation" / "hypotheses.txt").read_text(encoding="utf-8").splitlines()[:FIRST]
    copy = shutil.copytree(FOLDER, tmp_path / "elsewhere" / "model")
    run = subprocess.run([sys.executable, "-c", LOAD_ALONE, str(copy), json.dumps(list(sources))], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **OFFLINE_ENV})
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert loaded["class"] == "AnnotatedTransformerForConditionalGeneration"
    assert loaded["translations"] == recorded


README = REPO_ROOT / "README.md"


def readme_block(after: str, language: str = "bash") -> str:
    """The README's first ```language block after the line `after`."""
    text = README.read_text(encoding="utf-8")
    return re.search(rf"```{language}\n(.*?)```", text.split(after, 1)[1], flags=re.S)[1]


def test_translate_py_without_a_model_translates_german_with_the_shipped_one_as_the_readme_shows(capsys):
    """The README's first translation: no model given, the shipped one translates; the output shown is the real one."""
    block = readme_block("## Translate German right away")
    command, shown = block.splitlines()[:2]
    sentence = shlex.split(command)[2:]
    assert shlex.split(command)[:2] == ["python", "scripts/translate.py"] and len(sentence) == 1
    load_script("translate").main(sentence)
    assert capsys.readouterr().out == shown.removeprefix("# ") + "\n"
    assert model_and_texts(["Ein Hund."], "default") == ("default", ["Ein Hund."])
    assert model_and_texts(["outputs/copy-tiny", "5 3"], "default") == ("outputs/copy-tiny", ["5 3"])
    assert model_and_texts(["you/model", "Hallo"], "default") == ("you/model", ["Hallo"])
    assert model_and_texts(["Die Hunde / Katzen."], "default") == ("default", ["Die Hunde / Katzen."])
    assert model_and_texts([], "default") == ("default", [])


def test_the_readmes_pipeline_example_prints_what_it_shows(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    block = readme_block("every saved folder carries one, which works where this package is not installed:",
                         "python")
    code, shown = block.rsplit("\n# ", 1)
    *statements, last = code.strip().splitlines()
    namespace = {}
    exec("\n".join(statements), namespace)
    assert repr(eval(last, namespace)) == shown.strip()


def test_evaluate_with_keep_card_leaves_the_shipped_folder_as_it_is(tmp_path):
    """The README's check of the headline row scores into --output_dir and, with --keep_card, changes nothing of the
    shipped folder (its card, its eval-* records)."""
    before = {path: path.read_bytes() for path in FOLDER.rglob("*") if path.is_file()}
    (tmp_path / "test.de").write_text("Ein Hund läuft über die Wiese.\nZwei Männer spielen Fußball.\n")
    (tmp_path / "test.en").write_text("A dog runs across the meadow.\nTwo men play soccer.\n")
    load_script("evaluate").main([str(FOLDER), "--source", str(tmp_path / "test.de"), "--reference",
                                  str(tmp_path / "test.en"), "--num_beams", "2", "--output_dir",
                                  str(tmp_path / "eval"), "--keep_card", "--quiet"])
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["sentences"] == 2 and 0 <= results["bleu"] <= 100
    assert {path: path.read_bytes() for path in FOLDER.rglob("*") if path.is_file()} == before
