import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from launch_helpers import WITHOUT_THIS_PACKAGE
from model_helpers import VOCAB, assert_varied, padded_batch, tiny_model, trained_to_copy
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

import modeling
from modeling import AnnotatedTransformerForConditionalGeneration, AnnotatedTransformerModel


@pytest.mark.parametrize("tie", [True, False])
def test_save_and_load_round_trip(tmp_path, tie):
    model = trained_to_copy(tiny_model(seed=1, tie_word_embeddings=tie, norm_first=tie), steps=200)
    model.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "configuration_annotated_transformer.py",
            "modeling_annotated_transformer.py"} <= files
    saved = load_file(tmp_path / "model.safetensors")
    assert not any("embed_positions" in key for key in saved)  # sinusoids are not weights
    embedding_keys = sorted(k for k in saved if "embed_tokens" in k or "shared" in k or "lm_head" in k)
    if tie:
        assert embedding_keys == ["model.shared.weight"]  # one copy for three uses
    else:
        assert len(embedding_keys) == 3
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForSeq2SeqLM"].endswith(".AnnotatedTransformerForConditionalGeneration")
    assert auto_map["AutoModel"].endswith(".AnnotatedTransformerModel")

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, AnnotatedTransformerForConditionalGeneration)
    # The positional encoding is rebuilt after loading on the meta device.
    assert torch.equal(loaded.model.decoder.embeddings.embed_positions.encoding,
                       model.model.decoder.embeddings.embed_positions.encoding)
    if tie:
        assert loaded.lm_head.weight is loaded.model.shared.weight
    input_ids, attention_mask = padded_batch()
    assert torch.equal(loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits,
                       model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits)
    generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8)
    assert_varied(generated)  # trained: an untrained tied model only repeats the start token
    assert torch.equal(loaded.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8), generated)
    assert isinstance(AutoModel.from_pretrained(tmp_path), AnnotatedTransformerModel)
    assert AutoConfig.from_pretrained(tmp_path).to_dict()["d_model"] == 32


