"""scripts/train.py as it runs on an AMD CPU, on any CPU: `generate()` multiplies with weights in oneDNN's layout
(`modeling.onednn_linear`, on AMD's CPUs only; ONEDNN_LINEAR=1 on any), so the tests of exact resumption cover
that path too."""

import os
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ["ONEDNN_LINEAR"] = "1"
    sys.argv[0] = str(Path(__file__).resolve().parents[1] / "scripts" / "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
