"""Small builders shared by the model tests."""

import torch

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration

VOCAB = 40


def tiny_config(**overrides) -> AnnotatedTransformerConfig:
    settings = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    settings.update(overrides)
    return AnnotatedTransformerConfig(**settings)


def tiny_model(seed: int = 0, **overrides) -> AnnotatedTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return AnnotatedTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def padded_batch(seed: int = 0):
    """Two right-padded source sentences (ids >= 4, so no special tokens inside) of lengths 7 and 4."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, VOCAB, (2, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 4:] = 0
    attention_mask[1, 4:] = 0
    return input_ids, attention_mask
