"""The Annotated Transformer's first example: a tiny model learns to copy random symbol sequences."""

import torch

from modeling.training.copy_task import copy_batch, train_copy_task


def test_copy_batches_end_with_eos_and_copy_the_source():
    source, target = copy_batch(8, 10, 14, eos_token_id=2, generator=torch.Generator().manual_seed(0))
    assert source.shape == (8, 11) and torch.all(source[:, -1] == 2)
    assert torch.all((source[:, :-1] >= 4) & (source[:, :-1] < 14))
    assert torch.equal(source, target)


def test_tiny_model_learns_the_copy_task():
    _, accuracy = train_copy_task(steps=350)
    print(f"copy task token accuracy: {accuracy:.4f}")
    assert accuracy > 0.95
