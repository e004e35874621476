# transformers' common model tests (ModelTesterMixin, GenerationTesterMixin, PipelineTesterMixin) against the
# Annotated Transformer, in the shape of transformers' tests/models/marian/test_modeling_marian.py (MarianModelTest):
# the same tester sizes and token ids, only the classes differ (they join transformers' lists of model class names,
# and the decoder gets the encoder's output in Marian's cached-decoding check). No common test is skipped; one is
# overridden, as transformers' own T5 test overrides it for encoder-decoders: `test_custom_4d_attention_mask` (see
# there). Marian's tests of its own features (shared or resized decoder embeddings, fp16 generate on an accelerator)
# are left out. `ANNOTATED_CONFIG`, a JSON object in the environment, is merged into the tester's config arguments
# (e.g. '{"norm_first": true}'), to rerun the whole suite with another model setting. It runs from inside a
# transformers checkout's tests/ tree (its relative imports): see run.sh beside it.
"""Testing suite for the AnnotatedTransformer model, with transformers' common mixins."""

import json
import os
import tempfile
import unittest

from transformers import is_torch_available
from transformers.models.auto import modeling_auto
from transformers.testing_utils import (
    require_torch,
    set_config_for_less_flaky_test,
    set_model_for_less_flaky_test,
    torch_device,
)

from ...generation.test_utils import GenerationTesterMixin
from ...test_configuration_common import ConfigTester
from ...test_modeling_common import ModelTesterMixin, ids_tensor
from ...test_pipeline_mixin import PipelineTesterMixin

from modeling import (
    AnnotatedTransformerConfig,
    AnnotatedTransformerForConditionalGeneration,
    AnnotatedTransformerModel,
)
from modeling.compatibility import CACHE_NAME
from modeling.modeling_annotated_transformer import AnnotatedTransformerDecoder, AnnotatedTransformerEncoder

if is_torch_available():
    import torch
    import torch.nn.functional as F

# Extra config arguments for the whole suite, e.g. ANNOTATED_CONFIG='{"norm_first": true}' (see run.sh): they
# override the tester's own.
EXTRA_CONFIG_KWARGS = json.loads(os.environ.get("ANNOTATED_CONFIG") or "{}")
if not isinstance(EXTRA_CONFIG_KWARGS, dict):
    raise ValueError(f"ANNOTATED_CONFIG must be a JSON object, got {os.environ['ANNOTATED_CONFIG']!r}")

# The mixins tell a base model from a model with a head, and which labels to build, by transformers' own lists of
# class names (a built-in model is in them, a model registered with the Auto classes is not): our classes join them
# under their model type, as Marian's are there under "marian".
modeling_auto.MODEL_MAPPING_NAMES[AnnotatedTransformerConfig.model_type] = "AnnotatedTransformerModel"
modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES[AnnotatedTransformerConfig.model_type] = (
    "AnnotatedTransformerForConditionalGeneration"
)


def prepare_annotated_inputs_dict(
    config,
    input_ids,
    decoder_input_ids,
    attention_mask=None,
    decoder_attention_mask=None,
):
    # same as Marian's prepare_marian_inputs_dict (including its `decoder_attention_mask: attention_mask`)
    if attention_mask is None:
        attention_mask = input_ids.ne(config.pad_token_id)
    if decoder_attention_mask is None:
        decoder_attention_mask = decoder_input_ids.ne(config.pad_token_id)

    return {
        "input_ids": input_ids,
        "decoder_input_ids": decoder_input_ids,
        "attention_mask": attention_mask,
        "decoder_attention_mask": attention_mask,
    }


