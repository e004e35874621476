import warnings
from pathlib import Path

import pytest
import torch
import transformers
from model_helpers import VOCAB, assert_varied, enable_checkpointing, generating_model, padded_batch
from packaging import version
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache

from modeling.compatibility import CACHE_NAME


@pytest.fixture(params=[False, True], ids=["post-norm", "pre-norm"])
def model(request):
    return generating_model(norm_first=request.param)


def test_greedy_with_cache_equals_without_cache(model):
    input_ids, attention_mask = padded_batch()
    with_cache = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=12, use_cache=True)
    without = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=12, use_cache=False)
    assert_varied(with_cache)
    assert torch.equal(with_cache, without)


def test_beam_search_with_cache_equals_without_cache(model):
    input_ids, attention_mask = padded_batch()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=10, num_beams=4)
    with_cache = model.generate(input_ids, use_cache=True, **kwargs)
    assert_varied(with_cache)
    assert torch.equal(with_cache, model.generate(input_ids, use_cache=False, **kwargs))


def test_beam_search_reorders_only_the_self_attention_cache(model, monkeypatch):
    """`_reorder_cache` copies the decoder self-attention cache after each step and leaves the encoder-decoder
    attention's in place; the beams, their scores and the cross-attention cache equal those of a full reorder."""
    input_ids, attention_mask = padded_batch()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=10, num_beams=4, num_return_sequences=4,
                  output_scores=True, return_dict_in_generate=True)
    reordered = []
    full_reorder = DynamicLayer.reorder_cache

    def recording_reorder(layer, beam_idx):
        reordered.append(layer)
        return full_reorder(layer, beam_idx)

    monkeypatch.setattr(DynamicLayer, "reorder_cache", recording_reorder)
    ours = model.generate(input_ids, **kwargs)
    assert_varied(ours.sequences)
    cache = getattr(ours, CACHE_NAME)
    assert all(any(layer is done for done in reordered) for layer in cache.self_attention_cache.layers)
    assert not any(layer is done for layer in cache.cross_attention_cache.layers for done in reordered)

    def full_reorder_cache(self, past, beam_idx):
        past.reorder_cache(beam_idx)
        return past

    monkeypatch.setattr(type(model), "_reorder_cache", full_reorder_cache)
    reordered.clear()
    full = model.generate(input_ids, **kwargs)
    full_cross_layers = getattr(full, CACHE_NAME).cross_attention_cache.layers
    assert any(layer is done for layer in full_cross_layers for done in reordered)
    assert torch.equal(ours.sequences, full.sequences)
    assert torch.equal(ours.sequences_scores, full.sequences_scores)
    for layer, full_layer in zip(cache.cross_attention_cache.layers, full_cross_layers):
        assert torch.equal(layer.keys, full_layer.keys) and torch.equal(layer.values, full_layer.values)


def test_a_callers_max_length_wins_over_the_saved_max_new_tokens(model):
    """train.py saves max_new_tokens in generation_config.json; transformers would let it override max_length."""
    input_ids, attention_mask = padded_batch()
    model.generation_config.max_new_tokens = 8
    kwargs = dict(attention_mask=attention_mask, suppress_tokens=[model.config.eos_token_id])  # the limits decide
    assert model.generate(input_ids, **kwargs).shape[1] == 1 + 8
    assert model.generate(input_ids, max_length=4, **kwargs).shape[1] == 4
    assert model.generate(input_ids, max_length=4, max_new_tokens=6, **kwargs).shape[1] == 1 + 6
    given = GenerationConfig(max_length=4, suppress_tokens=[model.config.eos_token_id])  # as pipeline(...) passes it
    assert model.generate(input_ids, attention_mask=attention_mask, generation_config=given).shape[1] == 4
    given = GenerationConfig(suppress_tokens=[model.config.eos_token_id])  # no length: the saved one holds
    assert model.generate(input_ids, attention_mask=attention_mask, generation_config=given).shape[1] == 1 + 8


def test_a_decoder_only_cache_given_to_generate_is_completed(model):
    """`past_key_values=DynamicCache()` (a decoder-only model's habit) decodes as the default cache does, where the
    cross-attention keys went into the self-attention cache and crashed; a cache holding steps is refused."""
    input_ids, attention_mask = padded_batch()
    for kwargs in (dict(), dict(num_beams=3)):
        default = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=10, **kwargs)
        given = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=10,
                               **{CACHE_NAME: DynamicCache()}, **kwargs)
        assert_varied(default)
        assert torch.equal(given, default)
    filled = DynamicCache()
    filled.update(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8), 0)
    with pytest.raises(ValueError, match="EncoderDecoderCache"):
        model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :1],
              **{CACHE_NAME: filled}, use_cache=True)


