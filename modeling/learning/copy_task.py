"""The copy task trained by transformers' `Seq2SeqTrainer`, for the walk to set beside the training loop it writes
out: the same task (random symbols, then </s>; the target is the source), the same Adam and Noam schedule (§5.3), the
label smoothing of the model's own loss (§5.4). `scripts/train.py` trains with the package's subclass,
`TransformerSeq2SeqTrainer`, which adds token-budget batches (§5.1) read from a `datasets` table; the walk needs
neither, and runs where only the notebook's packages are installed.
"""

from __future__ import annotations

import tempfile

import torch

from ..configuration_annotated_transformer import AnnotatedTransformerConfig
from ..modeling_annotated_transformer import AnnotatedTransformerForConditionalGeneration
from ..training.copy_task import copy_batch
from ..training.schedule import get_noam_schedule


def train_with_seq2seq_trainer(steps: int = 350, batch_size: int = 64, length: int = 10, vocab_size: int = 14,
                               noam_factor: float = 0.25, warmup_steps: int = 100, logging_steps: int = 50,
                               seed: int = 0) -> tuple[AnnotatedTransformerForConditionalGeneration, dict[int, float]]:
    """The tiny preset trained on the copy task by `Seq2SeqTrainer` (on the CPU, nothing saved); returns the model
    in eval mode and the training loss the Trainer logged every `logging_steps` steps, {step: loss}."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments  # the Trainer needs accelerate: imported here
    from transformers.trainer_callback import PrinterCallback

    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=vocab_size, dropout=0.0, label_smoothing=0.1)
    model = AnnotatedTransformerForConditionalGeneration(config)
    input_ids, labels = copy_batch(steps * batch_size, length, vocab_size, config.eos_token_id,
                                   torch.Generator().manual_seed(seed))
    pairs = [{"input_ids": source, "labels": target} for source, target in zip(input_ids, labels)]
    optimizer = torch.optim.Adam(model.parameters(), lr=noam_factor, betas=(0.9, 0.98), eps=1e-9)  # lr: the factor
    with tempfile.TemporaryDirectory() as folder:
        arguments = Seq2SeqTrainingArguments(
            output_dir=folder, max_steps=steps, per_device_train_batch_size=batch_size, logging_steps=logging_steps,
            max_grad_norm=0.0, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=seed,
        )  # max_grad_norm 0: no clipping, as the paper's training
        trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=pairs,
                                 optimizers=(optimizer, get_noam_schedule(optimizer, config.d_model, warmup_steps)))
        trainer.remove_callback(PrinterCallback)  # the log is returned, not printed
        trainer.train()
    losses = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    return model.eval(), losses


@torch.no_grad()
def greedy_accuracy(model, length: int = 10, samples: int = 200, seed: int = 1) -> float:
    """The share of tokens (</s> included) that greedy decoding (`generate()`) copies right, on `samples` new random
    sequences of the copy task."""
    config = model.config
    input_ids, labels = copy_batch(samples, length, config.vocab_size, config.eos_token_id,
                                   torch.Generator().manual_seed(seed))
    generated = model.generate(input_ids, max_new_tokens=length + 1, do_sample=False, num_beams=1)[:, 1:]
    predicted = torch.full_like(labels, config.pad_token_id)  # a row that stopped early: <pad> after it
    predicted[:, : generated.shape[1]] = generated[:, : labels.shape[1]]
    return (predicted == labels).float().mean().item()


__all__ = ["greedy_accuracy", "train_with_seq2seq_trainer"]
