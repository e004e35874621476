"""Text to batches: parallel corpora read from files or through `datasets`, filtered and tokenized (`corpus`), the
token-budget batches of §5.1 (`batching`), and packed batches of one fixed shape (`packing`). Used by training, by
evaluation and translation, and by the benchmark; imports only the package's root (the tokenizer)."""