def test_a_left_padded_source_translates_as_alone(model):
    """Encoder positions count each row's tokens, so padding on the left (padding_side="left") moves no token."""
    input_ids, attention_mask = padded_batch()
    left_ids, left_mask = input_ids.clone(), attention_mask.clone()
    left_ids[1] = torch.cat([input_ids[1, 4:], input_ids[1, :4]])
    left_mask[1] = torch.cat([attention_mask[1, 4:], attention_mask[1, :4]])
    for kwargs in (dict(), dict(num_beams=3)):
        right = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=10, **kwargs)
        left = model.generate(left_ids, attention_mask=left_mask, max_new_tokens=10, **kwargs)
        assert_varied(right)
        assert torch.equal(left, right)


def test_static_cache_decoding_compiles_without_graph_breaks(model):
    """`_can_compile_fullgraph`: with a static cache, generate() compiles the decoding step with fullgraph=True, which
    fails on any graph break (a host sync, a data-dependent branch). The eager backend traces without inductor. The
    static cache gives the default cache's tokens from transformers 5.23 on (5.17's decodes a padded batch into other
    tokens); the compiled step gives the eager static cache's on any version."""
    from transformers import CompileConfig

    assert model._can_compile_fullgraph
    input_ids, attention_mask = padded_batch()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, do_sample=False)
    dynamic = model.generate(input_ids, **kwargs)
    assert_varied(dynamic)
    static = model.generate(input_ids, cache_implementation="static", **kwargs)
    if version.parse(transformers.__version__) >= version.parse("5.23"):
        assert torch.equal(static, dynamic)
    graphs = []

    def counting_backend(graph, example_inputs, **options):  # options: generate()'s mode="reduce-overhead"
        graphs.append(graph)
        return graph.forward

    compile_config = CompileConfig(fullgraph=True, backend=counting_backend)
    compile_config._compile_all_devices = True  # generate() compiles only on accelerators otherwise
    torch._dynamo.reset()
    compiled = model.generate(input_ids, cache_implementation="static", compile_config=compile_config, **kwargs)
    assert graphs  # the decoding step did go through torch.compile
    assert torch.equal(compiled, static)


def test_cached_step_logits_equal_teacher_forced_logits(model):
    input_ids, attention_mask = padded_batch()
    decoder_input_ids = torch.randint(4, VOCAB, (2, 6))
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    cache, steps = None, []
    for t in range(6):
        out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                    decoder_input_ids=decoder_input_ids[:, t : t + 1], cache=cache, use_cache=True)
        cache = getattr(out, CACHE_NAME)
        steps.append(out.logits)
    assert isinstance(cache, EncoderDecoderCache)
    assert cache.get_seq_length() == 6  # self-attention keys/values grew one step at a time
    assert cache.cross_attention_cache.layers[0].keys.shape[-2] == 7  # computed once over the source
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_the_cache_is_taken_under_either_name_and_returned_under_the_installed_ones(model):
    """transformers 5.24 renamed `past_key_values` to `cache`: a step continues the same cache given either name (the
    old one, where `cache` is the installed name, with transformers' deprecation warning, as its own models give it);
    given both, the call is refused."""
    input_ids, attention_mask = padded_batch()
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    first, second = torch.randint(4, VOCAB, (2, 1)), torch.randint(4, VOCAB, (2, 1))
    steps = {}
    for name in ("cache", "past_key_values"):
        out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=first,
                    use_cache=True)
        cache = getattr(out, CACHE_NAME)
        assert isinstance(cache, EncoderDecoderCache) and cache.get_seq_length() == 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            steps[name] = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                                decoder_input_ids=second, use_cache=True, **{name: cache})
        deprecated = [str(warning.message) for warning in caught if "is deprecated" in str(warning.message)]
        if name == "past_key_values" and CACHE_NAME == "cache":
            assert deprecated == ["`past_key_values` is deprecated for "
                                  "`AnnotatedTransformerForConditionalGeneration.forward`. Use `cache` instead."]
        else:
            assert deprecated == [], name
        assert getattr(steps[name], CACHE_NAME) is cache and cache.get_seq_length() == 2
    torch.testing.assert_close(steps["cache"].logits, steps["past_key_values"].logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="not both"):
        model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=second,
              cache=cache, past_key_values=cache)


