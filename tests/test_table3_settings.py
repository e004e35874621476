"""The settings Table 3 of the paper varies that the base model fixes: each head's key size d_k and value size d_v
(rows B and C), and learned positional embeddings instead of the sinusoids (row E). Each is a configuration value
that defaults to the paper's base model, so that every folder saved before loads unchanged; each reaches the weights'
shapes, attention, generation with the cache, saving and loading without the package, and train.py."""

import json
import math

import pytest
import torch
from test_train import run_in_process
from model_helpers import generating_model, padded_batch, tiny_config, tiny_model
from test_save_load import fresh_process_outputs

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling.modeling_annotated_transformer import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from modeling.training.arguments import ConfigurationError

TABLE3 = {
    "d_k 4 (row B)": dict(d_k=4),
    "d_k 4, d_v 12": dict(d_k=4, d_v=12),
    "learned positions (row E)": dict(position_embedding_type="learned"),
}


def test_the_defaults_are_the_paper_base_models():
    config = AnnotatedTransformerConfig()
    assert (config.d_k, config.d_v, config.position_embedding_type) == (None, None, "sinusoidal")
    assert config.head_sizes(8) == (64, 64)  # d_model 512 / 8 heads (§3.2.2)
    model = tiny_model()
    attention = model.model.encoder.layers[0].self_attn
    assert (attention.head_dim, attention.value_dim) == (8, 8)  # d_model 32 / 4 heads
    assert isinstance(model.model.encoder.embeddings.embed_positions, SinusoidalPositionalEncoding)
    assert not [name for name, _ in model.named_parameters() if "embed_positions" in name]


@pytest.mark.parametrize("overrides, message", [
    (dict(d_k=0), r"`d_k` must be a positive integer \(or None for d_model / heads\), got 0"),
    (dict(d_v=-8), r"`d_v` must be a positive integer \(or None for d_model / heads\), got -8"),
    (dict(position_embedding_type="rotary"), r"Unknown `position_embedding_type` 'rotary'; choose one of "
                                             r"\['sinusoidal', 'learned'\]"),
    (dict(d_model=30, d_k=6), r"`d_model` \(30\) must be divisible by `encoder_attention_heads` \(4\): each head gets "
                              r"d_model / heads dimensions \(§3.2.2\) unless both `d_k` and `d_v` are set"),
])
def test_bad_settings_are_refused_naming_the_value(overrides, message):
    with pytest.raises(Exception, match=message):
        tiny_config(**overrides)


def test_heads_of_any_size_need_no_divisible_width():
    """With both sizes given, d_model need not split evenly over the heads."""
    model = tiny_model(d_model=30, d_k=6, d_v=5)
    attention = model.model.decoder.layers[0].encoder_attn
    assert attention.q_proj.weight.shape == attention.k_proj.weight.shape == (24, 30)  # 4 heads x d_k 6, d_model 30
    assert attention.v_proj.weight.shape == (20, 30) and attention.out_proj.weight.shape == (30, 20)  # 4 x d_v 5
    ids, mask = padded_batch()
    assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits.shape == (2, 7, 40)


@pytest.mark.parametrize("overrides", TABLE3.values(), ids=TABLE3.keys())
def test_the_parameter_count_follows_the_setting(overrides):
    """Each attention holds h (2 d_k + d_v) d_model + h d_v d_model weights plus biases; learned positions add one
    table of max_position_embeddings x d_model per stack."""
    base, model = tiny_model(), tiny_model(**overrides)
    config = model.config
    d_k, d_v = config.head_sizes(4)
    per_attention = 4 * (2 * d_k + d_v) * 32 + 4 * (2 * d_k + d_v) + 4 * d_v * 32 + 32
    base_attention = 4 * 24 * 32 + 4 * 24 + 4 * 8 * 32 + 32
    attentions = config.encoder_layers + 2 * config.decoder_layers
    positions = 2 * 64 * 32 if config.position_embedding_type == "learned" else 0
    assert model.num_parameters() - base.num_parameters() == attentions * (per_attention - base_attention) + positions