class AnnotatedTransformerModelTester:
    # same sizes and token ids as MarianModelTester
    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        use_labels=False,
        vocab_size=99,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=4,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=100,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(
            3,
        )
        input_ids[:, -1] = self.eos_token_id  # Eos Token

        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)

        config = self.get_config()
        inputs_dict = prepare_annotated_inputs_dict(config, input_ids, decoder_input_ids)
        return config, inputs_dict

    def get_config(self):
        kwargs = dict(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            activation_function=self.hidden_act,
            dropout=self.hidden_dropout_prob,
            attention_dropout=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )
        kwargs.update(EXTRA_CONFIG_KWARGS)  # ANNOTATED_CONFIG
        return AnnotatedTransformerConfig(**kwargs)

    def prepare_config_and_inputs_for_common(self):
        config, inputs_dict = self.prepare_config_and_inputs()
        return config, inputs_dict

    def create_and_check_decoder_model_past_large_inputs(self, config, inputs_dict):
        # Marian's check (cached decoding of 3 more tokens equals decoding them all at once), with one change: Marian
        # runs its decoder without encoder states (its causal-LM mode, MarianForCausalLM), which this model's decoder
        # refuses, so each call gets the encoder's output of the same source.
        model = AnnotatedTransformerModel(config=config).to(torch_device).eval()
        decoder = model.get_decoder()
        input_ids = inputs_dict["input_ids"]
        attention_mask = inputs_dict["attention_mask"]
        encoder = {"encoder_hidden_states": model.get_encoder()(input_ids, attention_mask=attention_mask)[0],
                   "encoder_attention_mask": attention_mask}

        # first forward pass
        outputs = decoder(input_ids, attention_mask=attention_mask, use_cache=True, **encoder)

        output, past_key_values = outputs.to_tuple()

        # create hypothetical multiple next token and extent to next_input_ids
        next_tokens = ids_tensor((self.batch_size, 3), config.vocab_size)
        next_attn_mask = ids_tensor((self.batch_size, 3), 2)

        # append to next input_ids and
        next_input_ids = torch.cat([input_ids, next_tokens], dim=-1)
        next_attention_mask = torch.cat([attention_mask, next_attn_mask], dim=-1)

        output_from_no_past = decoder(next_input_ids, attention_mask=next_attention_mask, **encoder)[
            "last_hidden_state"
        ]
        output_from_past = decoder(
            next_tokens, attention_mask=next_attention_mask, **{CACHE_NAME: past_key_values}, **encoder
        )["last_hidden_state"]

        # select random slice
        random_slice_idx = ids_tensor((1,), output_from_past.shape[-1]).item()
        output_from_no_past_slice = output_from_no_past[:, -3:, random_slice_idx].detach()
        output_from_past_slice = output_from_past[:, :, random_slice_idx].detach()

        self.parent.assertTrue(output_from_past_slice.shape[1] == next_tokens.shape[1])

        # test that outputs are equal for slice
        self.parent.assertTrue(torch.allclose(output_from_past_slice, output_from_no_past_slice, atol=1e-3))

    def check_encoder_decoder_model_standalone(self, config, inputs_dict):
        model = AnnotatedTransformerModel(config=config).to(torch_device).eval()
        outputs = model(**inputs_dict)

        encoder_last_hidden_state = outputs.encoder_last_hidden_state
        last_hidden_state = outputs.last_hidden_state

        with tempfile.TemporaryDirectory() as tmpdirname:
            encoder = model.get_encoder()
            encoder.save_pretrained(tmpdirname)
            encoder = AnnotatedTransformerEncoder.from_pretrained(tmpdirname).to(torch_device)

        encoder_last_hidden_state_2 = encoder(inputs_dict["input_ids"], attention_mask=inputs_dict["attention_mask"])[
            0
        ]

        self.parent.assertTrue((encoder_last_hidden_state_2 - encoder_last_hidden_state).abs().max().item() < 1e-3)

        with tempfile.TemporaryDirectory() as tmpdirname:
            decoder = model.get_decoder()
            decoder.save_pretrained(tmpdirname)
            decoder = AnnotatedTransformerDecoder.from_pretrained(tmpdirname).to(torch_device)

        last_hidden_state_2 = decoder(
            input_ids=inputs_dict["decoder_input_ids"],
            attention_mask=inputs_dict["decoder_attention_mask"],
            encoder_hidden_states=encoder_last_hidden_state,
            encoder_attention_mask=inputs_dict["attention_mask"],
        )[0]

        self.parent.assertTrue((last_hidden_state_2 - last_hidden_state).abs().max().item() < 1e-3)


