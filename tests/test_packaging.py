"""`pip install .` (not editable) gives a package that trains and scores: its data files travel in the wheel."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from modeling.inference.metrics import __file__ as metrics_init
from modeling.inference.model_card import TEMPLATE_PATH

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "modeling"


def test_the_wheel_holds_every_module_the_metric_scripts_and_the_model_card_template(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to pyproject.toml
    shutil.copytree(PACKAGE, source / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path)], check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {path.relative_to(REPO_ROOT).as_posix() for path in PACKAGE.rglob("*.py")}
    expected |= {TEMPLATE_PATH.relative_to(REPO_ROOT).as_posix()}
    assert TEMPLATE_PATH.is_relative_to(PACKAGE) and Path(metrics_init).is_relative_to(PACKAGE)
    assert any(name.startswith("modeling/inference/metrics/") and name != "modeling/inference/metrics/__init__.py" for name in expected)
    assert expected - names == set()
