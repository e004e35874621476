"""Repository tools: what regenerates this repository's documents. Not part of the installed package; the
scripts in scripts/ run them from a checkout."""
