"""scripts/evaluate.py and `modeling.inference.evaluation`: a model folder scored on a test set (files, or a corpus split)
with sacreBLEU, lowercased BLEU and chrF through the project's local `evaluate` metric modules."""

import gzip
import json
import os
import random
import re
import runpy
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from launch_helpers import assert_one_line_error
from test_translate import random_digits, save_copy_model

from modeling.inference.evaluation import (
    METRIC_NAMES,
    EvaluationSet,
    build_compute_metrics,
    check_output_dir,
    corpus_scores,
    read_test_set_files,
    stored_score,
)
from modeling.inference.model_card import corpus_id, record_evaluation
from modeling.inference.translation import single_line
from modeling.tokenization import load_tokenizers

REPO_ROOT = Path(__file__).resolve().parents[1]
EVALUATE_SCRIPT = REPO_ROOT / "scripts" / "evaluate.py"
TEST_SIZE = 12


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest (conftest)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model trained for a few seconds on the copy task (see test_translate.save_copy_model)."""
    return save_copy_model(tmp_path_factory.mktemp("evaluate") / "model")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A copy-task corpus named as Multi30k's files are: train, val and test_2016_flickr, `.de.gz` / `.en.gz`. The
    test split has an empty pair."""
    directory = tmp_path_factory.mktemp("data")
    rng = random.Random(7)
    for split, size in (("train", 6), ("val", 4), ("test_2016_flickr", TEST_SIZE)):
        lines = [random_digits(rng, 1, 10) for _ in range(size)]
        if split == "test_2016_flickr":
            lines[3] = ""
        for lang in ("de", "en"):
            with gzip.open(directory / f"{split}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(f"{line}\n" for line in lines))
    return directory


def run_script(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["evaluate.py", *map(str, argv)])
    runpy.run_path(str(EVALUATE_SCRIPT), run_name="__main__")


def test_scores_are_sacrebleu_and_chrf_with_signatures_and_lowercased_bleu():
    references = ["A dog runs in the park .", "Two men are playing football on the beach ."]
    scores, signatures = corpus_scores(references, references, lowercase_bleu=True)
    assert scores == pytest.approx({"bleu": 100.0, "chrf": 100.0, "bleu_lowercase": 100.0})
    lowercased = [reference.lower() for reference in references]
    scores, signatures = corpus_scores(lowercased, references, lowercase_bleu=True)
    assert scores["bleu"] < 100 and scores["chrf"] < 100 and scores["bleu_lowercase"] == pytest.approx(100)
    assert "case:mixed" in signatures["bleu"] and "tok:13a" in signatures["bleu"]
    assert "case:lc" in signatures["bleu_lowercase"] and "tok:13a" in signatures["bleu_lowercase"]
    assert signatures["chrf"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0")
    assert set(corpus_scores(references, references)[0]) == {"bleu", "chrf"}
    with pytest.raises(ValueError, match="1 hypotheses for 2 references"):
        corpus_scores(references[:1], references)


def test_training_metrics_keep_their_keys_and_scores(model_dir):
    tokenizer = load_tokenizers(model_dir)
    references = ["1 2 3 4 5", "6 7 8 9 0 1"]
    compute_metrics = build_compute_metrics(tokenizer, references)
    predictions = tokenizer(references, padding=True, return_tensors="np")["input_ids"]
    metrics = compute_metrics(type("EvalPrediction", (), {"predictions": predictions})())
    assert metrics == {"bleu": 100.0, "chrf": 100.0, "exact_match": 100.0, "gen_len": 6.5, "sentences": 2}
    assert tuple(metrics) == METRIC_NAMES  # what --metric_for_best_model is checked against
    assert set(compute_metrics.signatures) == {"bleu", "chrf"}


def test_training_metrics_score_the_hypotheses_evaluate_py_scores(model_dir):
    """A generated line break becomes a space in translate()'s output, which evaluate.py scores; training's scores
    took it as sacreBLEU does (13a deletes "-\n"), so the same ids scored otherwise there."""
    tokenizer = load_tokenizers(model_dir)
    references = ["a well-known fact here", "1 2 3"]
    generated = ["a well-\nknown fact here", "1 2\n3"]
    compute_metrics = build_compute_metrics(tokenizer, references)
    predictions = tokenizer(generated, padding=True, return_tensors="np")["input_ids"]
    metrics = compute_metrics(type("EvalPrediction", (), {"predictions": predictions})())
    assert compute_metrics.last_predictions == [single_line(text) for text in generated]
    as_evaluated = [single_line(text) for text in generated]
    assert metrics["bleu"] == stored_score(corpus_scores(as_evaluated, references)[0]["bleu"])
    assert metrics["bleu"] != stored_score(corpus_scores(generated, references)[0]["bleu"])


def test_a_corpus_is_named_by_its_folder_or_its_hub_id(tmp_path):
    """evaluate.py's metadata names a test set's corpus as training names it: a Hub id stays whole."""
    (tmp_path / "multi30k").mkdir()
    assert corpus_id(tmp_path / "multi30k") == corpus_id(str(tmp_path / "multi30k") + "/") == "multi30k"
    assert corpus_id(tmp_path / "moved" / "multi30k") == "multi30k"  # recorded absolute, since moved
    assert corpus_id("bentrevett/multi30k") == "bentrevett/multi30k" and corpus_id("wmt14") == "wmt14"


def test_scores_are_kept_so_that_two_places_show_as_sacrebleu_shows_them():
    for score in (38.37496, 100.00000000000004, 41.525, 0.004999):
        assert f"{stored_score(score):.2f}" == f"{score:.2f}"
    assert stored_score(100.00000000000004) == 100.0


def test_a_corpus_split_is_translated_scored_and_written_next_to_the_model(
    model_dir, data_dir, monkeypatch, capsys
):
    run_script(monkeypatch, model_dir, "--data_dir", data_dir, "--split", "test_2016_flickr", "--source_lang", "de",
               "--target_lang", "en", "--num_beams", "2", "--max_tokens", "40")
    output_dir = model_dir / "eval-test_2016_flickr"
    results = json.loads((output_dir / "results.json").read_text())
    hypotheses = (output_dir / "hypotheses.txt").read_text().split("\n")
    assert len(hypotheses) == TEST_SIZE + 1 and hypotheses[-1] == ""  # one line per source line
    assert hypotheses[3] == ""  # the empty source line
    for key in ("bleu", "bleu_lowercase", "chrf", "exact_match"):
        assert 0 <= results[key] <= 100, key
    assert results["bleu"] > 0  # the model copies some
    assert results["split"] == "test_2016_flickr" and results["test_set"]["split"] == "test"
    assert results["model"] == str(model_dir.resolve()) and results["num_beams"] == 2
    assert results["sentences"] == TEST_SIZE and results["seconds"] >= 0
    assert set(results["signatures"]) == {"bleu", "bleu_lowercase", "chrf"}
    assert "case:lc" in results["signatures"]["bleu_lowercase"]
    summary = capsys.readouterr().out.strip()
    assert summary.count("\n") == 0 and summary.startswith(f"test_2016_flickr: BLEU {results['bleu']:.2f} (")
    assert results["signatures"]["bleu"] in summary and results["signatures"]["chrf"] in summary

    assert 1 <= results["perplexity"] < 20 and f"| perplexity {results['perplexity']:.2f} |" in summary

    run_script(monkeypatch, model_dir, "--data_dir", data_dir, "--split", "test", "--source_lang", "de",
               "--num_beams", "2", "--batch_size", "3")  # the loader's name for the same split
    again = json.loads((model_dir / "eval-test" / "results.json").read_text())
    assert {k: again[k] for k in ("bleu", "chrf")} == {k: results[k] for k in ("bleu", "chrf")}
    assert results["length_penalty"] is None  # none given: the model's generate() settings'

    card = (model_dir / "README.md").read_text()  # a card made for the folder, with each evaluation once
    assert card.startswith(f"# {model_dir.name}\n") and card.count("## Evaluation: test_2016_flickr, beam 2") == 1
    section = card.split("## Evaluation: test_2016_flickr, beam 2")[1].split("## ")[0]
    assert f"| {TEST_SIZE} | {results['bleu']:.2f} | {results['chrf']:.2f} |" in section
    assert results["signatures"]["bleu"] in section and "scripts/evaluate.py" in section
    assert card.count("## Evaluation: test, beam 2") == 1


def test_files_whose_references_are_the_models_translations_score_100(model_dir, data_dir, tmp_path, monkeypatch):
    source = tmp_path / "source.de"
    source.write_bytes(gzip.decompress((data_dir / "test_2016_flickr.de.gz").read_bytes()))
    first, second = tmp_path / "first", tmp_path / "second"
    run_script(monkeypatch, model_dir, "--source", source, "--reference", source, "--output_dir", first,
               "--num_beams", "1", "--length_penalty", "0.6")  # recorded (greedy search has no use for it)
    assert json.loads((first / "results.json").read_text())["length_penalty"] == 0.6
    hypotheses = first / "hypotheses.txt"
    assert sum(len(line.split()) >= 4 for line in hypotheses.read_text().splitlines()) >= 4
    run_script(monkeypatch, model_dir, "--source", source, "--reference", hypotheses, "--output_dir", second,
               "--num_beams", "1", "--max_tokens", "15")
    results = json.loads((second / "results.json").read_text())
    assert results["bleu"] == pytest.approx(100) and results["chrf"] == pytest.approx(100)
    assert results["exact_match"] == 100 and results["test_set"]["reference_file"] == str(hypotheses)
    assert (second / "hypotheses.txt").read_text() == hypotheses.read_text()


def test_a_reference_of_another_length_is_refused_naming_both_files(model_dir, tmp_path, monkeypatch, capsys):
    source, reference = tmp_path / "source.de", tmp_path / "reference.en"
    source.write_text("1 2\n3 4\n5 6\n")
    reference.write_text("1 2\n3 4\n")
    before = sorted(model_dir.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, "--source", source, "--reference", reference)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"evaluate.py: error: --source {source} has 3 lines but --reference {reference} has 2; line N of the "
        "reference must translate line N of the source\n"
    )
    assert sorted(model_dir.iterdir()) == before and sorted(tmp_path.iterdir()) == [reference, source]


BAD_ARGUMENTS = {
    "both test sets": (["--data_dir", "{data}", "--source", "{data}/x"], "give --source/--reference or --data_dir, "
                       "not both"),
    "no test set": ([], "give --source and --reference"),
    "only a source": (["--source", "{tmp}/s.txt"], "give --source and --reference"),
    "split without data": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--split", "test"],
                           "apply to --data_dir only"),
    "missing reference": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/r.txt"], r"--reference .*r\.txt does "
                          "not exist"),
    "unknown split": (["--data_dir", "{data}", "--split", "test_2017", "--source_lang", "de"],
                      r"--split 'test_2017' not found in .*; it has \['train', 'validation', 'test'\]"),
    "beams 0": (["--data_dir", "{data}", "--num_beams", "0"], "argument --num_beams: must be >= 1, got 0"),
    "max_tokens 0": (["--data_dir", "{data}", "--max_tokens", "0"], "argument --max_tokens: must be >= 1, got 0"),
    "length penalty nan": (["--data_dir", "{data}", "--length_penalty", "nan"],
                           "argument --length_penalty: expected a finite number, got 'nan'"),
    "output is a file": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir", "{tmp}/s.txt"],
                         r"--output_dir .*s\.txt is a file"),
    "output over the source": (["--source", "{tmp}/ev/hypotheses.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                                "{tmp}/ev"], r"--output_dir .*ev: its hypotheses.txt would overwrite --source"),
    "output over the reference": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/ev/hypotheses.txt",
                                   "--output_dir", "{tmp}/ev"], r"its hypotheses.txt would overwrite --reference"),
    "hypotheses file is a folder": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                                     "{tmp}/od"], r"--output_dir's .*od/hypotheses\.txt is a directory"),
    "output inside a file": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                              "{tmp}/s.txt/scores"], r"--output_dir .*scores cannot be made: .*s\.txt is a file"),
    "output is a dangling link": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                                   "{tmp}/dangling"], r"--output_dir .*dangling is a link to .*nowhere, which does "
                                  "not exist"),
    "output cannot be made": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                               "/proc/evaluate-scores"], "--output_dir /proc/evaluate-scores cannot be made: "),
    "hypotheses is a fifo": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir", "{tmp}/fifo"],
                             r"--output_dir's .*fifo/hypotheses\.txt cannot be written: No such device"),
    "hypotheses is a dangling link": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                                       "{tmp}/links"], r"--output_dir's .*links/hypotheses\.txt is a link to "
                                      r".*gone\.txt, which does not exist"),
    "scores of another test set": (["--source", "{tmp}/s.txt", "--reference", "{tmp}/s.txt", "--output_dir",
                                    "{tmp}/old"], r"old holds the scores of another test set named 's\.txt' "
                                   r"\(source_file /elsewhere/s\.txt, .*\); give this one its own --output_dir"),
}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_fail_in_one_line_before_loading_the_model(case, model_dir, data_dir, tmp_path, monkeypatch,
                                                                  capsys):
    (tmp_path / "s.txt").write_text("1 2\n")
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "hypotheses.txt").write_text("3 4\n")
    (tmp_path / "od" / "hypotheses.txt").mkdir(parents=True)
    (tmp_path / "old").mkdir()
    elsewhere = {"source_file": "/elsewhere/s.txt", "reference_file": "/elsewhere/s.txt"}
    (tmp_path / "old" / "results.json").write_text(json.dumps({"bleu": 12.5, "test_set": elsewhere}))
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "hypotheses.txt")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "hypotheses.txt").symlink_to(tmp_path / "gone.txt")
    argv, message = BAD_ARGUMENTS[case]
    argv = [arg.format(tmp=tmp_path, data=data_dir) for arg in argv]

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr("modeling.inference.evaluation.load_translation_model", must_not_load)
    before = sorted(model_dir.rglob("*")) + sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, *argv)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert_one_line_error(stderr, "evaluate.py", message)
    assert sorted(model_dir.rglob("*")) + sorted(tmp_path.rglob("*")) == before  # nothing written


