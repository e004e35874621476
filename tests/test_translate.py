"""scripts/translate.py and `modeling.inference.translation`: a saved model folder translates through the Auto classes, in
length-sorted batches whose output equals one-by-one translation, and bad arguments fail before the model loads."""

import io
import json
import logging
import os
import random
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch_helpers import assert_one_line_error

import modeling.inference.ctranslate2_export  # noqa: F401  (bound to `modeling.inference.translation` before tests patch it)
from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling.inference.translation import length_sorted_batches, load_translation_model, translate
from modeling.tokenization import train_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
TRANSLATE_SCRIPT = REPO_ROOT / "scripts" / "translate.py"
SOURCES = ["3 1 4 1 5", "9 2 6", "5 3 5 8 9 7 9 3"]
POSITIONS = 32  # the test model's max_position_embeddings


def random_digits(rng: random.Random, min_length: int, max_length: int) -> str:
    return " ".join(str(rng.randrange(10)) for _ in range(rng.randint(min_length, max_length)))


def save_copy_model(directory: Path, steps: int = 200, seed: int = 0) -> Path:
    """A folder as scripts/train.py writes it (model with custom code, generation config, tokenizer) holding a tiny
    model trained by hand for `steps` Adam steps on the copy task (~5 s): its outputs follow its inputs, mostly
    copying sequences of up to 10 digits. Each digit is one token."""
    tokenizer = train_tokenizer([" ".join(str(i) for i in range(10))] * 20, vocab_size=270)
    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=POSITIONS, dropout=0.0, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    rng = random.Random(seed)
    for _ in range(steps):
        texts = [random_digits(rng, 1, 10) for _ in range(32)]
        batch = tokenizer(texts, text_target=texts, padding=True, return_tensors="pt")
        batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.generation_config.max_length = 12
    model.generation_config.num_beams = 2
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest (conftest)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_copy_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def loaded(model_dir):
    model, tokenizer, _ = load_translation_model(model_dir, device="cpu")
    return model, tokenizer


def run_script(monkeypatch, *argv, stdin: str | None = None):
    monkeypatch.setattr(sys, "argv", ["translate.py", *map(str, argv)])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    runpy.run_path(str(TRANSLATE_SCRIPT), run_name="__main__")


# ---- the library -----------------------------------------------------------------------------------------------------


def test_translations_are_the_models_generations_in_input_order(model_dir):
    model, tokenizer, target_tokenizer = load_translation_model(model_dir, device="cpu")
    assert type(model).__name__ == "AnnotatedTransformerForConditionalGeneration"
    batched = translate(SOURCES, model, tokenizer, target_tokenizer, num_beams=3, batch_size=2)
    assert len(batched) == len(SOURCES)
    for source, translation in zip(SOURCES, batched):
        generated = model.generate(**tokenizer([source], return_tensors="pt"), num_beams=3)
        assert translation == tokenizer.decode(generated[0], skip_special_tokens=True).strip()
    assert translate(SOURCES, model, tokenizer, batch_size=1, num_beams=3) == batched
    assert batched[1] == "9 2 6"  # the model copies


def test_generation_options_reach_generate(loaded):
    model, tokenizer = loaded
    short = translate(SOURCES[:1], model, tokenizer, max_new_tokens=2, num_beams=1)
    generated = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), max_new_tokens=2, num_beams=1)
    assert generated.shape[1] <= 3  # the decoder start token and at most 2 new tokens
    assert short == [tokenizer.decode(generated[0], skip_special_tokens=True).strip()]
    default = translate(SOURCES, model, tokenizer)  # the folder's generation config: 2 beams, max_length 12
    expected = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), num_beams=2, max_length=12)
    assert default[0] == tokenizer.decode(expected[0], skip_special_tokens=True).strip()


