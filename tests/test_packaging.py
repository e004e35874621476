"""`pip install .` (not editable) gives the product and only the product: every module of `modeling/` with the data
files it reads (the metric scripts, the model card template), none of the repository's tools (`tools/`: what
regenerates this repository's documents), and no installed module that reaches outside the package for a file."""

import ast
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from modeling.inference.metrics import __file__ as metrics_init
from modeling.inference.model_card import TEMPLATE_PATH

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "modeling"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from a copy of the repository's package, its tools and its project files."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to pyproject.toml
    for folder in ("modeling", "tools", "scripts"):
        shutil.copytree(REPO_ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path)], check=True, capture_output=True, timeout=300,
    )
    (built,) = tmp_path.glob("*.whl")
    return built


def test_the_wheel_carries_the_apache_license_its_metadata_names(wheel):
    """LICENSE is the Apache License 2.0, which pyproject.toml names as an SPDX expression (setuptools 77 reads that
    form, so the build floor says 77) and the wheel carries beside its metadata."""
    import tomllib

    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0" and project["project"]["license-files"] == ["LICENSE"]
    floor = next(requirement for requirement in project["build-system"]["requires"]
                 if requirement.startswith("setuptools"))
    assert tuple(int(part) for part in floor.split(">=")[1].split(".")) >= (77,)
    archive = zipfile.ZipFile(wheel)
    metadata = archive.read(next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA")))
    assert b"License-Expression: Apache-2.0" in metadata
    licenses = [name for name in archive.namelist() if ".dist-info/licenses/" in name]
    assert [name.rsplit("/", 1)[1] for name in licenses] == ["LICENSE"]
    assert archive.read(licenses[0]).decode("utf-8") == text


def test_the_wheel_holds_every_module_of_the_package_and_its_data_files_and_nothing_else(wheel):
    names = {name for name in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in name}
    modules = {path.relative_to(REPO_ROOT).as_posix() for path in PACKAGE.rglob("*.py")}
    data = {TEMPLATE_PATH.relative_to(REPO_ROOT).as_posix()}
    assert TEMPLATE_PATH.is_relative_to(PACKAGE) and Path(metrics_init).is_relative_to(PACKAGE)
    assert any(name.startswith("modeling/inference/metrics/") and name != "modeling/inference/metrics/__init__.py"
               for name in modules)
    assert names == modules | data
    assert not any(name.startswith(("tools/", "scripts/")) for name in names)


def outside_reaches(path: Path, package_root: Path) -> list[str]:
    """The places in the module at `path` that build a path from `__file__` climbing above `package_root`
    (`.parent` and `.parents[n]` chains), as "line N"."""
    depth = len(path.relative_to(package_root).parts)  # the climbs that stay inside the package
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        climbs, inner = 0, node
        while True:
            if isinstance(inner, ast.Attribute) and inner.attr == "parent":
                climbs, inner = climbs + 1, inner.value
            elif (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Attribute)
                  and inner.value.attr == "parents" and isinstance(inner.slice, ast.Constant)):
                climbs, inner = climbs + inner.slice.value + 1, inner.value.value
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "resolve":
                inner = inner.func.value
            else:
                break
        rooted = isinstance(inner, ast.Call) and any(isinstance(arg, ast.Name) and arg.id == "__file__"
                                                     for arg in inner.args)
        if rooted and climbs > depth:
            found.append(f"line {node.lineno}")
    return found


