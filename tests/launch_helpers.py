"""Running scripts/train.py under `accelerate launch` in a subprocess, and loading its output folder in a fresh one."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tools.processes import free_port  # noqa: F401 - the tests take it from here

REPO_ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO_ROOT / "scripts" / "train.py"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# The scripts import `modeling` from this checkout, wherever the editable install of the package points.
SCRIPT_ENV = {**OFFLINE_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.getenv("PYTHONPATH")]))}

def load_script(name: str):
    """scripts/<name>.py as a module, its main() callable (a script is not a package module)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_one_line_error(stderr: str, prog: str, pattern: str) -> None:
    """A script's refusal: exactly one line, `prog: error: ...`, matching `pattern`."""
    assert stderr.startswith(f"{prog}: error: ") and stderr.count("\n") == 1, stderr
    assert re.search(pattern, stderr), stderr


# Prepended to a script run with `python -c`: importing this project's package fails, so the script proves that a
# saved folder works where the package is not installed (its code travels in the folder).
WITHOUT_THIS_PACKAGE = textwrap.dedent(
    """
    import importlib.abc, sys
    class BlockOurPackage(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "modeling" or name.startswith("modeling."):
                raise ModuleNotFoundError(name)
    sys.meta_path.insert(0, BlockOurPackage())
    """
)

# Enough for a few optimizer steps and evaluations of a tiny model in seconds.
QUICK = [
    "--max_train_samples", "200", "--max_tokens", "256", "--warmup_steps", "4", "--logging_steps", "1",
    "--report_to", "none", "--disable_tqdm", "true",
]


def accelerate_launch(launch_args, train_args, *, env=None, timeout=600, check=True) -> subprocess.CompletedProcess:
    """`accelerate launch <launch_args> scripts/train.py <train_args>`; with `check`, fails the test, with the output,
    on error."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), *launch_args, str(TRAIN_SCRIPT), *train_args,
    ]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env={**os.environ, **SCRIPT_ENV, **(env or {})}, capture_output=True, text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
    return result


FRESH_PROCESS_CHECK = textwrap.dedent(
    """
    import json, sys
    sys.modules["modeling"] = None  # the project package must not be needed: the folder carries its code
    import sacrebleu
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    folder, sources, references = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    hypotheses = []
    for source in sources:  # one at a time: no padding
        generated = model.generate(**tokenizer([source], return_tensors="pt"), num_beams=2, max_length=33)
        hypotheses.append(tokenizer.decode(generated[0], skip_special_tokens=True).strip())
    print(json.dumps({
        "class": type(model).__module__ + "." + type(model).__name__,
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "exact_match": 100 * sum(h == r for h, r in zip(hypotheses, references)) / len(references),
    }))
    """
)


def score_in_a_fresh_process(folder: Path, sources, references, cwd: Path) -> dict:
    """Load `folder` with the Auto classes in a new Python process without this package, translate `sources` with
    beam search (2 beams, on the CPU) and score against `references`: {"class", "bleu", "exact_match"}."""
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_CHECK, str(folder), json.dumps(list(sources)),
         json.dumps(list(references))],
        cwd=cwd, env={**os.environ, **OFFLINE_ENV, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