def test_one_translation_per_text_whatever_the_generation_config_asks(loaded, model_dir, tmp_path):
    """A saved generation config with num_return_sequences 2 (or return_dict_in_generate) gave line 1's second beam
    to line 2, and so on, dropping the last line; a single string was translated character by character."""
    model, tokenizer = loaded
    expected = translate(SOURCES, model, tokenizer, num_beams=2)
    changed = tmp_path / "model"
    shutil.copytree(model_dir, changed)
    saved = json.loads((model_dir / "generation_config.json").read_text())
    (changed / "generation_config.json").write_text(json.dumps(
        {**saved, "num_beams": 2, "num_return_sequences": 2, "return_dict_in_generate": True}))
    asking_two, changed_tokenizer, _ = load_translation_model(changed, device="cpu")
    assert asking_two.generation_config.num_return_sequences == 2
    assert translate(SOURCES, asking_two, changed_tokenizer) == expected
    with pytest.raises(ValueError, match=r"num_return_sequences=2: translate\(\) gives one translation per text"):
        translate(SOURCES, model, tokenizer, num_beams=2, num_return_sequences=2)
    with pytest.raises(TypeError, match=r"takes a list of texts; a single string would be translated character"):
        translate(SOURCES[0], model, tokenizer)


def test_length_sorted_batches_respect_both_caps_and_cover_each_sentence_once():
    lengths = [5, 1, 9, 5, 3, 9, 2, 7, 1, 4]
    batches = length_sorted_batches(lengths, batch_size=3, max_tokens=20)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    order = [i for batch in batches for i in batch]
    assert order == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))  # by length, ties in input order
    assert all(len(batch) <= 3 and len(batch) * max(lengths[i] for i in batch) <= 20 for batch in batches)
    assert [len(b) for b in length_sorted_batches(lengths, max_tokens=20)] == [5, 2, 2, 1]
    assert [len(b) for b in length_sorted_batches(lengths, batch_size=4)] == [4, 4, 2]
    assert [len(b) for b in length_sorted_batches(lengths)] == [10]  # DEFAULT_BATCH_SIZE
    with pytest.raises(ValueError, match="max_tokens=8 is less than the longest sentence's 9 tokens"):
        length_sorted_batches(lengths, max_tokens=8)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        length_sorted_batches(lengths, batch_size=0)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_length_sorted_batches_translate_exactly_as_one_by_one(loaded, num_beams):
    """Padding to the batch's longest source changes nothing: the masks hide the pads exactly (fp32, CPU)."""
    model, tokenizer = loaded
    rng = random.Random(1)
    texts = [random_digits(rng, 1, 25) for _ in range(16)]
    one_by_one = translate(texts, model, tokenizer, num_beams=num_beams, batch_size=1, max_new_tokens=30)
    assert len(set(one_by_one)) == len(texts)  # the outputs differ, so a mix-up would show
    for caps in ({"batch_size": 4}, {"max_tokens": 60}, {"batch_size": 16}):
        batched = translate(texts, model, tokenizer, num_beams=num_beams, max_new_tokens=30, **caps)
        assert batched == one_by_one, caps


def test_empty_lines_stay_empty_and_never_reach_the_model(loaded, monkeypatch):
    model, tokenizer = loaded
    sent = []
    generate = model.generate

    def recording_generate(**inputs):
        sent.extend(tokenizer.batch_decode(inputs["input_ids"], skip_special_tokens=True))
        return generate(**inputs)

    monkeypatch.setattr(model, "generate", recording_generate)
    texts = ["", "1 2 3", "   ", "\t", "4 5"]
    translations = translate(texts, model, tokenizer, num_beams=1)
    assert translations[0] == translations[2] == translations[3] == ""
    assert translations[1] == "1 2 3" and translations[4] == "4 5"
    assert sorted(sent) == ["1 2 3", "4 5"]
    assert translate(["", " "], model, tokenizer) == ["", ""] and translate([], model, tokenizer) == []
    assert len(sent) == 2  # nothing more was generated


