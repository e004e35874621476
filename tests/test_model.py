import copy
import math
import re

import pytest
import torch
from model_helpers import VOCAB, enable_checkpointing, padded_batch, tiny_config, tiny_model
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils.output_capturing import OutputRecorder

from modeling import AnnotatedTransformerForConditionalGeneration, AnnotatedTransformerModel, input_checks
from modeling.initialization import deepnet_gains
from modeling.modeling_annotated_transformer import (
    SublayerConnection,
    shift_tokens_right,
    sinusoidal_positional_encoding,
)


def test_output_types_shapes_and_dtypes():
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.randint(4, VOCAB, (2, 5))
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    assert isinstance(out, Seq2SeqLMOutput)
    assert out.logits.shape == (2, 5, VOCAB) and out.logits.dtype == torch.float32
    assert out.encoder_last_hidden_state.shape == (2, 7, 32)
    base = AnnotatedTransformerModel(tiny_config())
    bare = base(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    assert isinstance(bare, Seq2SeqModelOutput) and bare.last_hidden_state.shape == (2, 5, 32)
    as_tuple = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits)


def test_positional_encoding_matches_the_formula():
    d_model = 16
    encoding = sinusoidal_positional_encoding(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert encoding[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_is_a_buffer_not_a_weight():
    model = tiny_model()
    names = [name for name, _ in model.named_parameters()]
    assert not any("embed_positions" in name for name in names)
    assert not any("embed_positions" in key for key in model.state_dict())
    expected = sinusoidal_positional_encoding(64, 32)
    assert torch.equal(model.model.encoder.embeddings.embed_positions.encoding, expected)
    assert torch.equal(model.model.decoder.embeddings.embed_positions.encoding, expected)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_model(dropout=0.0)
    embeddings = model.model.encoder.embeddings
    ids = torch.tensor([[5, 6, 7]])
    expected = embeddings.embed_tokens(ids) * math.sqrt(32) + sinusoidal_positional_encoding(3, 32)
    assert torch.allclose(embeddings(ids), expected, atol=1e-6)


def test_post_norm_and_pre_norm_placement():
    post, pre = tiny_model(norm_first=False), tiny_model(norm_first=True)
    # Structure: pre-norm ends each stack with a LayerNorm; post-norm does not need one.
    assert post.model.encoder.layer_norm is None and post.model.decoder.layer_norm is None
    assert isinstance(pre.model.encoder.layer_norm, torch.nn.LayerNorm)
    assert isinstance(pre.model.decoder.layer_norm, torch.nn.LayerNorm)
    # Numerics, on one SublayerConnection with a known sub-layer.
    x = torch.randn(2, 3, 32)
    double = lambda h: 2 * h  # noqa: E731
    post_block = SublayerConnection(tiny_config(norm_first=False)).eval()
    pre_block = SublayerConnection(tiny_config(norm_first=True)).eval()
    norm = torch.nn.functional.layer_norm
    assert torch.allclose(post_block(x, double), norm(x + 2 * x, (32,), eps=1e-6), atol=1e-6)
    assert torch.allclose(pre_block(x, double), x + 2 * norm(x, (32,), eps=1e-6), atol=1e-6)
    # And the two models compute different functions from the same weights.
    pre.load_state_dict(post.state_dict(), strict=False)
    input_ids, attention_mask = padded_batch()
    assert not torch.allclose(pre(input_ids=input_ids, decoder_input_ids=input_ids).logits,
                              post(input_ids=input_ids, decoder_input_ids=input_ids).logits)


def test_three_way_tying_shares_one_storage():
    model = tiny_model()
    shared = model.model.shared.weight
    assert model.model.encoder.get_input_embeddings().weight is shared
    assert model.model.decoder.get_input_embeddings().weight is shared
    assert model.lm_head.weight is shared
    assert model.get_input_embeddings().weight is shared and model.get_output_embeddings().weight is shared
    with torch.no_grad():
        shared[5, 0] = 123.0
    assert model.lm_head.weight[5, 0].item() == 123.0
    tied_params = sum(p.numel() for p in model.parameters())
    untied_params = sum(p.numel() for p in tiny_model(tie_word_embeddings=False).parameters())
    assert untied_params - tied_params == 2 * VOCAB * 32


def test_untied_model_has_separate_vocabularies():
    model = tiny_model(tie_word_embeddings=False, src_vocab_size=25)
    encoder_embed = model.model.encoder.get_input_embeddings().weight
    decoder_embed = model.model.decoder.get_input_embeddings().weight
    assert encoder_embed.shape == (25, 32) and decoder_embed.shape == (VOCAB, 32)
    assert model.lm_head.weight.shape == (VOCAB, 32)
    assert len({encoder_embed.data_ptr(), decoder_embed.data_ptr(), model.lm_head.weight.data_ptr()}) == 3
    out = model(input_ids=torch.randint(4, 25, (2, 6)), decoder_input_ids=torch.randint(4, VOCAB, (2, 3)))
    assert out.logits.shape == (2, 3, VOCAB)


def test_resize_keeps_the_ties():
    model = tiny_model()
    model.resize_token_embeddings(48)
    assert model.config.vocab_size == 48
    shared = model.model.shared.weight
    assert shared.shape == (48, 32)
    assert model.lm_head.weight is shared
    assert model.model.encoder.get_input_embeddings().weight is shared
    assert model.model.decoder.get_input_embeddings().weight is shared
    assert model(input_ids=torch.tensor([[47, 5]]), decoder_input_ids=torch.tensor([[1]])).logits.shape[-1] == 48


def test_xavier_uniform_initialisation():
    model = tiny_model(d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256, init_scheme="xavier_uniform")
    weight = model.model.encoder.layers[0].feed_forward.fc1.weight  # (256, 64)
    bound = math.sqrt(6 / (64 + 256))
    assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound
    assert torch.all(model.model.encoder.layers[0].feed_forward.fc1.bias == 0)


def test_fairseq_initialisation_gives_unit_variance_scaled_embeddings():
    xavier = tiny_model(vocab_size=4000, d_model=64, init_scheme="xavier_uniform")  # tiny_model seeds itself
    fairseq = tiny_model(vocab_size=4000, d_model=64, encoder_ffn_dim=256, init_scheme="fairseq")
    # N(0, d_model^-0.5): after the sqrt(d_model) scale of §3.4 the embeddings have unit variance, like the
    # positional encoding; Xavier over (4000, 64) gives them a standard deviation of about 0.18 instead
    embeddings = fairseq.model.shared.weight * math.sqrt(64)
    assert abs(embeddings.std().item() - 1.0) < 0.02
    assert (xavier.model.shared.weight * math.sqrt(64)).std().item() < 0.2
    assert fairseq.lm_head.weight is fairseq.model.shared.weight
    # every other matrix keeps Xavier-uniform
    bound = math.sqrt(6 / (64 + 256))
    weight = fairseq.model.encoder.layers[0].feed_forward.fc1.weight
    assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound


def test_deepnet_initialisation_scales_the_residual_branches(tmp_path):
    model = tiny_model(vocab_size=4000, d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256, encoder_layers=6,
                       decoder_layers=6)
    assert model.config.init_scheme == "deepnet"  # the default
    encoder_gain, decoder_gain = deepnet_gains(6, 6)
    assert abs(encoder_gain - 0.497) < 1e-3 and abs(decoder_gain - 0.343) < 1e-3  # DeepNet's beta at 6+6

    def xavier_std(weight):
        return math.sqrt(2 / sum(weight.shape))

    encoder_layer, decoder_layer = model.model.encoder.layers[3], model.model.decoder.layers[3]
    scaled = {
        encoder_gain: [encoder_layer.self_attn.v_proj, encoder_layer.self_attn.out_proj,
                       encoder_layer.feed_forward.fc1, encoder_layer.feed_forward.fc2],
        decoder_gain: [decoder_layer.self_attn.v_proj, decoder_layer.encoder_attn.out_proj,
                       decoder_layer.encoder_attn.v_proj, decoder_layer.feed_forward.fc2],
        1.0: [encoder_layer.self_attn.q_proj, decoder_layer.encoder_attn.k_proj],  # queries and keys keep gain 1
    }
    for gain, linears in scaled.items():
        for linear in linears:
            assert abs(linear.weight.std().item() / (gain * xavier_std(linear.weight)) - 1) < 0.1
            assert torch.all(linear.bias == 0)
    assert abs((model.model.shared.weight * math.sqrt(64)).std().item() - 1.0) < 0.02  # fairseq's embeddings
    # loading a saved model keeps its weights: the scaled draw applies to new weights only, never to loaded ones
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).state_dict()
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, loaded[name]), name