def test_no_installed_module_reaches_outside_the_package_for_files(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    installed = site / "modeling"
    reaching = {path.relative_to(site).as_posix(): lines for path in sorted(installed.rglob("*.py"))
                if (lines := outside_reaches(path, installed))}
    assert reaching == {}
    # Imported from the installed copy, away from the checkout: every module, and each path it holds at its top
    # level lies inside the installed package.
    program = """
import importlib, json, pathlib, pkgutil, sys
import modeling
root = pathlib.Path(modeling.__file__).resolve().parent
outside = {}
for module in pkgutil.walk_packages(modeling.__path__, "modeling."):
    values = vars(importlib.import_module(module.name)).items()
    paths = [f"{name}={value}" for name, value in values if isinstance(value, pathlib.Path)
             and not value.resolve().is_relative_to(root)]
    if paths:
        outside[module.name] = paths
print(json.dumps({"root": str(root), "outside": outside}))
"""
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = subprocess.run([sys.executable, "-c", program], cwd=work, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert Path(report["root"]) == installed.resolve()
    assert report["outside"] == {}


def test_the_reach_check_finds_a_path_above_the_package(tmp_path):
    module = tmp_path / "modeling" / "figures" / "formats.py"
    module.parent.mkdir(parents=True)
    module.write_text("from pathlib import Path\nREPOSITORY = Path(__file__).resolve().parents[2]\n"
                      "HERE = Path(__file__).parent\nTEMPLATE = Path(__file__).resolve().parent.parent / 'card.md'\n")
    assert outside_reaches(module, tmp_path / "modeling") == ["line 2"]


# an import name -> the distribution that provides it, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}


def third_party_imports(paths) -> dict[str, str]:
    """import name -> the first file importing it, over `paths` (absolute imports of modules outside the standard
    library and the package itself)."""
    found = {}
    for path in paths:
        for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("modeling", "tools"):
                    found.setdefault(top, Path(path).relative_to(REPO_ROOT).as_posix())
    return found


def declared_distributions() -> set[str]:
    """The distributions pyproject.toml names: its dependencies and every extra's."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {re.split(r"[\s<>=!~;\[@]", requirement, maxsplit=1)[0].lower().replace("_", "-")
            for requirement in requirements}


def test_every_package_the_code_imports_is_declared():
    """What the package and its scripts import is a dependency or in an extra: a fresh install has it."""
    code = [*(REPO_ROOT / "modeling").rglob("*.py"), *(REPO_ROOT / "scripts").glob("*.py")]
    imported = third_party_imports(code)
    assert {"torch", "transformers", "numpy", "tqdm", "huggingface_hub"} <= set(imported)
    missing = {name: where for name, where in imported.items()
               if DISTRIBUTIONS.get(name, name).replace("_", "-") not in declared_distributions()}
    assert missing == {}, f"imported but not declared in pyproject.toml: {missing}"


# ---- the installed product --------------------------------------------------------------------------------------

TOOLING_SUBPACKAGES = ("benchmarking",)  # the repository's lab: speed against Marian, the data benchmark, Table 3


def tooling_modules(sources: dict[str, str]) -> list[str]:
    """The modules of `sources` (wheel path -> text) that are repository tooling, not the product: a subpackage of
    the lab, or code that needs the checkout (imports its `tools`, or runs `git`)."""
    found = []
    for name, text in sources.items():
        parts = name.split("/")
        if any(part in TOOLING_SUBPACKAGES for part in parts[1:-1]):
            found.append(f"{name} (the lab: {'/'.join(parts[:-1])})")
        elif re.search(r"^\s*(from|import) tools\b", text, flags=re.M):
            found.append(f"{name} (imports the checkout's tools)")
        elif re.search(r"""["']git["']""", text):
            found.append(f"{name} (runs git)")
    return found


def test_the_tooling_check_names_the_lab_the_checkouts_tools_and_git():
    assert tooling_modules({
        "modeling/benchmarking/run.py": "", "modeling/x.py": "from tools.figures import y\n",
        "modeling/y.py": "subprocess.run(['git', 'rev-parse', 'HEAD'])\n", "modeling/z.py": "import torch\n",
    }) == ["modeling/benchmarking/run.py (the lab: modeling/benchmarking)", "modeling/x.py (imports the checkout's tools)",
           "modeling/y.py (runs git)"]


def test_the_wheel_holds_no_repository_tooling(wheel):
    archive = zipfile.ZipFile(wheel)
    sources = {name: archive.read(name).decode("utf-8") for name in archive.namelist() if name.endswith(".py")}
    assert sources and tooling_modules(sources) == []


INSTALLED_USE = """
import json, pathlib, sys
import torch
import modeling
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling.learning import exercises, solutions, table3_results

here, trained, benchmarks = pathlib.Path.cwd(), pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
config = AnnotatedTransformerConfig.from_preset("tiny", vocab_size=40, d_model=32, encoder_attention_heads=2,
                                                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64)
model = AnnotatedTransformerForConditionalGeneration(config).eval()
model.save_pretrained(here / "tiny")
reloaded = AutoModelForSeq2SeqLM.from_pretrained(here / "tiny", trust_remote_code=True).eval()
input_ids = torch.tensor([[5, 6, 7, 2]])
same = torch.equal(model.generate(input_ids, max_new_tokens=5), reloaded.generate(input_ids, max_new_tokens=5))
translator = pipeline("translation", model=str(trained), trust_remote_code=True)
translation = translator(["1 2 3"], num_beams=2, max_new_tokens=8)[0]["translation_text"]
checked = exercises.problem("causal_mask", solutions.causal_mask)
measured = table3_results.load_table3(benchmarks)
print(json.dumps({"package": modeling.__file__, "same": same, "translation": translation, "checked": checked,
                  "table3_rows": len(measured.rows), "measured_runs": measured.measured_runs}))
"""


@pytest.mark.slow  # a virtual environment, the wheel installed in it, a training run: about a minute
def test_the_installed_wheel_trains_saves_loads_generates_translates_and_teaches(wheel, tmp_path):
    """The wheel installed in a fresh virtual environment outside the checkout (no -e, no checkout on the path;
    the dependencies are this environment's, seen through a path file, which does not read their folder's own path
    files, the checkout's editable install among them): its training command trains the copy task a few steps, a
    tiny model saves, loads and generates, the translation pipeline runs on the trained folder, and the learner's
    helpers work, the Table 3 reader on the results folder it is given."""
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    trained = work / "copy"
    run = subprocess.run(
        [str(venv / "bin" / "annotated-transformer-train"), "--preset", "tiny", "--d_model", "32", "--ffn_dim", "64",
         "--max_steps", "3", "--max_tokens", "256", "--max_train_samples", "64", "--max_eval_samples", "4",
         "--max_test_samples", "4", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
         "--disable_tqdm", "true", "--use_cpu", "true", "--output_dir", str(trained)],
        cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (trained / "config.json").is_file() and (trained / "model.safetensors").is_file()
    used = subprocess.run([str(python), "-c", INSTALLED_USE, str(trained), str(REPO_ROOT / "benchmarks")], cwd=work,
                          env=env, capture_output=True, text=True, timeout=600)
    assert used.returncode == 0, used.stderr[-3000:]
    report = json.loads(used.stdout.strip().splitlines()[-1])
    assert Path(report["package"]).is_relative_to(Path(site)) and not Path(report["package"]).is_relative_to(REPO_ROOT)
    assert report["same"] is True and isinstance(report["translation"], str) and report["checked"] is None
    assert report["table3_rows"] == len(json.loads((REPO_ROOT / "benchmarks" / "paper-table3.json").read_text())["rows"])
    assert report["measured_runs"] > 0