def test_a_line_longer_than_the_positions_is_truncated_with_a_warning_naming_it(loaded, caplog):
    model, tokenizer = loaded
    long_line = " ".join(str(i % 10) for i in range(40))  # 40 digit tokens + </s> > 32 positions
    texts = ["1 2", "", long_line]
    with caplog.at_level(logging.WARNING, logger="modeling.inference.translation"):
        translations = translate(texts, model, tokenizer, num_beams=1, max_new_tokens=5)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith("line 3: 41 tokens") and "32 positions" in warnings[0]
    first_31 = " ".join(long_line.split()[: POSITIONS - 1])
    assert translations[2] == translate([first_31], model, tokenizer, num_beams=1, max_new_tokens=5)[0]


def test_max_new_tokens_beyond_the_decoder_positions_is_capped(loaded, caplog):
    model, tokenizer = loaded
    with caplog.at_level(logging.WARNING, logger="modeling.inference.translation"):
        capped = translate(SOURCES, model, tokenizer, num_beams=1, max_new_tokens=1000)
    assert "generating at most 31" in caplog.text
    assert capped == translate(SOURCES, model, tokenizer, num_beams=1, max_new_tokens=31)


# ---- the script ------------------------------------------------------------------------------------------------------


def test_script_translates_arguments_files_and_stdin(model_dir, loaded, tmp_path, monkeypatch, capsys):
    model, tokenizer = loaded
    expected = translate(SOURCES, model, tokenizer, num_beams=2)

    run_script(monkeypatch, model_dir, *SOURCES, "--num_beams", "2")
    assert capsys.readouterr().out.splitlines() == expected
    run_script(monkeypatch, model_dir, "--num_beams", "2", *SOURCES[:1], "--max_tokens", "20", *SOURCES[1:])
    assert capsys.readouterr().out.splitlines() == expected  # options before, between and after the sentences

    source_file, output_file = tmp_path / "source.txt", tmp_path / "hypotheses.txt"
    source_file.write_text("\n".join([SOURCES[0], "", *SOURCES[1:], "  "]) + "\n")
    run_script(monkeypatch, model_dir, "--input", source_file, "--output", output_file, "--num_beams", "2",
               "--max_tokens", "20")
    assert output_file.read_text().split("\n") == [expected[0], "", *expected[1:], "", ""]

    run_script(monkeypatch, model_dir, "--num_beams", "2", "--batch_size", "2", stdin="\n".join(SOURCES))
    assert capsys.readouterr().out.splitlines() == expected
    run_script(monkeypatch, model_dir, "--num_beams", "2", stdin="\ufeff" + "\n".join(SOURCES))  # a PowerShell pipe
    assert capsys.readouterr().out.splitlines() == expected
    run_script(monkeypatch, model_dir, *SOURCES, "--output", "/dev/null")  # a device is written to as it is
    assert capsys.readouterr().out == ""