def test_padding_in_the_source_changes_nothing():
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.randint(4, VOCAB, (2, 5))
    before = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    changed = input_ids.clone()
    changed[1, 4:] = torch.tensor([9, 10, 11])
    after = model(input_ids=changed, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    assert torch.allclose(before, after, atol=1e-6)
    # and the padded sentence alone, unpadded, gives the same result
    alone = model(input_ids=input_ids[1:, :4], decoder_input_ids=decoder_input_ids[1:]).logits
    assert torch.allclose(before[1:], alone, atol=1e-5)


def test_future_tokens_do_not_affect_earlier_positions():
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.randint(4, VOCAB, (2, 6))
    before = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    changed = decoder_input_ids.clone()
    changed[:, 4:] = 7
    after = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=changed).logits
    assert torch.allclose(before[:, :4], after[:, :4], atol=1e-6)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_fully_padded_row_gives_no_nan(implementation):
    model = tiny_model(attn_implementation=implementation)
    input_ids, attention_mask = padded_batch()
    attention_mask[1] = 0
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.randint(4, VOCAB, (2, 4)))
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)


def test_eager_mask_fill_is_the_dtype_minimum():
    model = tiny_model(attn_implementation="eager")
    input_ids, attention_mask = padded_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :3],
                output_attentions=True)
    # Padded source keys receive exactly zero attention, in the encoder and in cross-attention.
    assert torch.all(out.encoder_attentions[0][1, :, :, 4:] == 0)
    assert torch.all(out.cross_attentions[0][1, :, :, 4:] == 0)
    # Future decoder positions too.
    assert torch.all(torch.triu(out.decoder_attentions[0][0, 0], diagonal=1) == 0)
    # In half precision too, with a fully padded row (every score masked): The Annotated Transformer's -1e9 fill is
    # -inf in float16, and such a row would be NaN.
    fully_padded = attention_mask.clone()
    fully_padded[1] = 0
    for dtype in (torch.bfloat16, torch.float16):
        half = tiny_model(attn_implementation="eager").to(dtype)
        logits = half(input_ids=input_ids, attention_mask=fully_padded, decoder_input_ids=input_ids[:, :3]).logits
        assert torch.isfinite(logits.float()).all(), dtype