def test_test_sets_are_recorded_with_absolute_paths_so_other_folders_tell_them_apart(tmp_path, monkeypatch):
    """`s.txt` typed in folder a and in folder b are other files: b's scores do not replace a's; a's, typed as
    a/s.txt from their parent, do."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "s.txt").write_text(f"{folder}\n")
    scores = tmp_path / "scores"
    scores.mkdir()
    monkeypatch.chdir(tmp_path / "a")
    (scores / "results.json").write_text(json.dumps({"test_set": read_test_set_files("s.txt", "s.txt").origin}))
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ValueError, match="holds the scores of another test set named 's.txt'"):
        check_output_dir(scores, read_test_set_files("s.txt", "s.txt"))
    monkeypatch.chdir(tmp_path)
    check_output_dir(scores, read_test_set_files("a/s.txt", "a/s.txt"))


def test_an_earlier_evaluation_of_the_same_test_set_may_be_replaced(tmp_path, monkeypatch):
    """The same files (named relatively or absolutely) or the same corpus split: the folder takes the new scores."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.txt").write_text("1 2\n")
    folder = tmp_path / "eval-s.txt"
    folder.mkdir()
    earlier = {"source_file": str(tmp_path / "s.txt"), "reference_file": str(tmp_path / "s.txt")}
    (folder / "results.json").write_text(json.dumps({"test_set": earlier}))
    check_output_dir(folder, read_test_set_files(Path("s.txt"), Path("s.txt")))
    split = {"data_dir": "corpus", "split": "test", "source_lang": "de", "target_lang": "en"}
    (folder / "results.json").write_text(json.dumps({"test_set": split}))
    check_output_dir(folder, EvaluationSet("test", ["1"], ["1"], dict(split, data_dir=str(tmp_path / "corpus"))))
    with pytest.raises(ValueError, match="another test set"):
        check_output_dir(folder, EvaluationSet("test", ["1"], ["1"], dict(split, target_lang="fr")))


