"""Learning the Transformer with this package: the code behind docs/annotated.md, the guided walk through the model
in the order of the paper's Figure 1. A readable greedy decoder with the key/value cache (`greedy`), the small
computations each step of the walk shows, every one made with the package's own functions (`demonstrations`), and
the pictures drawn from them (`figures`, matplotlib being an optional extra); `scripts/make_figures.py` writes the
pictures and refreshes the page with the repository's tools (tools/annotated_page/, not installed). Imports the
model, `data`, `inference` (the attention heatmaps) and `training` (the Noam schedule, the copy task); nothing in the
package imports it."""