@require_torch
class AnnotatedTransformerModelTest(ModelTesterMixin, GenerationTesterMixin, PipelineTesterMixin, unittest.TestCase):
    all_model_classes = (AnnotatedTransformerModel, AnnotatedTransformerForConditionalGeneration)
    # what ModelTesterMixin's `all_generative_model_classes` property derives (can_generate()), given explicitly
    all_generative_model_classes = (AnnotatedTransformerForConditionalGeneration,)
    # Marian maps feature-extraction (base model) and text-generation (MarianForCausalLM, which has no counterpart
    # here); transformers 5 has no built-in translation pipeline.
    pipeline_model_mapping = {"feature-extraction": AnnotatedTransformerModel}
    is_encoder_decoder = True
    # Marian sets `test_missing_keys = False`; left at the mixin's default here (nothing disabled).

    def setUp(self):
        self.model_tester = AnnotatedTransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=AnnotatedTransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_save_load_strict(self):
        config, inputs_dict = self.model_tester.prepare_config_and_inputs()
        for model_class in self.all_model_classes:
            model = model_class(config)

            with tempfile.TemporaryDirectory() as tmpdirname:
                model.save_pretrained(tmpdirname)
                model2, info = model_class.from_pretrained(tmpdirname, output_loading_info=True)
            self.assertEqual(info["missing_keys"], set())

    def test_decoder_model_past_with_large_inputs(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs()
        self.model_tester.create_and_check_decoder_model_past_large_inputs(*config_and_inputs)

    def test_encoder_decoder_model_standalone(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs_for_common()
        self.model_tester.check_encoder_decoder_model_standalone(*config_and_inputs)

    # overwrite: keys and values each have their own head size (d_k and d_v, which Table 3's rows (B) set apart), as
    # the keys and values of transformers' DeepSeek sparse-attention models do; the common shapes give both head_dim
    def _get_attention_shape(self, batch_size, seq_length, config):
        key_shape, value_shape = super()._get_attention_shape(batch_size, seq_length, config)
        d_v = config.d_v or config.d_model // value_shape[1]  # d_model / h unless set, h as the common shapes count
        return key_shape, (*value_shape[:-1], d_v)

    # overwrite because the common test is a decoder-only one: it calls the model with `input_ids` and `position_ids`
    # alone, and an encoder-decoder then has no decoder inputs. As in T5's override, the 3 rows and the shared-prefix
    # row are the decoder's (`decoder_input_ids`, and the custom 4D mask as `decoder_attention_mask`), here with their
    # positions too (`decoder_position_ids`), so it checks what the common test does: the shared prefix, masked and
    # positioned as 3 rows, gives the last tokens of the 3 unpacked rows the same distributions. All rows translate
    # the same source (T5's passes a different source to each unpacked row, which the shared-prefix row can't match).
    def test_custom_4d_attention_mask(self):
        for model_class in self.all_generative_model_classes:
            config, input_dict = self.model_tester.prepare_config_and_inputs_for_common()
            set_config_for_less_flaky_test(config)
            model = model_class(config).to(device=torch_device, dtype=torch.float32).eval()
            set_model_for_less_flaky_test(model)

            (
                input_ids,
                position_ids,
                input_ids_shared_prefix,
                mask_shared_prefix,
                position_ids_shared_prefix,
            ) = self._get_custom_4d_mask_test_data()
            source_ids = input_dict["input_ids"][:1]

            logits = model(
                input_ids=source_ids.expand(input_ids.shape[0], -1),
                decoder_input_ids=input_ids,
                decoder_position_ids=position_ids,
            ).logits
            # logits.shape == torch.Size([3, 4, ...])

            logits_shared_prefix = model(
                input_ids=source_ids,
                decoder_input_ids=input_ids_shared_prefix,
                decoder_attention_mask=mask_shared_prefix,
                decoder_position_ids=position_ids_shared_prefix,
            ).logits
            # logits_shared_prefix.shape == torch.Size([1, 6, ...])

            out_last_tokens = logits[:, -1, :]  # last tokens in each batch line
            out_shared_prefix_last_tokens = logits_shared_prefix[0, -3:, :]  # last three tokens

            # comparing softmax-normalized logits:
            normalized_0 = F.softmax(out_last_tokens, dim=-1)
            normalized_1 = F.softmax(out_shared_prefix_last_tokens, dim=-1)
            torch.testing.assert_close(normalized_0, normalized_1, rtol=1e-3, atol=1e-3)