@pytest.mark.parametrize("card, unwritable, message", [
    (b"# model\n\nd\xe9j\xe0 vu\n", None, r"model/README\.md is not valid UTF-8 .*the scores cannot be added to it"),
    # metadata that is not YAML: a yaml ParserError traceback once the whole test set was translated
    (b"---\nlicense: [apache-2.0\n---\n# model\n", None, r"model/README\.md: its metadata .* is not valid YAML"),
    # a card on a read-only file system (os.access honours it for root too): an error after translating
    (b"# model\n", "README.md", r"model/README\.md is not writable: the scores cannot be added to it"),
    # a writable card in a folder that takes no new file: the card is replaced through one
    (b"# model\n", "folder", r"model is not writable \(Permission denied\): the scores cannot be written into its card"),
])
def test_a_model_card_the_scores_cannot_go_into_is_named_before_anything_is_translated(
        model_dir, tmp_path, monkeypatch, capsys, card, unwritable, message):
    changed = tmp_path / "model"
    shutil.copytree(model_dir, changed)
    (changed / "README.md").write_bytes(card)
    before = sorted(changed.rglob("*"))
    monkeypatch.setattr("modeling.inference.evaluation.load_translation_model", lambda *args, **kwargs: 1 / 0)
    if unwritable == "folder":
        def no_new_file(*args, **kwargs):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(tempfile, "TemporaryFile", no_new_file)
    elif unwritable is not None:
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, *args, **kwargs: not (
            Path(path).name == unwritable and mode & os.W_OK) and access(path, mode, *args, **kwargs))
    (tmp_path / "s.txt").write_text("1 2\n")
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, changed, "--source", tmp_path / "s.txt", "--reference", tmp_path / "s.txt",
                   "--output_dir", tmp_path / "elsewhere")
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "evaluate.py", message)
    assert sorted(changed.rglob("*")) == before and not (tmp_path / "elsewhere").exists()


