"""Learning the Transformer with this package: the code behind docs/annotated.md, the guided walk through the model
in the order of the paper's Figure 1, and its notebook. A readable greedy decoder with the key/value cache (`greedy`),
the copy task trained by transformers' `Seq2SeqTrainer` (`copy_task`), the small computations each step of the walk
shows, every one made with the package's own functions (`demonstrations`), the pictures drawn from them (`figures`,
matplotlib being an optional extra), the checks of the walk's exercises (`exercises`), their reference solutions,
which the walk uses where a learner's answer does not pass yet (`solutions`), its last section's real translator
(`multi30k`: the shipped model, Multi30k's validation pairs, BLEU) and its printed tables (`tables`).
`scripts/make_figures.py` writes the pictures and refreshes the page and its notebooks with the repository's tools
(tools/annotated_page/, not installed). Imports the model, `data`, `inference` (matplotlib's loader, the model's
loader), `training` (the Noam schedule, the copy task) and the tokenizer; nothing in the package imports it."""
