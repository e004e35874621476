"""The tooling of docs/annotated.md, the learners' walk: code excerpts pulled from the live source (`excerpts`),
printed results (`printouts`) and the page's marker blocks that hold them (`page`). `scripts/make_figures.py` runs
it from a checkout; the installed package keeps what a learner calls (`modeling.learning`)."""