def test_eager_and_sdpa_agree():
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.randint(4, VOCAB, (2, 5))
    for norm_first in (False, True):
        eager = tiny_model(norm_first=norm_first, attn_implementation="eager")
        sdpa = tiny_model(norm_first=norm_first, attn_implementation="sdpa")
        assert sdpa.config._attn_implementation == "sdpa"
        a = eager(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        b = sdpa(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        assert (a - b).abs().max() < 1e-5


def test_attentions_and_hidden_states_are_returned():
    model = tiny_model(attn_implementation="eager")
    input_ids, attention_mask = padded_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :5],
                output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (2, 4, 7, 7)
    assert len(out.decoder_attentions) == 2 and out.decoder_attentions[0].shape == (2, 4, 5, 5)
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 5, 7)
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3
    assert torch.allclose(out.encoder_attentions[0].sum(-1), torch.ones(2, 4, 7), atol=1e-5)


def test_selected_hidden_states_are_counted_by_each_stacks_depth():
    """`output_hidden_states=[indices]` (transformers >= 5.24) selects by each stack's own depth: a 1+3 model's
    decoder index 3 and -1 are its last layer's output, not an encoder-depth index dropped."""
    if "num_hidden_layers_key" not in OutputRecorder.__dataclass_fields__:
        pytest.skip("this transformers selects no hidden states by index")
    model = tiny_model(encoder_layers=1, decoder_layers=3)
    input_ids, attention_mask = padded_batch()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :5])
    every = model(**kwargs, output_hidden_states=True)
    for selected in ([3], [-1]):
        chosen = model(**kwargs, output_hidden_states=selected)
        assert torch.equal(chosen.decoder_hidden_states[3], every.decoder_hidden_states[3]), selected
    assert torch.equal(chosen.encoder_hidden_states[1], every.encoder_hidden_states[1])  # -1: the encoder's last