def test_attention_with_its_own_key_and_value_sizes_is_softmax_of_scaled_scores_times_values():
    """§3.2.1 with d_k 4 and d_v 12: softmax(Q K^T / sqrt(d_k)) V per head, heads concatenated, projected; eager and
    SDPA agree."""
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model = tiny_model(seed=2, d_k=4, d_v=12, attn_implementation=implementation)
        attention = model.model.encoder.layers[0].self_attn
        x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
        outputs[implementation] = attention(x)[0]
    q = attention.q_proj(x).view(2, 5, 4, 4).transpose(1, 2)
    k = attention.k_proj(x).view(2, 5, 4, 4).transpose(1, 2)
    v = attention.v_proj(x).view(2, 5, 4, 12).transpose(1, 2)
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(4), dim=-1)
    expected = attention.out_proj((weights @ v).transpose(1, 2).reshape(2, 5, 48))
    torch.testing.assert_close(outputs["eager"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs["sdpa"], expected, rtol=1e-5, atol=1e-6)


def test_learned_positions_are_trained_weights_each_stack_its_own_looked_up_by_position():
    model = tiny_model(seed=4, position_embedding_type="learned")
    encoder_positions = model.model.encoder.embeddings.embed_positions
    decoder_positions = model.model.decoder.embeddings.embed_positions
    assert isinstance(encoder_positions, LearnedPositionalEmbedding) and encoder_positions.weight.requires_grad
    assert encoder_positions.weight.data_ptr() != decoder_positions.weight.data_ptr()
    # initialised as the token embeddings are under the default scheme: N(0, d_model^-0.5)
    assert abs(encoder_positions.weight.std().item() - 32**-0.5) < 0.02
    ids, mask = padded_batch()
    logits = model(input_ids=ids[:1], decoder_input_ids=ids[:1]).logits
    with torch.no_grad():
        decoder_positions.weight[5] += 1.0  # the sixth target position's vector
    changed = model(input_ids=ids[:1], decoder_input_ids=ids[:1]).logits
    moved = (changed - logits).abs().amax(-1)[0]
    assert moved[:5].max() == 0 and moved[5:].min() > 0  # causal: positions before the sixth never see it
    with pytest.raises(ValueError, match=r"Sequence position 64 is beyond `max_position_embeddings` \(64\)"):
        model(input_ids=torch.full((1, 65), 5), decoder_input_ids=ids[:1])


@pytest.mark.parametrize("overrides", TABLE3.values(), ids=TABLE3.keys())
def test_generate_with_the_cache_gives_what_it_gives_without_dynamic_and_static(overrides):
    model = generating_model(**overrides)
    ids, mask = padded_batch()
    without = model.generate(ids, attention_mask=mask, max_new_tokens=8, use_cache=False)
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=8), without)
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=8, cache_implementation="static"),
                       without)
    beams = model.generate(ids, attention_mask=mask, max_new_tokens=8, num_beams=3)
    assert torch.equal(beams, model.generate(ids, attention_mask=mask, max_new_tokens=8, num_beams=3,
                                             use_cache=False))


def test_a_saved_model_with_both_settings_loads_without_the_package_and_gives_the_same_outputs(tmp_path):
    model = generating_model(d_k=4, d_v=12, position_embedding_type="learned")
    folder = tmp_path / "table3"
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    assert (saved["d_k"], saved["d_v"], saved["position_embedding_type"]) == (4, 12, "learned")
    ids, mask = padded_batch()
    report = fresh_process_outputs(folder, {"input_ids": ids.tolist(), "attention_mask": mask.tolist()}, tmp_path)
    assert report["generated"] == model.generate(ids, attention_mask=mask, max_new_tokens=8).tolist()
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    torch.testing.assert_close(torch.tensor(report["logits"]), logits, rtol=0, atol=1e-6)
    reloaded = AnnotatedTransformerForConditionalGeneration.from_pretrained(folder).eval()
    assert torch.equal(reloaded.model.decoder.embeddings.embed_positions.weight,
                       model.model.decoder.embeddings.embed_positions.weight)


def test_train_py_takes_both_settings_and_resuming_with_others_is_refused(tmp_path):
    output = tmp_path / "run"
    run_in_process(output, "--d_k", "4", "--d_v", "12", "--position_embedding_type", "learned", "--max_steps", "4",
                   "--save_steps", "4", "--eval_steps", "4")
    saved = json.loads((output / "config.json").read_text())
    assert (saved["d_k"], saved["d_v"], saved["position_embedding_type"]) == (4, 12, "learned")
    with pytest.raises(ConfigurationError, match=r"holds another architecture \(d_k 4 there, 16 here; d_v 12 there, "
                                                 r"16 here; position_embedding_type learned there, sinusoidal here\)"):
        run_in_process(output, "--max_steps", "8", "--resume_from_checkpoint", "last")
    with pytest.raises(ConfigurationError, match=r"^--position_embedding_type fixed: Unknown `position_embedding_type`"):
        run_in_process(tmp_path / "other", "--position_embedding_type", "fixed")
