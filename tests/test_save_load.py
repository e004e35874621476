import json
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from model_helpers import padded_batch, tiny_model
from modeling import AnnotatedTransformerForConditionalGeneration, AnnotatedTransformerModel


@pytest.mark.parametrize("tie", [True, False])
def test_save_and_load_round_trip(tmp_path, tie):
    model = tiny_model(seed=1, tie_word_embeddings=tie, norm_first=tie)
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
    assert torch.equal(loaded.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8),
                       model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8))
    assert isinstance(AutoModel.from_pretrained(tmp_path), AnnotatedTransformerModel)
    assert AutoConfig.from_pretrained(tmp_path).to_dict()["d_model"] == 32


def test_corrupt_checkpoint_fails_clearly(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(Exception, match="(?i)safetensors|header|deserializ"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


FRESH_PROCESS = textwrap.dedent(
    """
    import importlib.abc, json, sys
    class BlockOurPackage(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "modeling" or name.startswith("modeling."):
                raise ModuleNotFoundError(name)
    sys.meta_path.insert(0, BlockOurPackage())
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
    model = tiny_model(seed=2)
    model_dir = tmp_path / "annotated_tiny"
    model.save_pretrained(model_dir)
    input_ids, attention_mask = padded_batch()
    batch = json.dumps({"input_ids": input_ids.tolist(), "attention_mask": attention_mask.tolist()})
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(model_dir), batch], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    expected = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8)
    assert report["generated"] == expected.tolist()
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    assert report["logits_sum"] == pytest.approx(logits.sum().item(), rel=1e-5)


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