@pytest.mark.parametrize("position_embedding_type", ["sinusoidal", "learned"])
def test_over_long_input_is_refused_clearly_on_every_lookup(position_embedding_type):
    """The length check is its own function, run by each way of looking positions up: a run from the cache's length,
    the positions of a padded row's tokens, a packed batch's positions."""
    from modeling.position_lookups import check_positions_fit

    model = tiny_model(position_embedding_type=position_embedding_type)
    positions = model.model.encoder.embeddings.embed_positions
    too_long = r"Sequence position 64 is beyond `max_position_embeddings` \(64\)"
    with pytest.raises(ValueError, match=too_long):
        model(input_ids=torch.randint(4, VOCAB, (1, 65)), decoder_input_ids=torch.tensor([[1]]))
    with pytest.raises(ValueError, match=too_long):
        model(input_ids=torch.randint(4, VOCAB, (1, 65)), attention_mask=torch.ones(1, 65, dtype=torch.long),
              decoder_input_ids=torch.tensor([[1]]))
    for lookup in (lambda: positions(60, 5), lambda: positions.of_tokens(torch.ones(1, 65)),
                   lambda: positions.at(torch.zeros(1, 65, dtype=torch.long)), lambda: positions(torch.tensor(60), 5)):
        with pytest.raises(ValueError, match=too_long):
            lookup()
    assert positions(59, 5).shape == (5, positions.table.shape[1])  # the last position itself fits
    check_positions_fit(positions.table, 63)


