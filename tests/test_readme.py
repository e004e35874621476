"""The README's usage example runs as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_usage_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["loss"].item() > 0
    assert namespace["generated"].shape[0] == 1 and namespace["generated"][0, 0] == 1
    assert type(namespace["reloaded"]).__name__ == "AnnotatedTransformerForConditionalGeneration"
    assert (tmp_path / "my-transformer" / "modeling_annotated_transformer.py").exists()


CI = README.parent / ".ci" / "run"


def test_ci_runs_the_readmes_two_commands_in_a_venv_inside_the_checkout():
    """.ci/run is the newcomer: `python -m venv .venv` in the checkout, activated, then the README's commands as
    tools/readme_commands.py reads them (no copy of them of its own, which could drift)."""
    from tools.readme_commands import problems, readme_commands

    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert problems(commands) == []
    assert "python -m venv .venv && . .venv/bin/activate" in " ".join(README.read_text(encoding="utf-8").split())
    ci = CI.read_text(encoding="utf-8")
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines.index("python -m venv .venv") < lines.index(". .venv/bin/activate")
    assert lines.index(". .venv/bin/activate") < next(i for i, line in enumerate(lines) if "readme_commands.py)" in line)
    assert not any("pip install" in line or line == "python -m pytest" for line in lines)  # no copy of its own


def test_the_readme_commands_reader_joins_continued_lines_and_skips_comments():
    from tools.readme_commands import problems, readme_commands

    text = ("# x\n\n## Install and run\n\nWords.\n\n```bash\n# 1. train\npip install torch==2.13.0 && \\\n"
            "    accelerate launch scripts/train.py\n\n# 2. test\npython -m pytest\n```\n\n```bash\nnot this\n```\n")
    assert readme_commands(text) == ["pip install torch==2.13.0 && accelerate launch scripts/train.py",
                                     "python -m pytest"]
    assert problems(["python -m pytest"]) == ["expected 2 commands, found 1: ['python -m pytest']"]
    assert problems(["echo", "python -m pytest"]) == ["the first command does not train (scripts/train.py): echo"]


@pytest.mark.slow  # an accelerate launch (40 s); CI runs -m slow
def test_a_refusal_under_accelerate_launch_quiet_reaches_the_user_as_train_pys_one_line(tmp_path):
    """The README launches with `accelerate launch -q`: a refused run shows train.py's one line, not the launcher's
    traceback around it (which a plain `accelerate launch` adds, as the second run shows)."""
    from launch_helpers import REPO_ROOT, SCRIPT_ENV, TRAIN_SCRIPT

    missing = tmp_path / "no-such-corpus"
    outputs = {}
    for quiet in (True, False):
        command = [sys.executable, "-m", "accelerate.commands.launch", *(["-q"] if quiet else []), "--num_processes",
                   "1", "--num_machines", "1", "--dynamo_backend", "no", "--mixed_precision", "no",
                   str(TRAIN_SCRIPT), "--data_dir", str(missing), "--output_dir", str(tmp_path / "run")]
        outputs[quiet] = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **SCRIPT_ENV},
                                        capture_output=True, text=True, timeout=300)
    quiet = outputs[True]
    assert quiet.returncode != 0
    assert "Traceback" not in quiet.stderr, quiet.stderr
    refusal = [line for line in quiet.stderr.splitlines() if line.startswith("train.py: ")]
    assert len(refusal) == 1 and str(missing) in refusal[0], quiet.stderr
    assert "Traceback" in outputs[False].stderr and "CalledProcessError" in outputs[False].stderr
    assert not (tmp_path / "run").exists()


def test_the_readme_installs_the_cpu_build_of_the_torch_the_cpu_figures_were_measured_with():
    """Both commands take torch pinned from PyTorch's CPU index first (pip prefers its `+cpu` build to PyPI's CUDA
    build of the same version; a machine without that index falls back to PyPI), the version the CPU recipes' figures
    name, and .ci/run runs exactly these commands (above)."""
    import json

    from tools.readme_commands import readme_commands

    commands = readme_commands(README.read_text(encoding="utf-8"))
    runs = json.loads((README.parent / "benchmarks" / "results-recipes-cpu.json").read_text())["runs"]
    measured = {run["software"]["torch"] for run in runs.values()}
    assert len(measured) == 1 and next(iter(measured)).endswith("+cpu")
    version = next(iter(measured)).removesuffix("+cpu")
    for command in commands:
        first = command.split(" && ")[0]
        assert first == f"pip install torch=={version} --extra-index-url https://download.pytorch.org/whl/cpu", command