FRESH_PROCESS = WITHOUT_THIS_PACKAGE + textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert "modeling" not in sys.modules
    batch = json.loads(sys.argv[2])
    ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=8)
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    print(json.dumps({"module": type(model).__module__, "generated": out.tolist(), "logits_sum": logits.sum().item()}))
    """
)


def test_fresh_process_loads_with_trust_remote_code(tmp_path):
    """A briefly trained tied model (an untrained one only repeats the start token): the fresh process generates its
    tokens and computes its logits, tensor for tensor."""
    model = trained_to_copy(tiny_model(seed=2), steps=300)
    model_dir = tmp_path / "annotated_tiny"
    model.save_pretrained(model_dir)
    input_ids, attention_mask = padded_batch()
    report = fresh_process_outputs(model_dir, {"input_ids": input_ids.tolist(),
                                               "attention_mask": attention_mask.tolist()}, tmp_path)
    expected = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8)
    assert_varied(expected)
    assert report["generated"] == expected.tolist()
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    torch.testing.assert_close(torch.tensor(report["logits"]), logits, rtol=0, atol=1e-6)


# A briefly trained model saved by version 0.1.0 (one model file holding the checks, loss and FSDP glue that now
# live in small modules beside it), with its generations and logits then.
SAVED_BY_0_1_0 = Path(__file__).resolve().parent / "fixtures" / "model-saved-by-0.1.0"
FRESH_PROCESS_FULL = FRESH_PROCESS.replace('"logits_sum": logits.sum().item()', '"logits": logits.tolist()')


def fresh_process_outputs(folder: Path, batch: dict, tmp_path: Path) -> dict:
    """generate() and the logits of `folder`'s model, loaded with trust_remote_code in a process without this
    package."""
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS_FULL, str(folder), json.dumps(batch)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    return report


# The earlier version's logits were recorded on one CPU (an Intel Xeon). Another CPU's float32 kernels sum each matrix
# product in another order (MKL's on Intel, oneDNN's on AMD, other vector widths): the tiny model's
# logits, at most 4 in size (a unit in the last place: 4.8e-7), then differ by a few units in the last place, 1.19e-6
# on an AMD EPYC. 1e-5 is 20 such units, eight times what was seen, while one weight changed by 1e-3 moves the logits
# by 9e-5: the bound holds across CPU vendors and still catches a changed weight, layer or mask.
CROSS_CPU_ATOL = 1e-5


def test_a_folder_saved_by_an_earlier_version_loads_with_its_own_code_and_with_this_package(tmp_path):
    expected = json.loads(SAVED_BY_0_1_0.with_name(SAVED_BY_0_1_0.name + ".expected.json").read_text())
    ids, mask = torch.tensor(expected["input_ids"]), torch.tensor(expected["attention_mask"])
    assert not (SAVED_BY_0_1_0 / "loss.py").exists()  # the earlier layout: no helper modules beside the model file
    report = fresh_process_outputs(SAVED_BY_0_1_0, {"input_ids": expected["input_ids"],
                                                    "attention_mask": expected["attention_mask"]}, tmp_path)
    assert report["generated"] == expected["generated"]
    torch.testing.assert_close(torch.tensor(report["logits"]), torch.tensor(expected["logits"]), rtol=0, atol=CROSS_CPU_ATOL)

    model = AnnotatedTransformerForConditionalGeneration.from_pretrained(SAVED_BY_0_1_0).eval()
    assert model.generate(ids, attention_mask=mask, max_new_tokens=8).tolist() == expected["generated"]
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), rtol=0, atol=CROSS_CPU_ATOL)


def test_a_folder_saved_now_carries_every_module_the_model_imports_and_loads_without_the_package(tmp_path):
    model = AnnotatedTransformerForConditionalGeneration.from_pretrained(SAVED_BY_0_1_0).eval()
    folder = tmp_path / "saved-now"
    model.save_pretrained(folder)
    modeling_dir = Path(modeling.__file__).parent
    relative = re.findall(r"^from \.(\w+) import", (modeling_dir / "modeling_annotated_transformer.py").read_text(),
                          flags=re.M)
    assert {"loss", "input_checks", "initialization", "compatibility", "saving", "generation"} <= set(relative)
    assert {f"{name}.py" for name in relative} <= {path.name for path in folder.iterdir()}
    ids, mask = padded_batch()
    report = fresh_process_outputs(folder, {"input_ids": ids.tolist(), "attention_mask": mask.tolist()}, tmp_path)
    assert report["generated"] == model.generate(ids, attention_mask=mask, max_new_tokens=8).tolist()
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    torch.testing.assert_close(torch.tensor(report["logits"]), logits, rtol=0, atol=1e-6)


def test_checkpoint_state_dict_misses_only_the_tied_aliases(tmp_path):
    """What the Trainer checks when it reloads the best checkpoint: the keys a tied checkpoint lacks are exactly
    `_keys_to_ignore_on_save`, so it re-ties them instead of warning about missing weights."""
    model = tiny_model(seed=4)
    model.save_pretrained(tmp_path)
    fresh = tiny_model(seed=5)
    result = fresh.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False)
    assert set(result.missing_keys) == set(fresh._keys_to_ignore_on_save)
    assert not result.unexpected_keys
    fresh.tie_weights()
    assert torch.equal(fresh.lm_head.weight, model.lm_head.weight)


# ---- loading never leaves a silent hole ------------------------------------------------------------------------------


@pytest.mark.parametrize("tie, dropped", [
    (True, "model.shared.weight"),
    (False, "model.decoder.embeddings.embed_tokens.weight"),
])
def test_a_missing_embedding_is_reported_and_nothing_stays_on_meta(tmp_path, tie, dropped):
    """A checkpoint without the (shared) embedding matrix: transformers reports it missing and initialises it,
    instead of counting it loaded through the other stack and leaving it on the meta device."""
    tiny_model(seed=6, tie_word_embeddings=tie).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights[dropped]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "checksums.sha256").unlink()  # the change is ours
    model, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert dropped in info["missing_keys"]
    assert not [name for name, tensor in model.state_dict().items() if tensor.device.type == "meta"]
    input_ids, attention_mask = padded_batch()
    assert model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4).shape[0] == 2


def test_each_stack_has_its_own_embedding_module_tied_through_the_weights():
    model = tiny_model(tie_word_embeddings=True)
    encoder, decoder = model.model.encoder.embeddings.embed_tokens, model.model.decoder.embeddings.embed_tokens
    assert encoder is not decoder
    assert encoder.weight is decoder.weight is model.model.shared.weight is model.lm_head.weight


@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings_resizes_source_target_and_output_together(tie):
    model = tiny_model(tie_word_embeddings=tie)
    input_ids, attention_mask = padded_batch()
    for size in (VOCAB + 10, VOCAB - 15):
        model.resize_token_embeddings(size)
        assert model.config.vocab_size == model.config.src_vocab_size == size
        assert model.model.encoder.embeddings.embed_tokens.weight.shape[0] == size
        assert model.model.decoder.embeddings.embed_tokens.weight.shape[0] == size
        assert model.lm_head.weight.shape[0] == size
        ids = input_ids.clamp(max=size - 1)
        assert model(input_ids=ids, attention_mask=attention_mask, decoder_input_ids=ids).logits.shape[-1] == size
    if tie:
        assert model.lm_head.weight is model.model.shared.weight is model.model.decoder.embeddings.embed_tokens.weight
    else:
        assert model.lm_head.weight is not model.model.decoder.embeddings.embed_tokens.weight
    resized = model.lm_head.weight.detach().clone()
    model.post_init()  # transformers' `_no_reinit_on_post_init`: the resized head keeps its values
    assert torch.equal(model.lm_head.weight, resized)


@pytest.mark.parametrize("tie", [True, False])
def test_the_bare_model_resizes_both_vocabularies_and_saves(tie, tmp_path):
    """AutoModel's class: transformers' own resize grew only the source embeddings and left src_vocab_size behind."""
    model = AnnotatedTransformerModel(tiny_model(tie_word_embeddings=tie).config).eval()
    model.resize_token_embeddings(VOCAB + 10)
    assert model.config.vocab_size == model.config.src_vocab_size == VOCAB + 10
    assert model.encoder.embeddings.embed_tokens.weight.shape[0] == VOCAB + 10
    assert model.decoder.embeddings.embed_tokens.weight.shape[0] == VOCAB + 10
    new_id = torch.tensor([[VOCAB + 5, 2]])
    hidden = model(input_ids=new_id, decoder_input_ids=new_id).last_hidden_state
    model.save_pretrained(tmp_path)
    reloaded = AnnotatedTransformerModel.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded(input_ids=new_id, decoder_input_ids=new_id).last_hidden_state, hidden)


def test_resizing_separate_vocabularies_is_refused():
    model = tiny_model(tie_word_embeddings=False, src_vocab_size=30)
    with pytest.raises(NotImplementedError, match=r"separate source \(30\) and target \(40\) vocabularies"):
        model.resize_token_embeddings(50)


# ---- safe loading: safetensors only, corrupt files named ------------------------------------------------------------


def corrupt(path, how: str):
    data = bytearray(path.read_bytes())
    if how == "not safetensors":
        data = bytearray(b"not a safetensors file")
    elif how == "truncated":
        data = data[: len(data) - 100]
    elif how == "header bit flip":
        data[20] ^= 0x10
    else:  # a flipped bit in the tensor data: safetensors itself cannot notice
        data[-50] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["not safetensors", "truncated", "header bit flip", "header shape", "header hole"])
def test_an_incomplete_or_broken_weights_file_is_refused_naming_it(tmp_path, how):
    tiny_model(seed=7).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    if how in ("header shape", "header hole"):  # a header that parses but cannot describe the data
        tensors = load_file(weights)
        name = sorted(tensors)[0]
        data = bytearray(weights.read_bytes())
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        if how == "header shape":
            header[name]["shape"] = [n + 1 for n in header[name]["shape"]]
        else:
            begin, end = header[name]["data_offsets"]
            header[name]["data_offsets"] = [begin + 4, end + 4]
        encoded = json.dumps(header, separators=(",", ":")).encode().ljust(size)
        assert len(encoded) == size
        weights.write_bytes(bytes(data[:8]) + encoded + bytes(data[8 + size:]))
        (tmp_path / "checksums.sha256").unlink()  # the header's own checks find it, not the digest
    else:
        corrupt(weights, how)
    with pytest.raises(OSError, match=re.escape(str(weights))):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


def test_weights_rewritten_by_another_tool_load_with_a_warning_naming_the_file(tmp_path, caplog):
    """A converter, safetensors itself or an upload may write the same tensors again (other metadata, other order):
    the digest saved with the folder no longer matches, so the load says so, and goes on."""
    model = tiny_model(seed=7)
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt", "rewritten_by": "another tool"})
    with caplog.at_level("WARNING"):
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert f"{weights} does not match its SHA-256" in caplog.text and "loading it as it is" in caplog.text
    input_ids, attention_mask = padded_batch()
    assert torch.equal(loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits,
                       model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits)


def test_a_flipped_bit_in_the_tensor_data_is_warned_of_when_loading_and_refused_when_resuming(tmp_path, caplog):
    from modeling.weight_files import weights_problem

    tiny_model(seed=7).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    corrupt(weights, "data bit flip")
    with caplog.at_level("WARNING"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert f"{weights} does not match its SHA-256" in caplog.text
    assert weights_problem(tmp_path).startswith(f"{weights} does not match its SHA-256")  # resuming, uploading


@pytest.mark.parametrize("text", ["garbage\n", "0123 model.safetensors\n", "\u00e9" * 64 + "  model.safetensors\n"])
def test_a_corrupt_checksum_file_is_named_in_a_warning(tmp_path, text, caplog):
    tiny_model(seed=7).save_pretrained(tmp_path)
    (tmp_path / "checksums.sha256").write_text(text)
    with caplog.at_level("WARNING"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert f"{tmp_path / 'checksums.sha256'} line 1 is not" in caplog.text


def test_a_checksum_file_without_the_weights_is_warned_of(tmp_path, caplog):
    """An empty checksum file (or one listing other files) checks nothing: said, not passed over."""
    tiny_model(seed=7).save_pretrained(tmp_path)
    (tmp_path / "checksums.sha256").write_text("")
    with caplog.at_level("WARNING"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert "has no SHA-256 for model.safetensors" in caplog.text


@pytest.mark.parametrize("index", ["[1, 2]", '{"weight_map": [1]}', '{"weight_map": {"a": [1]}}', "{}", "not json",
                                   '{"weight_map": {}}'])
def test_a_shard_index_of_another_shape_is_named(tmp_path, index):
    """An index whose JSON is a list, or whose weight_map is not a map of file names, was an AttributeError or a
    TypeError traceback."""
    from modeling.weight_files import CorruptWeightsError, weight_files

    tiny_model(seed=7).save_pretrained(tmp_path, max_shard_size="20KB")
    assert len(weight_files(tmp_path)) > 1
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(CorruptWeightsError, match=r"model\.safetensors\.index\.json is not a valid safetensors index"):
        weight_files(tmp_path)


def test_checksums_in_sha256sums_binary_form_are_checked(tmp_path):
    """`sha256sum -b` writes "<digest> *<file>": the file is checked under its name, and a flipped bit is found."""
    tiny_model(seed=7).save_pretrained(tmp_path)
    result = subprocess.run(["sha256sum", "-b", "model.safetensors"], cwd=tmp_path, capture_output=True, text=True)
    assert " *model.safetensors" in result.stdout
    (tmp_path / "checksums.sha256").write_text(result.stdout)
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    corrupt(tmp_path / "model.safetensors", "data bit flip")
    from modeling.weight_files import weights_problem

    assert "model.safetensors does not match its SHA-256" in weights_problem(tmp_path)


def test_the_digests_are_sha256sum_compatible(tmp_path):
    tiny_model(seed=7).save_pretrained(tmp_path)
    result = subprocess.run(["sha256sum", "-c", "checksums.sha256"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and "model.safetensors: OK" in result.stdout


def test_pickled_weights_are_never_loaded(tmp_path):
    model = tiny_model(seed=8)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match="model.safetensors"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