def test_loss_equals_direct_cross_entropy_and_labels_are_shifted():
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    labels = torch.randint(4, VOCAB, (2, 5))
    labels[1, 3:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    decoder_input_ids = shift_tokens_right(labels, pad_token_id=0, decoder_start_token_id=1)
    assert decoder_input_ids[0, 0] == 1 and torch.equal(decoder_input_ids[0, 1:], labels[0, :-1])
    assert decoder_input_ids[1, 4] == 0  # -100 became padding
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    assert torch.allclose(out.loss, expected, atol=1e-6)
    # num_items_in_batch: the summed loss divided by the tokens of the whole accumulated batch
    total = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=20).loss
    assert torch.allclose(total, expected * 8 / 20, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients():
    input_ids, attention_mask = padded_batch()
    labels = torch.randint(4, VOCAB, (2, 5))
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(dropout=0.0).train()
        if checkpointing:
            enable_checkpointing(model)
            assert model.model.encoder.layers[0].gradient_checkpointing
        # the encoder's layers keep no cache: handed `use_cache=True` (the config's default), checkpointing warned
        # "Caching is incompatible with gradient checkpointing in AnnotatedTransformerEncoderLayer"
        layer_kwargs = []
        model.model.encoder.layers[0].register_forward_pre_hook(
            lambda module, args, kwargs: layer_kwargs.append(kwargs), with_kwargs=True
        )
        assert model.config.use_cache
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        assert layer_kwargs and not any(kwargs.get("use_cache") for kwargs in layer_kwargs)
        grads.append(model.model.encoder.layers[0].self_attn.q_proj.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_set_input_embeddings_repoints_every_tied_use():
    model = tiny_model()
    new = torch.nn.Embedding(VOCAB, 32)
    model.set_input_embeddings(new)
    assert model.get_input_embeddings() is new
    assert model.model.encoder.get_input_embeddings() is new and model.model.decoder.get_input_embeddings() is new
    model.tie_weights()
    assert model.lm_head.weight is new.weight


# ---- the model refuses what it cannot compute ------------------------------------------------------------------------


@pytest.mark.parametrize("where, bad_id", [("input_ids", 40), ("input_ids", -1), ("decoder_input_ids", 45),
                                           ("labels", 40)])
def test_token_ids_outside_the_vocabulary_are_refused_by_name(where, bad_id):
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    inputs = {"input_ids": input_ids.clone(), "attention_mask": attention_mask, "decoder_input_ids": input_ids.clone()}
    if where == "labels":
        inputs["labels"] = input_ids.clone()
        inputs["labels"][0, 1] = bad_id
        inputs["labels"][1, 5] = -100  # ignored positions are fine
    else:
        inputs[where][0, 2] = bad_id
    with pytest.raises(ValueError, match=rf"`{where}` holds the token id {bad_id}, outside the vocabulary \[0, 39\]"):
        model(**inputs)


def test_a_training_forward_reads_its_token_id_ranges_in_one_device_sync(monkeypatch):
    """The labels, the source and the decoder inputs are checked together: one sync, not one per stack (on a GPU
    the GPU waits after each sync while the host queues work again). Only for that call: every call checks again,
    so ids changed in any way between calls (in place, through `.data`, in a copy) are refused."""
    syncs = []
    ranges = input_checks._token_id_ranges
    monkeypatch.setattr(input_checks, "_token_id_ranges",
                        lambda tensors: syncs.append(len(tensors)) or ranges(tensors))
    model = tiny_model()
    input_ids, attention_mask = padded_batch()
    labels = input_ids.clone()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert syncs == [3]  # labels, input_ids, the decoder inputs built from the labels
    with torch.inference_mode():
        model(input_ids=input_ids.clone(), attention_mask=attention_mask, labels=labels.clone())
    assert syncs == [3, 3]
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    model(attention_mask=attention_mask, labels=labels, encoder_outputs=encoder_outputs)
    assert syncs == [3, 3, 1, 2]  # the encoder's own; then the labels and the decoder inputs
    model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=labels)  # no labels: per stack
    assert syncs == [3, 3, 1, 2, 1, 1]
    input_ids.data[0, 1] = 45
    copied = copy.deepcopy(input_ids)
    for source in (input_ids, copied):
        with pytest.raises(ValueError, match="`input_ids` holds the token id 45"):
            model(input_ids=source, attention_mask=attention_mask, labels=labels)
    model.resize_token_embeddings(30)
    with pytest.raises(ValueError, match=r"`labels` holds the token id 3\d, outside the vocabulary \[0, 29\]"):
        model(input_ids=input_ids.clamp(max=29), attention_mask=attention_mask, labels=labels)


def test_generate_refuses_source_ids_outside_the_vocabulary():
    input_ids, attention_mask = padded_batch()
    with pytest.raises(ValueError, match=r"`input_ids` holds the token id 99"):
        tiny_model().generate(input_ids.masked_fill(input_ids == input_ids[0, 0], 99), max_new_tokens=3)


def test_the_decoder_alone_without_the_encoders_output_is_refused():
    """Each decoder layer attends to the encoder's output (§3.2.3): the decoder called alone without
    `encoder_hidden_states` is refused in one line, where its encoder-decoder attention ran on the decoder's own states
    and filled the self-attention cache twice; with them it gives the whole model's decoder states."""
    model = tiny_model().eval()
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = input_ids[:, :4]
    with pytest.raises(ValueError, match=r"^The decoder needs `encoder_hidden_states`: each of its layers attends"):
        model.get_decoder()(input_ids=decoder_input_ids)
    whole = model.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    alone = model.get_decoder()(input_ids=decoder_input_ids, encoder_hidden_states=whole.encoder_last_hidden_state,
                                encoder_attention_mask=attention_mask)
    torch.testing.assert_close(alone.last_hidden_state, whole.last_hidden_state, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(1, 0), (0, 4)])
