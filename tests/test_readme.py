"""The README's usage example runs as written."""

import re
from pathlib import Path

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
