#!/usr/bin/env bash
# transformers' common model tests against the model (test_modeling_annotated.py beside this file), then, to compare,
# MarianMTModel's own test class. transformers' tests are not in its wheel: give a source checkout of the installed
# version, and install the packages its tests import:
#   git clone --depth 1 --branch v$(python -c "import transformers; print(transformers.__version__)") \
#       https://github.com/huggingface/transformers /tmp/transformers
#   pip install parameterized pytest-xdist
#   bash benchmarks/transformers_suite/run.sh /tmp/transformers [PYTEST ARGS, e.g. -k "compile or cache"]
# It copies the test file into the checkout's tests/models/annotated/ and exits with our run's status.
# To rerun the suite with another model setting, give config arguments as a JSON object in ANNOTATED_CONFIG: they are
# merged into (and override) the tester's, e.g.
#   ANNOTATED_CONFIG='{"norm_first": true}' bash benchmarks/transformers_suite/run.sh /tmp/transformers
#   ANNOTATED_CONFIG='{"tie_word_embeddings": false}' bash benchmarks/transformers_suite/run.sh /tmp/transformers
#   ANNOTATED_CONFIG='{"d_k": 2}' bash benchmarks/transformers_suite/run.sh /tmp/transformers      # Table 3 (B)
# (Marian's run, for comparison, does not read it.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: bash $0 PATH/TO/transformers [PYTEST ARGS]" >&2; exit 2; }
[ -f "$1/tests/test_modeling_common.py" ] || {
    echo "run.sh: $1 has no tests/test_modeling_common.py: give a transformers source checkout" >&2; exit 2; }
checkout=$(cd "$1" && pwd)
shift
mkdir -p "$checkout/tests/models/annotated"
touch "$checkout/tests/models/annotated/__init__.py"
cp "$here/test_modeling_annotated.py" "$checkout/tests/models/annotated/"
cd "$checkout"
export PYTHONPATH="$checkout:$repo${PYTHONPATH:+:$PYTHONPATH}"
status=0
python -m pytest tests/models/annotated/test_modeling_annotated.py -p no:cacheprovider -q -rfEs "$@" || status=$?
echo "--- MarianMTModel, for comparison"
python -m pytest tests/models/marian/test_modeling_marian.py -k MarianModelTest -p no:cacheprovider -q -rfEs "$@" || true
exit $status