def test_an_empty_input_is_refused_by_name(shape):
    """torch would fail deep inside attention, reshaping the heads of zero tokens."""
    model = tiny_model()
    empty, one = torch.zeros(shape, dtype=torch.long), torch.ones(1, 1, dtype=torch.long)
    for inputs in ({"input_ids": empty, "decoder_input_ids": one}, {"input_ids": one, "decoder_input_ids": empty}):
        with pytest.raises(ValueError, match=re.escape(f"Empty input: (batch, length) = {shape}; give at least one")):
            model(**inputs)
    with pytest.raises(ValueError, match="Empty input"):
        model.generate(empty, max_new_tokens=3)


@pytest.mark.parametrize("mask_shape", [(1, 7), (2, 5), (2, 9), (3, 7)])
def test_an_attention_mask_of_another_shape_is_refused(mask_shape):
    model = tiny_model()
    input_ids, _ = padded_batch()
    mask = torch.ones(mask_shape, dtype=torch.long)
    with pytest.raises(ValueError, match=rf"`attention_mask` has shape \({mask_shape[0]}, {mask_shape[1]}\), but the "
                                         r"tokens it masks are \(batch, length\) = \(2, 7\)"):
        model(input_ids=input_ids, attention_mask=mask, decoder_input_ids=input_ids)
    with pytest.raises(ValueError, match="`attention_mask` has shape"):
        model.generate(input_ids, attention_mask=mask, max_new_tokens=3)


def test_a_decoder_attention_mask_of_another_shape_is_refused():
    input_ids, attention_mask = padded_batch()
    with pytest.raises(ValueError, match=r"`decoder_attention_mask` has shape \(2, 3\), but .* = \(2, 7\)"):
        tiny_model()(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids,
                     decoder_attention_mask=torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("num_beams", [0, -1])
def test_generate_refuses_fewer_than_one_beam(num_beams):
    input_ids, attention_mask = padded_batch()
    with pytest.raises(ValueError, match=rf"`num_beams` must be >= 1 .*got {num_beams}"):
        tiny_model().generate(input_ids, attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=3)


def test_a_tied_config_resized_then_given_a_new_vocab_size_builds_a_model_as_transformers_tests_do():
    """transformers' common test resizes a model (which resizes its config, shared with the test), then sets
    `config.vocab_size = 4` alone and builds another model: tied, the source vocabulary follows."""
    config = tiny_config()
    model = AnnotatedTransformerForConditionalGeneration(config)
    embeddings = model.resize_token_embeddings(config.vocab_size + 10)
    assert embeddings.weight.shape[0] == config.vocab_size == config.src_vocab_size == VOCAB + 10
    config.vocab_size = 4
    config.pad_token_id = 3
    small = AnnotatedTransformerForConditionalGeneration(config)
    assert small.config.src_vocab_size == 4 and small.model.shared.weight.shape[0] == 4
    small.resize_token_embeddings(14)
    ids = torch.randint(3, 14, (2, 5))
    assert small(input_ids=ids, labels=ids).logits.shape[-1] == 14
    untied = tiny_config(tie_word_embeddings=False, src_vocab_size=30)
    untied.vocab_size = 50  # untied, the two vocabularies stay apart
    assert untied.src_vocab_size == 30
