"""The Annotated Transformer's first example, in plain PyTorch: a tiny model learns to copy random symbols.

A self-contained check of the model alone (no tokenizer, no data files, no Trainer), run by the test suite;
`scripts/train.py` trains the same task through the full pipeline.
"""

import torch

from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration
from ..tokenization import SPECIAL_TOKENS
from .schedule import get_noam_schedule

FIRST_SYMBOL = len(SPECIAL_TOKENS)  # ids 0-3 are <pad> <s> </s> <unk>, as the tokenizer numbers them


def copy_batch(batch_size: int, length: int, vocab_size: int, eos_token_id: int, generator: torch.Generator):
    """Random symbol sequences followed by </s>; the target is the source."""
    symbols = torch.randint(FIRST_SYMBOL, vocab_size, (batch_size, length), generator=generator)
    sequence = torch.cat([symbols, torch.full((batch_size, 1), eos_token_id)], dim=1)
    return sequence, sequence.clone()


def train_copy_task(steps: int = 350, batch_size: int = 64, length: int = 10, vocab_size: int = 14,
                    noam_factor: float = 0.25, warmup: int = 100, seed: int = 0, **config_overrides):
    """Train a tiny model on the copy task with Adam and the Noam schedule (§5.3; `noam_factor` is its factor, as
    the base learning rate of `get_noam_schedule`); returns (model, token accuracy of greedy decoding on held-out
    data)."""
    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", **{"vocab_size": vocab_size, "dropout": 0.0, "label_smoothing": 0.1, **config_overrides}
    )
    model = AnnotatedTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=noam_factor, betas=(0.9, 0.98), eps=1e-9)
    scheduler = get_noam_schedule(optimizer, config.d_model, warmup)  # §5.3
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        input_ids, labels = copy_batch(batch_size, length, vocab_size, config.eos_token_id, generator)
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    model.eval()
    input_ids, labels = copy_batch(200, length, vocab_size, config.eos_token_id, torch.Generator().manual_seed(seed + 1))
    generated = model.generate(input_ids, max_new_tokens=length + 1, do_sample=False, num_beams=1)
    predicted = generated[:, 1 : length + 2]  # drop the decoder start token
    accuracy = (predicted == labels).float().mean().item()
    return model, accuracy
