"""scripts/export_ctranslate2.py and `modeling.inference.ctranslate2_export`: CTranslate2 decodes exactly as `generate` does."""

import runpy
import sys
from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from launch_helpers import assert_one_line_error  # noqa: E402
from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration  # noqa: E402
from modeling.inference.ctranslate2_export import export_ctranslate2  # noqa: E402
from modeling.inference.ctranslate2_runtime import (  # noqa: E402
    ctranslate2_generate,
    load_ctranslate2_translator,
    translate_ctranslate2,
)
from modeling.tokenization import (  # noqa: E402
    EOS_TOKEN_ID,
    load_tokenizers,
    save_tokenizers,
    train_translation_tokenizers,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    "Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball im Park.", "Eine Frau liest ein Buch.",
    "Kinder spielen am Strand.", "Ein Mann fährt Fahrrad.", "Die Katze schläft auf dem Sofa.",
]
TARGETS = [
    "A dog runs across the meadow.", "Two men play football in the park.", "A woman reads a book.",
    "Children play on the beach.", "A man rides a bike.", "The cat sleeps on the sofa.",
]
UNSEEN = [
    "Ein Hund spielt im Park.", "Zwei Kinder lesen.", "Die Frau fährt.", "Männer am Strand schlafen auf dem Buch.",
]
MAX_NEW_TOKENS = 20

VARIANTS = {
    "post-norm, tied": dict(norm_first=False, tie_word_embeddings=True),
    "post-norm, untied": dict(norm_first=False, tie_word_embeddings=False),
    "pre-norm, tied": dict(norm_first=True, tie_word_embeddings=True),
    "pre-norm, untied": dict(norm_first=True, tie_word_embeddings=False),
    # The options CTranslate2 must be told rather than left at its defaults.
    "unscaled embeddings, eps 1e-3, 2 decoder heads": dict(
        norm_first=False, tie_word_embeddings=True, scale_embedding=False, layer_norm_eps=1e-3,
        decoder_attention_heads=2,
    ),
    # Table 3's settings: a head size other than d_model / heads (rows B, C), learned positions (row E)
    "d_k = d_v = 4": dict(norm_first=False, tie_word_embeddings=True, d_k=4, d_v=4),
    "learned positions, untied": dict(norm_first=False, tie_word_embeddings=False, position_embedding_type="learned"),
}


def trained_model_folder(directory: Path, **overrides) -> Path:
    """A folder as scripts/train.py writes it: a tiny model fitted for a few steps to six sentence pairs (so its
    greedy outputs are sentences that end, not one token repeated), with a joint tokenizer when tied and separate
    source/target tokenizers when untied."""
    tied = overrides["tie_word_embeddings"]
    tokenizers = train_translation_tokenizers(SOURCES * 5, TARGETS * 5, joint=tied, vocab_size=300)
    source_tokenizer, target_tokenizer = (tokenizers, tokenizers) if tied else tokenizers
    torch.manual_seed(0)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=len(target_tokenizer), src_vocab_size=len(source_tokenizer), d_model=32,
        encoder_layers=3, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
        **overrides,
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    batch = source_tokenizer(SOURCES, padding=True, return_tensors="pt")
    labels = target_tokenizer(TARGETS, padding=True, return_tensors="pt")["input_ids"]
    labels[labels == target_tokenizer.pad_token_id] = -100
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(directory)
    save_tokenizers(tokenizers, directory)
    return directory