def test_every_forward_that_takes_a_cache_lists_both_names_and_the_model_file_names_it_once():
    """The version shim is a decorator (`takes_either_cache_name`), not a parameter and a call in each forward path:
    the signatures, which generate() reads, list `cache` and `past_key_values`; the model file's code uses `cache`."""
    import ast
    import inspect

    import modeling.modeling_annotated_transformer as model_file

    for cls in (model_file.AnnotatedTransformerDecoderLayer, model_file.AnnotatedTransformerDecoder,
                model_file.AnnotatedTransformerModel, model_file.AnnotatedTransformerForConditionalGeneration):
        parameters = inspect.signature(cls.forward).parameters
        assert {"cache", "past_key_values"} <= set(parameters), cls.__name__
        assert parameters["past_key_values"].default is None
    code = ast.parse(Path(model_file.__file__).read_text())
    names = {node.id for node in ast.walk(code) if isinstance(node, ast.Name)}
    names |= {node.arg for node in ast.walk(code) if isinstance(node, ast.arg)}
    assert "past_key_values" not in names and "cache" in names


def test_gradient_checkpointing_in_training_leaves_a_given_cache_untouched(model):
    """A checkpointed layer runs again in backward: transformers' `GradientCheckpointingLayer` drops the cache it is
    given (under the installed version's name), so keys and values are not written twice and backward works."""
    input_ids, attention_mask = padded_batch()
    enable_checkpointing(model, use_reentrant=False)
    model.train()
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=torch.randint(4, VOCAB, (2, 5)),
                cache=cache, use_cache=True)
    out.logits.sum().backward()
    assert cache.get_seq_length() == 0
    assert all(parameter.grad is not None for parameter in model.model.decoder.layers.parameters())


def test_cross_attention_keys_are_computed_once(model):
    input_ids, attention_mask = padded_batch()
    calls = []
    k_proj = model.model.decoder.layers[0].encoder_attn.k_proj
    handle = k_proj.register_forward_hook(lambda *args: calls.append(1))
    try:
        generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=6, min_new_tokens=6)
    finally:
        handle.remove()
    assert generated.shape[1] == 7
    assert len(calls) == 1


def test_padded_batch_equals_each_sentence_alone(model):
    input_ids, attention_mask = padded_batch()
    for kwargs in (dict(), dict(num_beams=3)):
        batch = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=10, **kwargs)
        assert_varied(batch)
        for row, length in enumerate((7, 4)):
            alone = model.generate(input_ids[row : row + 1, :length], max_new_tokens=10, **kwargs)[0]
            assert torch.equal(batch[row, : alone.shape[0]], alone)
            assert torch.all(batch[row, alone.shape[0] :] == model.config.pad_token_id)


def test_beam_search_returns_sorted_hypotheses(model):
    input_ids, attention_mask = padded_batch()
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=4,
                         num_return_sequences=3, length_penalty=0.6, no_repeat_ngram_size=2,
                         output_scores=True, return_dict_in_generate=True)
    assert out.sequences.shape[0] == 6
    assert_varied(out.sequences)
    scores = out.sequences_scores.view(2, 3)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])
    eos = model.config.eos_token_id
    for sequence in out.sequences.tolist():
        tokens = sequence[: sequence.index(eos) + 1] if eos in sequence else sequence  # the filler after </s> is not
        bigrams = list(zip(tokens, tokens[1:]))  # generated (pad, or </s> again when no pad id is set)
        assert len(bigrams) == len(set(bigrams))  # no_repeat_ngram_size=2 holds


def test_sampling_is_reproducible_and_respects_top_k(model):
    input_ids, attention_mask = padded_batch()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, do_sample=True, top_k=5, top_p=0.9,
                  temperature=0.7)
    torch.manual_seed(1)
    first = model.generate(input_ids, **kwargs)
    assert_varied(first)
    torch.manual_seed(1)
    again = model.generate(input_ids, use_cache=False, **kwargs)
    assert torch.equal(first, again)
    # top_k=1 sampling is greedy decoding
    greedy = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8)
    assert_varied(greedy)
    torch.manual_seed(2)
    top1 = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, do_sample=True, top_k=1)
    assert torch.equal(greedy, top1)
