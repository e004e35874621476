"""scripts/train.py as it runs on an AMD CPU, on any CPU: `generate()` multiplies with prepacked weights
(`modeling.prepacked_linear`, on AMD's CPUs only), so the tests of exact resumption cover that path too."""

import runpy
import sys
from pathlib import Path

import modeling.prepacked_linear

modeling.prepacked_linear.prepacking_pays = lambda: True

if __name__ == "__main__":
    sys.argv[0] = str(Path(__file__).resolve().parents[1] / "scripts" / "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
