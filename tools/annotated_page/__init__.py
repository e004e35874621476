"""The tooling of docs/annotated.md, the learners' walk: code excerpts pulled from the live source (`excerpts`),
printed results and the page's marker blocks that hold them (`page`), the notebooks made from the page (`notebook`),
where an exercise's answer must not show (`giveaways`), the page's checks (`checks`) and the pictures' data
(`figure_data`).
`scripts/make_figures.py` runs it from a checkout; the installed package keeps what a learner calls
(`modeling.learning`)."""