SCORES = {"split": "validation", "num_beams": 4, "sentences": 4, "bleu": 12.5, "chrf": 30.0, "bleu_lowercase": 13.0,
          "exact_match": 0.0,
          "signatures": {"bleu": "nrefs:1|case:mixed", "chrf": "nrefs:1|nc:6", "bleu_lowercase": "nrefs:1|case:lc"}}


def test_scores_written_into_a_card_stopped_midway_leave_the_earlier_card_whole(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    card = model / "README.md"
    card.write_text("# model\n\nTrained on 2 cores for 25 minutes.\n", encoding="utf-8")
    before = card.read_bytes()
    write_text = Path.write_text

    def stopped_midway(path, data, *args, **kwargs):  # half the text reaches the disk, then Ctrl-C (or a time limit)
        write_text(path, data[: len(data) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", stopped_midway)
    with pytest.raises(KeyboardInterrupt):
        record_evaluation(model, SCORES, "evaluate.py model")
    assert card.read_bytes() == before and [path.name for path in model.iterdir()] == ["README.md"]

    monkeypatch.setattr(Path, "write_text", write_text)
    record_evaluation(model, SCORES, "evaluate.py model")  # the same call, not stopped: the scores land
    text = card.read_text(encoding="utf-8")
    assert "Trained on 2 cores for 25 minutes." in text and "## Evaluation: validation, beam 4" in text
    assert "| 4 | 12.50 | 30.00 |" in text and [path.name for path in model.iterdir()] == ["README.md"]


def test_scores_go_into_the_file_a_linked_card_names_and_keep_its_permissions(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "card.md").write_text("# model\n", encoding="utf-8")
    (model / "card.md").chmod(0o640)
    (model / "README.md").symlink_to("card.md")
    record_evaluation(model, SCORES, "evaluate.py model")
    assert (model / "README.md").is_symlink() and "| 4 | 12.50 | 30.00 |" in (model / "card.md").read_text()
    assert stat.S_IMODE((model / "card.md").stat().st_mode) == 0o640
    assert sorted(path.name for path in model.iterdir()) == ["README.md", "card.md"]


def test_a_tsv_split_is_found_by_its_file_name(tmp_path):
    from modeling.inference.evaluation import read_test_set_split

    for split in ("train", "valid", "test_2017"):
        (tmp_path / f"{split}.tsv").write_text(f"{split} eins\t{split} one\n")
    test_set = read_test_set_split(tmp_path, "test_2017")  # the corpus's only test split, "test"
    assert (test_set.name, test_set.origin["split"], test_set.sources) == ("test_2017", "test", ["test_2017 eins"])
    assert read_test_set_split(tmp_path, "valid").references == ["valid one"]


def test_a_split_named_by_its_files_must_have_the_language_pair(model_dir, data_dir, tmp_path, monkeypatch, capsys):
    """Another language's test file must not stand for the corpus's test split (test_2016_flickr here)."""
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    with gzip.open(data / "test_2017_flickr.fr.gz", "wt", encoding="utf-8") as handle:
        handle.write("1 2\n")
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, "--data_dir", data, "--split", "test_2017_flickr", "--source_lang", "de",
                   "--target_lang", "en", "--output_dir", tmp_path / "out")
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "evaluate.py", r"--split 'test_2017_flickr' in .*data has files for "
                          r"\['fr'\] only, not a de-en pair")
    assert not (tmp_path / "out").exists()


def test_the_command_line_runs_with_the_evaluate_library_despite_its_name(model_dir, tmp_path):
    """`python scripts/evaluate.py` puts scripts/ first on the import path, where this script would shadow the
    `evaluate` library; the real exit status and one-line error of a length mismatch, in a subprocess."""
    source, reference = tmp_path / "source.de", tmp_path / "reference.en"
    source.write_text("1 2\n3 4\n")
    reference.write_text("1 2\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.getenv("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(EVALUATE_SCRIPT), str(model_dir), "--source", str(source), "--reference",
         str(reference)], capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"evaluate.py: error: --source {source} has 2 lines but --reference {reference} has 1; line N of the "
        "reference must translate line N of the source\n"
    )


