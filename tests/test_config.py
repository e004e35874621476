import json

import pytest
from transformers import AutoConfig

from modeling import PRESETS, AnnotatedTransformerConfig


def test_presets_have_the_paper_sizes():
    base = AnnotatedTransformerConfig.from_preset("base")
    assert (base.d_model, base.encoder_layers, base.decoder_layers, base.encoder_ffn_dim, base.encoder_attention_heads) == (
        512, 6, 6, 2048, 8)
    big = AnnotatedTransformerConfig.from_preset("big")
    assert (big.d_model, big.encoder_ffn_dim, big.decoder_attention_heads, big.dropout) == (1024, 4096, 16, 0.3)
    tiny = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=20, d_model=32)
    assert tiny.d_model == 32 and tiny.vocab_size == 20 and tiny.encoder_layers == PRESETS["tiny"]["encoder_layers"]


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match=r"Unknown model preset 'huge'.*base.*big.*tiny"):
        AnnotatedTransformerConfig.from_preset("huge")


def test_shared_attribute_names_resolve():
    config = AnnotatedTransformerConfig(d_model=128, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4,
                                        decoder_attention_heads=4)
    assert config.hidden_size == 128
    assert config.num_attention_heads == 4
    assert config.num_hidden_layers == 3
    # generate() sizes its cache from the decoder view of the config
    assert config.get_text_config(decoder=True).num_hidden_layers == 2
    assert config.src_vocab_size == config.vocab_size


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=30), r"`d_model` \(30\) must be divisible by `encoder_attention_heads` \(8\)"),
        (dict(decoder_attention_heads=7), r"divisible by `decoder_attention_heads` \(7\)"),
        (dict(encoder_layers=0), r"`encoder_layers` must be a positive integer, got 0"),
        (dict(decoder_ffn_dim=-1), r"`decoder_ffn_dim` must be a positive integer, got -1"),
        (dict(vocab_size=0), r"`vocab_size` must be a positive integer"),
        (dict(activation_function="swishy"), r"Unknown `activation_function` 'swishy'.*relu"),
        (dict(dropout=1.0), r"`dropout` must be in \[0, 1\), got 1.0"),
        (dict(label_smoothing=-0.1), r"`label_smoothing` must be in \[0, 1\)"),
        (dict(vocab_size=100, pad_token_id=100), r"`pad_token_id` \(100\) is outside the vocabulary.*\[0, 99\]"),
        (dict(vocab_size=100, eos_token_id=-1), r"`eos_token_id` \(-1\) is outside the vocabulary"),
        (dict(vocab_size=100, src_vocab_size=80), r"Tied embeddings need one shared vocabulary"),
        (dict(init_scheme="kaiming"), r"Unknown `init_scheme` 'kaiming'"),
        (dict(d_model="big"), r"d_model"),
        (dict(layer_norm_eps=-1e-5), r"`layer_norm_eps` must be a finite number >= 0, got -1e-05"),
        (dict(layer_norm_eps=float("nan")), r"`layer_norm_eps` must be a finite number >= 0, got nan"),
        (dict(init_std=0), r"`init_std` must be a finite positive number, got 0"),
    ],
)
def test_bad_configs_raise_clear_errors(kwargs, message):
    with pytest.raises(Exception, match=message):
        AnnotatedTransformerConfig(**kwargs)


def test_untied_vocabularies_may_differ():
    config = AnnotatedTransformerConfig(vocab_size=100, src_vocab_size=80, tie_word_embeddings=False)
    assert (config.src_vocab_size, config.vocab_size) == (80, 100)


def test_config_round_trip_and_auto_config(tmp_path):
    config = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=40, norm_first=True, label_smoothing=0.1)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, AnnotatedTransformerConfig)
    drop = lambda d: {k: v for k, v in d.items() if k != "_name_or_path"}  # noqa: E731
    assert drop(loaded.to_dict()) == drop(config.to_dict())


def test_base_preset_has_the_papers_parameter_count():
    from modeling.inference.parameters import preset_parameter_counts

    counts = preset_parameter_counts(vocab_size=37000)
    assert 60e6 < counts["base"] < 66e6  # Table 3: 65M
    assert 205e6 < counts["big"] < 220e6  # Table 3: 213M
    assert counts["tiny"] < counts["base"] < counts["big"]


def test_count_parameters_script_prints_each_preset_and_refuses_a_bad_vocabulary(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    from modeling.inference.parameters import preset_parameter_counts

    script = str(Path(__file__).resolve().parents[1] / "scripts" / "count_parameters.py")
    monkeypatch.setattr(sys, "argv", ["count_parameters.py", "--vocab_size", "8000", "--untied"])
    runpy.run_path(script, run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    counts = preset_parameter_counts(vocab_size=8000, tie_word_embeddings=False)
    assert [line.split(":")[0].strip() for line in lines] == list(counts)
    assert all(f"{count:,} parameters" in line and "untied" in line for line, count in zip(lines, counts.values()))
    assert counts["base"] > preset_parameter_counts(vocab_size=8000)["base"]  # untied: two more embedding matrices

    monkeypatch.setattr(sys, "argv", ["count_parameters.py", "--vocab_size", "0"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(script, run_name="__main__")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "count_parameters.py: error: argument --vocab_size: must be >= 1, got 0\n"


def test_head_dim_is_settable_and_names_d_k(tmp_path):
    """transformers' tools and other models' configs write `head_dim`: setting it, or loading a config.json that holds
    it, sets d_k (a read-only property refused such a config)."""
    config = AnnotatedTransformerConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, head_dim=8)
    assert (config.d_k, config.head_dim, config.head_sizes(4)) == (8, 8, (8, 16))
    config.head_dim = None  # back to d_model / heads
    assert (config.d_k, config.head_dim) == (None, 16)
    config.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**written, "head_dim": 4}))
    assert AutoConfig.from_pretrained(tmp_path).d_k == 4