def without(model_dir: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / f"no-{name}"
    shutil.copytree(model_dir, copy)
    (copy / name).unlink()
    return copy


BAD_ARGUMENTS = {
    "beams 0": (["--num_beams", "0", "1 2"], "argument --num_beams: must be >= 1, got 0"),
    "beams -1": (["--num_beams", "-1", "1 2"], "argument --num_beams: must be >= 1, got -1"),
    "beams x": (["--num_beams", "x", "1 2"], "argument --num_beams: expected an integer >= 1, got 'x'"),
    "batch_size 0": (["--batch_size", "0", "1 2"], "argument --batch_size: must be >= 1, got 0"),
    "max_tokens 0": (["--max_tokens", "0", "1 2"], "argument --max_tokens: must be >= 1, got 0"),
    "max_new_tokens 0": (["--max_new_tokens", "0", "1 2"], "argument --max_new_tokens: must be >= 1, got 0"),
    "not UTF-8": (["--input", "{latin1}"], r"latin1\.txt: line 2 is not valid UTF-8"),
    "missing input": (["--input", "{tmp}/missing.txt"], r"--input .*missing\.txt does not exist"),
    "output is a folder": (["1 2", "--output", "{tmp}"], r"--output .* is a directory"),
    "output folder missing": (["1 2", "--output", "{tmp}/nowhere/out.txt"], r"the folder .*nowhere does not exist"),
    "output is the input": (["--input", "{latin1}", "--output", "{tmp}/./latin1.txt"],
                            r"--output .*latin1\.txt is the --input file: its sentences would be overwritten"),
    "output is a hard link to the input": (["--input", "{latin1}", "--output", "{tmp}/hard-link.txt"],
                                           r"--output .*hard-link\.txt is the --input file"),
    "no weights": (["1 2"], r"no-model\.safetensors holds no weights \(model\.safetensors or"),
    "no tokenizer": (["1 2"], r"no-tokenizer\.json holds no tokenizer\.json"),
    "no tokenizer config": (["1 2"], r"no-tokenizer_config\.json holds no tokenizer_config\.json \(the tokenizer's"),
    "no config": (["1 2"], r"no-config\.json holds no config\.json"),
    "both sources": (["1 2", "--input", "{latin1}"], "give sentences as arguments or --input, not both"),
    "bad device": (["1 2", "--device", "tpu9"], "device 'tpu9' is not a torch device"),
    "unknown engine": (["1 2", "--engine", "onnx"], r"argument --engine: invalid choice: 'onnx' \(choose from"),
    "quantization with pytorch": (["1 2", "--quantization", "int8"],
                                  "--quantization is a CTranslate2 compute type: it needs --engine ctranslate2"),
    "max_tokens with ctranslate2": (["1 2", "--engine", "ctranslate2", "--max_tokens", "9"],
                                    "--max_tokens is not supported with --engine ctranslate2: cap sentences per batch"),
    "ctranslate2 on a PyTorch folder": (["1 2", "--engine", "ctranslate2"],
                                        r"holds a PyTorch model, not a CTranslate2 one \(model\.bin\): "
                                        r"export it with scripts/export_ctranslate2\.py .*model\d* OUTPUT_DIR"),
}
if Path("/proc").is_dir():  # a folder that takes no new files, even for root
    BAD_ARGUMENTS["output cannot be written"] = (["1 2", "--output", "/proc/out.txt"],
                                                  r"--output /proc/out\.txt cannot be written: ")
BROKEN_FOLDERS = {"no weights": "model.safetensors", "no tokenizer": "tokenizer.json", "no config": "config.json",
                  "no tokenizer config": "tokenizer_config.json"}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_fail_in_one_line_with_status_2_before_loading_and_write_nothing(
    case, model_dir, tmp_path, monkeypatch, capsys
):
    argv, message = BAD_ARGUMENTS[case]
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("1 2\nGrüße\n".encode("latin-1"))
    os.link(latin1, tmp_path / "hard-link.txt")
    argv = [arg.format(tmp=tmp_path, latin1=latin1) for arg in argv]
    folder = without(model_dir, tmp_path, BROKEN_FOLDERS[case]) if case in BROKEN_FOLDERS else model_dir
    output = tmp_path / "out.txt"
    if "--output" not in argv:
        argv += ["--output", str(output)]

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr("modeling.inference.translation.load_translation_model", must_not_load)
    monkeypatch.setattr("modeling.inference.translation.translate_ctranslate2", must_not_load)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, folder, *argv)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert_one_line_error(stderr, "translate.py", message)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_max_tokens_below_the_longest_sentence_fails_after_loading_and_writes_nothing(
    model_dir, tmp_path, monkeypatch, capsys
):
    output = tmp_path / "out.txt"
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, "1 2 3 4 5", "--max_tokens", "3", "--output", output)
    assert exit_info.value.code == 2
    assert "translate.py: error: max_tokens=3 is less than the longest sentence's 6 tokens" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.slow  # several fresh interpreters (40 s); CI runs -m slow
