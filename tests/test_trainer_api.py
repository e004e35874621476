"""The private Trainer API the run relies on, pinned: a transformers release that renames a private method or
changes its parameters fails here, by name, instead of the run silently skipping what it adds (an override that is
no longer called) or failing mid-training. docs/architecture.md says why each one is needed."""

import inspect

import pytest
from transformers import Seq2SeqTrainer, Trainer

from modeling.training.trainer import TransformerSeq2SeqTrainer

# Overridden: the save, around which transformers has no hook (a resumed stop's checkpoint removed before the first
# save rotates any; a failed save cleaned up and reported in one line).
OVERRIDDEN = {"_save_checkpoint": ["self", "model", "trial"]}
# Called: the save itself, for a stop's step the save strategy did not save (`run.stop_after_signal`); the folder a
# save goes to; the columns the model takes, for the token-budget dataloader.
CALLED = {
    "_save_checkpoint": ["self", "model", "trial"],
    "_get_output_dir": ["self", "trial"],
    "_remove_unused_columns": ["self", "dataset", "description"],
}


@pytest.mark.parametrize("name", sorted({**OVERRIDDEN, **CALLED}))
def test_each_private_method_used_has_the_signature_it_is_used_with(name):
    assert name in vars(Trainer) or name in vars(Seq2SeqTrainer), f"transformers' Trainer has no {name} any more"
    expected = {**OVERRIDDEN, **CALLED}[name]
    assert list(inspect.signature(getattr(Seq2SeqTrainer, name)).parameters) == expected
    if name in OVERRIDDEN:
        assert list(inspect.signature(vars(TransformerSeq2SeqTrainer)[name]).parameters) == expected


def test_no_other_private_trainer_method_is_overridden():
    private = {name for name in vars(TransformerSeq2SeqTrainer)
               if name.startswith("_") and not name.startswith("__") and callable(getattr(Trainer, name, None))}
    assert private == set(OVERRIDDEN)


def test_the_noam_schedule_is_marked_as_created_where_the_trainer_reads_the_mark():
    """`create_scheduler` sets `_created_lr_scheduler`, which the Trainer reads to rebuild the schedule when it
    wraps the optimizer again (FSDP, DeepSpeed): the mark must still be the Trainer's."""
    assert "_created_lr_scheduler" in inspect.getsource(Trainer)