def run_script(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["export_ctranslate2.py", *map(str, argv)])
    runpy.run_path(str(REPO_ROOT / "scripts" / "export_ctranslate2.py"), run_name="__main__")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_greedy_and_beam_ids_and_greedy_scores_equal_generate(overrides, tmp_path, monkeypatch, capsys):
    model_dir = trained_model_folder(tmp_path / "model", **overrides)
    run_script(monkeypatch, model_dir, tmp_path / "ct2")
    assert capsys.readouterr().out.strip() == str(tmp_path / "ct2")
    expected_vocabularies = {"shared_vocabulary.json"} if overrides["tie_word_embeddings"] else \
        {"source_vocabulary.json", "target_vocabulary.json"}
    assert expected_vocabularies <= {path.name for path in (tmp_path / "ct2").iterdir()}

    model = AnnotatedTransformerForConditionalGeneration.from_pretrained(model_dir).eval()
    translator = load_ctranslate2_translator(tmp_path / "ct2", "cpu", intra_threads=1)
    tokenizers = load_tokenizers(model_dir)
    source_tokenizer, target_tokenizer = tokenizers if isinstance(tokenizers, tuple) else (tokenizers, tokenizers)
    texts = SOURCES + UNSEEN
    source_ids = source_tokenizer(texts)["input_ids"]
    ct2_ids = ctranslate2_generate(translator, source_ids, source_tokenizer, target_tokenizer,
                                   max_new_tokens=MAX_NEW_TOKENS)
    ct2_scores = [result.scores[0] for result in translator.translate_batch(
        [source_tokenizer.convert_ids_to_tokens(ids) for ids in source_ids], beam_size=1, min_decoding_length=0,
        max_decoding_length=MAX_NEW_TOKENS, return_scores=True,
    )]
    inputs = source_tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                   output_scores=True, return_dict_in_generate=True)
    log_probs = torch.log_softmax(torch.stack(generated.scores, dim=1), dim=-1)
    ended = 0
    for row, (sequence, ct2_sequence, ct2_score) in enumerate(zip(generated.sequences.tolist(), ct2_ids, ct2_scores)):
        sequence = sequence[1:]  # the decoder start token
        length = sequence.index(EOS_TOKEN_ID) + 1 if EOS_TOKEN_ID in sequence else len(sequence)
        ended += EOS_TOKEN_ID in sequence
        hf_log_prob = log_probs[row, torch.arange(length), sequence[:length]].sum().item()
        assert ct2_sequence == sequence[:length][: length - (EOS_TOKEN_ID in sequence)], texts[row]
        # CTranslate2 reports the log-probability divided by the length (the end token counted).
        assert ct2_score * length == pytest.approx(hf_log_prob, abs=1e-3), texts[row]
    assert ended >= len(texts) // 2  # the outputs are mostly sentences that end, not MAX_NEW_TOKENS repeats
    assert len({tuple(ids) for ids in ct2_ids}) >= 4

    # Beam search: CTranslate2 stops once num_beams hypotheses have ended, as generate(early_stopping=True) does.
    ct2_beam_ids = ctranslate2_generate(translator, source_ids, source_tokenizer, target_tokenizer, num_beams=4,
                                        max_new_tokens=MAX_NEW_TOKENS)
    with torch.no_grad():
        beam = model.generate(**inputs, num_beams=4, early_stopping=True, length_penalty=1.0,
                              max_new_tokens=MAX_NEW_TOKENS)
    for text, sequence, ct2_sequence in zip(texts, beam.tolist(), ct2_beam_ids):
        sequence = sequence[1:]
        length = sequence.index(EOS_TOKEN_ID) if EOS_TOKEN_ID in sequence else len(sequence)
        assert ct2_sequence == sequence[:length], text