@pytest.mark.parametrize("script", ["translate.py", "evaluate.py"])
def test_weights_changed_on_disk_are_named_in_a_warning_and_the_script_goes_on(
    script, model_dir, tmp_path, monkeypatch, capsys, caplog
):
    changed = tmp_path / "model"
    shutil.copytree(model_dir, changed)
    weights = bytearray((changed / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of one weight
    (changed / "model.safetensors").write_bytes(bytes(weights))
    source = tmp_path / "s.txt"
    source.write_text("1 2\n")
    arguments = {"translate.py": ["--input", source, "--output", tmp_path / "out.txt"],
                 "evaluate.py": ["--source", source, "--reference", source]}[script]
    monkeypatch.setattr(sys, "argv", [script, *map(str, [changed, *arguments])])
    with caplog.at_level("WARNING"):
        runpy.run_path(str(REPO_ROOT / "scripts" / script), run_name="__main__")
    assert f"{changed / 'model.safetensors'} does not match its SHA-256" in caplog.text
    assert script == "evaluate.py" or (tmp_path / "out.txt").read_text().count("\n") == 1


def test_model_files_that_load_but_do_not_fit_are_named_without_a_traceback(model_dir, tmp_path, monkeypatch, capsys):
    """Valid JSON with a wrong size (weights of other shapes), a wrong type in generation_config.json, a truncated
    tokenizer.json: each ends in one error line naming the files, after transformers' own loading report if any."""
    cases = {
        "config.json": (lambda config: {**config, "d_model": config["d_model"] * 2},
                        r"its weights do not have the shapes its config\.json describes .*was config\.json edited\?"),
        "generation_config.json": (lambda config: {**config, "max_new_tokens": "abc"},
                                   r"generation_config\.json holds a value generate\(\) cannot use: max_new_tokens "
                                   r"must be an integer, got 'abc'"),
        "tokenizer.json": (None, r"its tokenizer files \(tokenizer\.json, tokenizer_config\.json\) cannot be read"),
        # JSON of another shape: transformers' KeyError 'added_tokens' and AttributeError tracebacks before
        "tokenizer.json/other shape": (lambda tokenizer: {"a": 1}, r"tokenizer\.json is not the tokenizer \(a JSON "
                                       r"object with 'model' and 'added_tokens'\): the file is corrupt"),
        "tokenizer_config.json/other shape": (lambda config: [1], r"tokenizer_config\.json is not the tokenizer's "
                                              r"special tokens and class \(a JSON object\): the file is corrupt"),
    }
    for case, (change, message) in cases.items():
        name = case.split("/")[0]
        changed = tmp_path / case.replace("/", "-").replace(" ", "-")
        shutil.copytree(model_dir, changed)
        text = (model_dir / name).read_text()
        (changed / name).write_text(json.dumps(change(json.loads(text))) if change else text[: len(text) // 2])
        monkeypatch.setattr(sys, "argv", ["translate.py", str(changed), "1 2"])
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(str(REPO_ROOT / "scripts" / "translate.py"), run_name="__main__")
        stderr = capsys.readouterr().err
        assert exit_info.value.code == 2 and "Traceback" not in stderr, stderr
        last_line = stderr.splitlines()[-1]
        assert last_line.startswith("translate.py: error: ") and re.search(message, last_line), (name, stderr)


@pytest.mark.parametrize("setting, value, kind", [
    ("num_beams", "x", "an integer"), ("num_beams", 2.5, "an integer"), ("max_new_tokens", 1.5, "an integer"),
    ("num_beams", True, "an integer"), ("length_penalty", "x", "a number"),
    ("eos_token_id", "x", "a token id or a list of them"), ("eos_token_id", [2, "x"], "a token id or a list of them"),
])
def test_a_generation_setting_of_the_wrong_type_is_named_in_one_line(setting, value, kind, model_dir, tmp_path,
                                                                      monkeypatch, capsys):
    """transformers loads these unchecked; generate() would end in a bare TypeError or use a fraction as it is."""
    changed = tmp_path / "model"
    shutil.copytree(model_dir, changed)
    saved = json.loads((model_dir / "generation_config.json").read_text())
    (changed / "generation_config.json").write_text(json.dumps({**saved, setting: value}))
    (tmp_path / "earlier.txt").write_text("kept\n")
    monkeypatch.setattr(sys, "argv", ["translate.py", str(changed), "1 2", "--num_beams", "2", "--output",
                                      str(tmp_path / "earlier.txt")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "scripts" / "translate.py"), run_name="__main__")
    assert exit_info.value.code == 2
    message = f"generation_config.json holds a value generate() cannot use: {setting} must be {kind}, got {value!r}"
    assert_one_line_error(capsys.readouterr().err, "translate.py", re.escape(message))
    assert (tmp_path / "earlier.txt").read_text() == "kept\n"


@pytest.mark.parametrize("config, message", [
    ("[1, 2]", r"config\.json is not a JSON object of configuration values: the file is corrupt"),
    ("generation: {", r"generation_config\.json is not a JSON object of configuration values: the file is corrupt"),
    ('{"model_type": "annotated-transformer", "d_model": "abc"}',
     r"its config\.json does not describe a valid model: Field 'd_model' expected int, got str"),
])
def test_a_corrupt_config_is_named_in_one_line(config, message, model_dir, tmp_path, monkeypatch, capsys):
    changed = tmp_path / "model"
    shutil.copytree(model_dir, changed)
    name = "config.json"
    if config.startswith("{"):  # the saved config with one bad value
        config = json.dumps({**json.loads((model_dir / "config.json").read_text()), **json.loads(config)})
    elif config.startswith("generation: "):
        name, config = "generation_config.json", config.removeprefix("generation: ")
    (changed / name).write_text(config)
    monkeypatch.setattr(sys, "argv", ["translate.py", str(changed), "1 2"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "scripts" / "translate.py"), run_name="__main__")
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "translate.py", message)


def test_perplexity_is_the_mean_token_likelihood_of_the_references_whatever_the_batches(model_dir):
    """exp(summed negative log-likelihood / target tokens, </s> included), each pair scored alone here: the same
    figure from length-sorted padded batches of any size; a trained copy model is near 1 on its own task, higher on
    references it would not write."""
    import math

    import torch

    from modeling.inference.translation import corpus_perplexity, load_translation_model

    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device="cpu")
    rng = random.Random(3)
    sources = [random_digits(rng, 2, 9) for _ in range(9)]
    total, tokens = 0.0, 0
    with torch.no_grad():
        for source in sources:
            labels = torch.tensor([target_tokenizer(source)["input_ids"]])
            logits = model(input_ids=torch.tensor([tokenizer(source)["input_ids"]]),
                           decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels)).logits
            total -= torch.log_softmax(logits, -1)[0].gather(-1, labels[0][:, None]).sum().item()
            tokens += labels.shape[1]
    expected = math.exp(total / tokens)
    for max_tokens in (12, 30, 4096):
        assert corpus_perplexity(sources, sources, model, tokenizer, target_tokenizer, max_tokens=max_tokens) == \
            pytest.approx(expected, rel=1e-5)
    reversed_references = [" ".join(reversed(source.split())) for source in sources]
    assert expected < 2 < corpus_perplexity(sources, reversed_references, model, tokenizer, target_tokenizer)
