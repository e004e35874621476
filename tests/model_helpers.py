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


def generating_model(seed: int = 3, **overrides) -> AnnotatedTransformerForConditionalGeneration:
    """A tiny untrained model whose generations vary with the source and the step, so equalities between ways of
    generating (cache or not, padded or alone, beams) compare real sequences. It is untied: an untrained tied model
    only repeats the decoder start token (its output matrix is its input embedding, and the residual path carries the
    input through), so every way of generating would agree."""
    return tiny_model(seed, tie_word_embeddings=False, **overrides)


def trained_to_copy(model: AnnotatedTransformerForConditionalGeneration, steps: int = 200, seed: int = 0):
    """`model` after `steps` Adam steps on copying random 8-token sequences (about 1 s per 100 steps), in eval
    mode: a tied model's generations then follow its source (an untrained one only repeats the start token)."""
    torch.manual_seed(seed)  # dropout
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.zero_grad(set_to_none=True)
    model.train()
    for _ in range(steps):
        source = torch.randint(4, model.config.vocab_size, (16, 8), generator=generator)
        labels = torch.cat([source, torch.full((16, 1), model.config.eos_token_id)], dim=1)
        model(input_ids=source, attention_mask=torch.ones_like(source), labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def enable_checkpointing(model, **checkpoint_kwargs) -> None:
    """Gradient (activation) checkpointing of every layer, under transformers' newer name where it has one (5.17, the
    lowest supported, has only `gradient_checkpointing_enable`, which 5.24 deprecates)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpoint_kwargs or None)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpoint_kwargs or None)


def assert_varied(sequences: torch.Tensor, minimum: int = 3) -> None:
    """`generate()` output that can tell generation bugs apart: at least `minimum` distinct tokens after the decoder
    start token, and not every row the same."""
    generated = sequences[:, 1:]
    assert len(set(generated.flatten().tolist())) >= minimum, f"degenerate generations: {sequences.tolist()}"
    assert not all(torch.equal(row, generated[0]) for row in generated[1:]), f"identical rows: {sequences.tolist()}"


def padded_batch(seed: int = 0):
    """Two right-padded source sentences (ids >= 4, so no special tokens inside) of lengths 7 and 4."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, VOCAB, (2, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 4:] = 0
    attention_mask[1, 4:] = 0
    return input_ids, attention_mask


def training_batch(lengths, padded_to: int = 8, seed: int = 0):
    """Source ids right-padded to a multiple of `padded_to`, with labels one longer (as the collator makes them)."""
    generator = torch.Generator().manual_seed(seed)
    width = -(-max(lengths) // padded_to) * padded_to
    input_ids = torch.randint(4, VOCAB, (len(lengths), width), generator=generator)
    attention_mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    labels = torch.randint(4, VOCAB, (len(lengths), width + 1), generator=generator)
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