def test_translate_strings_greedy_and_beam(tmp_path):
    model_dir = trained_model_folder(tmp_path / "model", **VARIANTS["post-norm, untied"])
    export_ctranslate2(model_dir, tmp_path / "ct2")
    model = AnnotatedTransformerForConditionalGeneration.from_pretrained(model_dir).eval()
    source_tokenizer, target_tokenizer = load_tokenizers(model_dir)
    texts = [SOURCES[0], "   ", SOURCES[2], UNSEEN[0]]

    def generate(num_beams: int) -> list[str]:
        inputs = source_tokenizer([text for text in texts if text.strip()], padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = model.generate(**inputs, num_beams=num_beams, early_stopping=True,
                                       max_new_tokens=MAX_NEW_TOKENS)
        decoded = [text.strip() for text in target_tokenizer.batch_decode(generated, skip_special_tokens=True)]
        return decoded[:1] + [""] + decoded[1:]

    greedy = translate_ctranslate2(texts, tmp_path / "ct2", num_beams=1, intra_threads=1)
    beam = translate_ctranslate2(texts, tmp_path / "ct2", num_beams=3, max_new_tokens=MAX_NEW_TOKENS, intra_threads=1)
    assert greedy == generate(num_beams=1) and beam == generate(num_beams=3)
    # Defaults come from the exported generation config: here none set, so generate()'s greedy and 20 tokens.
    assert translate_ctranslate2(texts, tmp_path / "ct2", intra_threads=1) == greedy

    export_ctranslate2(model_dir, tmp_path / "ct2-int8", quantization="int8")
    int8 = translate_ctranslate2(texts, tmp_path / "ct2-int8", num_beams=1, intra_threads=1)
    assert int8[1] == "" and sum(a == b for a, b in zip(int8, greedy)) >= 3  # int8 weights, nearly the same


def test_existing_output_is_refused_unless_forced(tmp_path, monkeypatch, capsys):
    model_dir = trained_model_folder(tmp_path / "model", **VARIANTS["pre-norm, tied"])
    output_dir = tmp_path / "ct2"
    output_dir.mkdir()
    (output_dir / "notes.txt").write_text("keep me")
    capsys.readouterr()  # the progress bars of saving the model
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, output_dir)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("export_ctranslate2.py: error: ") and str(output_dir) in error and "--force" in error
    assert len(error.strip().splitlines()) == 1
    assert [path.name for path in output_dir.iterdir()] == ["notes.txt"]

    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, tmp_path / "other", "--quantization", "int3")
    assert exit_info.value.code == 2 and "int3" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()

    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, tmp_path, "--force")  # would delete the model folder inside it
    assert exit_info.value.code == 2 and (model_dir / "config.json").is_file()
    capsys.readouterr()
    inside = tmp_path / "run" / "checkpoint-300" / "ct2"  # the Trainer's checkpoint rotation would delete it
    inside.parent.mkdir(parents=True)
    (inside.parent / "trainer_state.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, inside)
    assert exit_info.value.code == 2 and "is inside the checkpoint" in capsys.readouterr().err
    assert not inside.exists()

    with pytest.raises(SystemExit) as exit_info:  # --force replaces an export, not a folder of other files
        run_script(monkeypatch, model_dir, output_dir, "--force")
    assert exit_info.value.code == 2 and "holds files but no earlier export" in capsys.readouterr().err
    assert [path.name for path in output_dir.iterdir()] == ["notes.txt"]

    (output_dir / "notes.txt").unlink()
    run_script(monkeypatch, model_dir, output_dir, "--quantization", "int8", "--force")  # an empty folder
    int8_size = (output_dir / "model.bin").stat().st_size
    (output_dir / "hypotheses.en").write_text("keep")
    with pytest.raises(SystemExit) as exit_info:  # nor an export beside other files, which it would delete
        run_script(monkeypatch, model_dir, output_dir, "--force", "--quantization", "float16")
    assert exit_info.value.code == 2 and "holds an earlier export and other files (hypotheses.en)" in (
        capsys.readouterr().err)
    assert (output_dir / "hypotheses.en").read_text() == "keep"
    assert (output_dir / "model.bin").stat().st_size == int8_size
    (output_dir / "hypotheses.en").unlink()
    run_script(monkeypatch, model_dir, output_dir, "--force", "--quantization", "float16")  # an earlier export
    assert (output_dir / "model.bin").stat().st_size > int8_size  # replaced by the float16 export


def test_a_model_whose_key_and_value_sizes_differ_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """Table 3's row (B) shrinks d_k alone; CTranslate2 has one head size for queries, keys and values."""
    model_dir = trained_model_folder(tmp_path / "model", norm_first=False, tie_word_embeddings=True, d_k=4)
    capsys.readouterr()  # saving's progress bars
    with pytest.raises(SystemExit) as exit_info:
        run_script(monkeypatch, model_dir, tmp_path / "ct2")
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "export_ctranslate2.py",
                          r"d_k \(4\) != d_v \(8\): CTranslate2 gives queries, keys and values one head size")
    assert not (tmp_path / "ct2").exists()