def test_command_line_errors_and_warnings_in_a_subprocess(model_dir, tmp_path):
    """The real exit status and standard error: a one-line error (argparse's own are in BAD_ARGUMENTS, in this
    process); a truncation warning naming the line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.getenv("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    output = tmp_path / "out.txt"
    # Bytes that are not UTF-8, on standard input and as an argument (Python's C.UTF-8 locale passes both on).
    for argv, stdin, message in (([], b"1 2\n3 \xff\n", "standard input is not valid UTF-8 (invalid start byte at "
                                                        "byte 6)"),
                                 ([b"1 2\xff"], b"", "sentence is not valid UTF-8")):
        bad = subprocess.run([sys.executable, str(TRANSLATE_SCRIPT), str(model_dir), *argv, "--output", str(output)],
                             input=stdin, capture_output=True, env={**env, "LC_ALL": "C.UTF-8"}, timeout=300)
        assert bad.returncode == 2 and not output.exists()
        assert bad.stderr.decode() == f"translate.py: error: {message}\n"

    source = tmp_path / "source.txt"
    source.write_text("1 2\n\n" + " ".join(["7"] * 40) + "\n")
    good = subprocess.run([sys.executable, str(TRANSLATE_SCRIPT), str(model_dir), "--input", str(source),
                           "--output", str(output), "--num_beams", "1"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert good.returncode == 0, good.stderr
    assert "translate.py: warning: line 3: 41 tokens" in good.stderr
    assert "Translating" not in good.stderr  # no progress bar when standard error is not a terminal
    lines = output.read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""


# ---- --engine ctranslate2 --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ct2_dir(model_dir, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from modeling.inference.ctranslate2_export import export_ctranslate2

    return export_ctranslate2(model_dir, tmp_path_factory.mktemp("ct2") / "model")


def test_ctranslate2_engine_gives_the_pytorch_engines_greedy_translations(
    model_dir, ct2_dir, loaded, tmp_path, monkeypatch, capsys
):
    """Greedy CTranslate2 decoding is exact (see test_export_ctranslate2): the same lines from a file, arguments and
    standard input, empty lines kept, in input order."""
    rng = random.Random(2)
    lines = [SOURCES[0], "", *[random_digits(rng, 1, 12) for _ in range(8)], "  ", SOURCES[2]]
    source_file = tmp_path / "source.txt"
    source_file.write_text("\n".join(lines) + "\n")
    outputs = {engine: tmp_path / f"{engine}.txt" for engine in ("pytorch", "ctranslate2")}
    run_script(monkeypatch, model_dir, "--input", source_file, "--output", outputs["pytorch"], "--num_beams", "1")
    run_script(monkeypatch, ct2_dir, "--engine", "ctranslate2", "--input", source_file, "--output",
               outputs["ctranslate2"], "--num_beams", "1", "--batch_size", "3", "--device", "cpu")
    expected = outputs["pytorch"].read_text().splitlines()
    assert outputs["ctranslate2"].read_text().splitlines() == expected
    assert len(expected) == len(lines) and expected[1] == expected[-2] == "" and len(set(expected)) > 5

    model, tokenizer = loaded
    greedy = translate(SOURCES, model, tokenizer, num_beams=1)
    run_script(monkeypatch, ct2_dir, *SOURCES, "--engine", "ctranslate2", "--num_beams", "1")
    assert capsys.readouterr().out.splitlines() == greedy
    run_script(monkeypatch, ct2_dir, "--engine", "ctranslate2", "--num_beams", "1", stdin="\n".join(SOURCES) + "\n")
    assert capsys.readouterr().out.splitlines() == greedy


def test_ctranslate2_quantization_int8_gives_one_line_per_line(ct2_dir, tmp_path, monkeypatch):
    source_file, output_file = tmp_path / "source.txt", tmp_path / "out.txt"
    source_file.write_text("\n".join([SOURCES[0], "", SOURCES[1], SOURCES[2]]) + "\n")
    run_script(monkeypatch, ct2_dir, "--engine", "ctranslate2", "--quantization", "int8", "--input", source_file,
               "--output", output_file, "--device", "cpu")
    lines = output_file.read_text().split("\n")
    assert len(lines) == 5 and lines[1] == "" and lines[4] == ""  # 4 lines and the final newline
    assert all(lines[i].strip() for i in (0, 2, 3))


def fail_in_one_line(monkeypatch, capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, *argv)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert_one_line_error(stderr, "translate.py", "")
    return stderr


def test_ctranslate2_checks_before_loading(model_dir, tmp_path, monkeypatch, capsys):
    """Without the package: the pip command; a compute type CTranslate2 does not have: the ones it has."""
    fake = tmp_path / "ct2"  # passes the folder check: a model.bin and a tokenizer
    shutil.copytree(model_dir, fake)
    (fake / "model.bin").write_bytes(b"")

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr("modeling.inference.translation.translate_ctranslate2", must_not_load)
    monkeypatch.setattr("modeling.inference.ctranslate2_runtime.ctranslate2", None)
    stderr = fail_in_one_line(monkeypatch, capsys, fake, "1 2", "--engine", "ctranslate2")
    assert "CTranslate2 is not installed: pip install ctranslate2" in stderr
    monkeypatch.undo()

    pytest.importorskip("ctranslate2")
    monkeypatch.setattr("modeling.inference.translation.translate_ctranslate2", must_not_load)
    stderr = fail_in_one_line(monkeypatch, capsys, fake, "1 2", "--engine", "ctranslate2", "--quantization", "int3")
    assert "quantization 'int3' is not a CTranslate2 compute type; use one of default, auto, int8," in stderr
    stderr = fail_in_one_line(monkeypatch, capsys, tmp_path / "nowhere", "1 2", "--engine", "ctranslate2")
    assert "nowhere does not exist: give the output folder of scripts/export_ctranslate2.py" in stderr
    (fake / "model.safetensors").unlink()  # an export, given to the PyTorch engine: the flag it lacks
    stderr = fail_in_one_line(monkeypatch, capsys, fake, "1 2")
    assert "holds a CTranslate2 export (model.bin): add --engine ctranslate2" in stderr


def test_ctranslate2_errors_after_loading_are_one_line_and_write_nothing(ct2_dir, tmp_path, monkeypatch, capsys):
    output = tmp_path / "out.txt"
    long_line = " ".join(["7"] * 40)  # beyond the 32 positions: CTranslate2 cannot truncate it as PyTorch does
    stderr = fail_in_one_line(monkeypatch, capsys, ct2_dir, "1 2", long_line, "--engine", "ctranslate2",
                              "--output", output, "--device", "cpu")
    assert "line 2: 41 tokens (</s> included) exceed the model's 32 positions, and CTranslate2 does not " in stderr
    stderr = fail_in_one_line(monkeypatch, capsys, ct2_dir, "1 2", "--engine", "ctranslate2", "--output", output,
                              "--device", "cpu", "--quantization", "float16")
    assert "float16" in stderr
    stderr = fail_in_one_line(monkeypatch, capsys, ct2_dir, "1 2", "--engine", "ctranslate2", "--device", "mps")
    assert "device 'mps' is not a CTranslate2 device; use cpu, cuda or cuda:<index>" in stderr
    assert not output.exists()


@pytest.mark.parametrize("name", ["outputs/copy-tiny", "runs/a/b", "./model", "mine/model"])
def test_a_missing_local_model_folder_is_named_before_any_hub_lookup(name, tmp_path, monkeypatch, capsys):
    """Before training, `translate.py outputs/copy-tiny` says the folder does not exist, in one line, without asking
    the Hub (which, offline, would retry for a while); `mine/model` means a local folder because mine/ exists."""
    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr("huggingface_hub.file_download.get_hf_file_metadata", no_hub)
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, name, "1 2")
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "translate.py",
                          rf"^translate\.py: error: model folder {name} does not exist: give the output_dir of a "
                          r"finished scripts/train\.py run")


def test_a_name_that_is_no_local_folder_is_looked_up_on_the_hub_after_saying_so(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    from modeling.inference.translation import check_model_folder

    with caplog.at_level(logging.WARNING):
        check_model_folder("someone/transformer-de-en")  # a Hub id: left to the Hub
    assert "someone/transformer-de-en is not a local folder: loading it from the Hugging Face Hub" in caplog.text
