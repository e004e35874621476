"""The training run: arguments and their checks (`arguments`), the run itself, from corpus to model folder
(`run.train`), the refusals that keep earlier runs and checkpoints safe (`run_safety`), `Seq2SeqTrainer` with the
paper's schedule and batches (`trainer`) and its callbacks, the Noam schedule (`schedule`), checkpoints and their
averaging (`checkpoints`), the run lock (`run_lock`) and the plain-PyTorch copy task (`copy_task`). Imports the
model, `data`, `inference` (evaluation during training, the model card, the Hub upload) and `common`; nothing
imports it but the scripts and the benchmark."""
